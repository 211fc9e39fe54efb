"""The judge: runs a lesson's checks against a notebook, each check in its own worker process (grader/processes.py
starts them and talks to them; grader/worker.py is what runs inside).

A lesson module (grader/lessons/*.py) declares its checks with `@lesson.check(points, title, needs)`.
A check gets a `Context`: it makes inputs and references here, asks the worker to call the student's
function (`ctx.call`), and judges the raw outputs here, in a process that never ran student code.
"""
import contextlib
import dataclasses
import hashlib
import os
import shutil
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import editions, notebook, sandbox, structure, wire
from .messages import MESSAGES, text
from .processes import Hangs, Timings, Worker, WorkerGone, Zygotes
from .notebook_checks import mismatch, nan_framed, todo_message, unfinished_todos

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = Path(__file__).resolve().parent / "source"


def source_path(lesson_id):
    return SOURCE_DIR / lesson_id / f"{lesson_id}.ipynb"


class CheckFailed(Exception):
    """A check's verdict: what is wrong, in words a learner can act on."""


@dataclass
class Check:
    id: str
    points: float
    title: str
    fn: object
    needs: tuple = ()          # graded names this check calls: their TODOs must be done
    kernels: tuple = ()        # Triton kernels that the wrapper must launch
    modes: tuple = ("gpu", "interpreter")  # modes that run `fn`; structure mode uses the static checks
    timeout: float = 240
    compile_only: bool = False  # runs the kernels through Triton's compiler for real GPUs, never launches them
    interpreted: bool = False  # runs in Triton's interpreter in every mode (on a GPU machine too): the memory check
    zh: str = None             # the title in the Chinese edition

    def title_in(self, language):
        return self.zh if language == "zh" and self.zh else self.title


@dataclass
class Result:
    id: str
    points: float
    max_points: float
    passed: bool
    message: str
    runs: int = 1         # how many times the check ran (grader check --repeat)
    failed_runs: int = 0


@dataclass
class Report:
    lesson: str
    mode: str
    tests: list = field(default_factory=list)
    language: str = "en"   # the submission's edition (not part of the JSON of COURSE_SPEC §6)

    @property
    def score(self):
        return round(sum(t.points for t in self.tests), 3)

    @property
    def max_score(self):
        return round(sum(t.max_points for t in self.tests), 3)

    def as_json(self):
        return {"lesson": self.lesson, "mode": self.mode, "score": self.score, "max_score": self.max_score,
                "tests": [{k: getattr(t, k) for k in ("id", "points", "max_points", "passed", "message")}
                          for t in self.tests]}  # the keys of COURSE_SPEC §6, exactly


# What a Triton lesson's wrapper may not call: torch attention, softmax or any matrix product does the work
# the kernel should do (the names as the worker records them).
TORCH_DOES_THE_WORK = ("softmax", "log_softmax", "scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                       "flex_attention", "multi_head_attention_forward",
                       "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "baddbmm", "addmm", "tensordot",
                       # the same, seen at the ATen level (torch.ops.aten.mm bypasses the torch functions above)
                       "aten.mm", "aten.bmm", "aten.addmm", "aten.baddbmm", "aten.addbmm", "aten.mv", "aten.addmv",
                       "aten.dot", "aten._softmax", "aten._log_softmax", "aten._safe_softmax",
                       "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention",
                       "aten._scaled_dot_product_cudnn_attention", "aten._scaled_dot_product_flash_attention_for_cpu",
                       "aten._flash_attention_forward", "aten._efficient_attention_forward")


def _call_reply(name, reply, language="en"):
    """(out, grads, info) of a `call` reply, after checking that every part has the type the checks expect."""
    def bad(what):
        return CheckFailed(text("malformed_record", language, name=name, what=what))
    if type(reply) is not list or len(reply) != 3 or type(reply[2]) is not dict:
        raise bad("not [output, gradients, facts]")
    out, grads, info = reply
    expected = {"launched": list, "forbidden": list, "largest_numel": int, "largest_shape": list,
                "inputs_modified": list, "seconds": (int, float), "stores_past_end": list, "out_of_bounds": list}
    if set(info) != set(expected) or not all(isinstance(info[k], t) and type(info[k]) is not bool
                                             for k, t in expected.items()):
        raise bad("facts")
    if not all(type(l) is list and len(l) == 3 and type(l[0]) is str and type(l[1]) is str and type(l[2]) is int
               for l in info["launched"]):
        raise bad("launched kernels")
    if not all(type(c) is list and len(c) == 3 and type(c[0]) is str and type(c[1]) is list and type(c[2]) is int
               and all(type(s) is list and all(type(n) is int for n in s) for s in c[1]) for c in info["forbidden"]):
        raise bad("torch calls")
    if not all(type(n) is int for n in info["largest_shape"] + info["inputs_modified"]) or \
            not all(type(s) is list and all(type(n) is int for n in s) for s in info["stores_past_end"]):
        raise bad("sizes")
    if grads is not None and type(grads) is not list:
        raise bad("gradients")
    if not all(type(f) is dict and (f == {"removed": True} or _is_access(f)) for f in info["out_of_bounds"]):
        raise bad("memory accesses")
    return out, grads, info


def _is_access(found):
    """An access outside the tensors, as worker.MemoryGuard reports it (plain data, checked field by field)."""
    ints = lambda xs: type(xs) is list and all(type(x) is int for x in xs)
    tensor = found.get("tensor")
    return (set(found) == {"kind", "kernel", "outside", "accessed", "axes", "block", "program", "tensor", "where",
                           "code"} and type(found["block"]) is int
            and found["kind"] in ("load", "store", "atomic") and all(type(found[k]) is str for k in
                                                                     ("kernel", "where", "code"))
            and type(found["outside"]) is int and type(found["accessed"]) is int and ints(found["program"])
            and type(found["axes"]) is list and all(ints(a) and len(a) == 4 for a in found["axes"])
            and (tensor is None or (type(tensor) is list and len(tensor) == 2 and type(tensor[0]) is str
                                    and ints(tensor[1]))))


def out_of_bounds_message(name, found, language="en"):
    """What an access outside every tensor of a kernel launch costs (Context.call(..., sanitize=True))."""
    if found.get("removed"):
        return text("guard_removed", language, name=name)
    words = MESSAGES["access_outside_words"][language if language in ("en", "zh") else "en"]
    two_d = len(found["axes"]) and max(a for a, *_ in found["axes"]) <= 1 and found["block"] == 2
    partial = [words[("rows", "columns")[axis] if two_d else "axis"].format(axis=axis, lo=lo, hi=hi, n=n)
               for axis, n, lo, hi in found["axes"]]
    tensor = found["tensor"]
    return text("access_outside", language, kernel=found["kernel"], name=name, kind=words[found["kind"]],
                outside=found["outside"], accessed=found["accessed"], where=found["where"] or "?",
                code=found["code"], program=tuple(found["program"]),
                positions=words["and"].join(partial) or words["every"],
                tensor=words["into"].format(tensor=tensor[0], shape=tuple(tensor[1])) if tensor else "",
                other=words["other"] if found["kind"] == "load" else "")


class Lesson:
    """The checks of one lesson, in the order they are graded."""

    def __init__(self, id, graded, kernels=(), forbidden=(), structure_needs=(), pytorch_only=False):
        self.id = id
        # a lesson without Triton kernels needs no interpreter, so its checks run for real in every mode
        self.default_modes = ("gpu", "interpreter", "structure") if pytorch_only else ("gpu", "interpreter")
        self.graded = graded              # graded names (COURSE_SPEC §3)
        self.kernels = kernels            # which of them are Triton kernels
        self.forbidden = forbidden        # calls that may not appear in graded functions
        self.structure_needs = structure_needs  # {function: [expressions it must use]}
        self.checks = []

    def check(self, points, title, needs=(), kernels=(), modes=None, timeout=240, compile_only=False, zh=None,
              interpreted=False):
        """Register a check; `title` in English and `zh` in Chinese (what the feedback of each edition shows)."""
        def register(fn):
            self.checks.append(Check(fn.__name__, points, title, fn, tuple(needs), tuple(kernels),
                                     tuple(modes or self.default_modes), timeout, compile_only,
                                     interpreted=interpreted, zh=zh))
            return fn
        return register


class Context:
    """What a check uses: inputs, calls into the worker, and verdicts with clear messages."""

    def __init__(self, lesson, check, mode, worker, seed, program="", reference=None, language="en", quiet=None):
        self.lesson, self.check, self.mode, self.worker = lesson, check, mode, worker
        self.language = language        # the submission's edition: what its messages are written in
        self.seed = seed
        self.gen = torch.Generator().manual_seed(seed)
        self.gpu = mode == "gpu"
        self.program = program          # the submission's program, as the judge made it (never read back from disk)
        self._reference = reference     # () -> a Worker running the reference solution (speed comparisons)
        self._quiet = quiet             # an Event set once the submission's other checks are done (None: no wait)
        self._warmed = set()
        self._reference_jobs = None     # the reference worker's start and warm-ups, beside the check (one thread)
        self._pending = []
        self.last_info = None
        self.last_args = None

    def t(self, english, chinese):
        """A message of a check in the submission's language: ctx.fail(ctx.t(f"…", f"…"))."""
        return chinese if self.language == "zh" else english

    # ── inputs ────────────────────────────────────────────────────────────────────────────────────
    def randn(self, *shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=self.gen, dtype=torch.float64) * scale).to(dtype)

    def pick(self, gpu, interpreter):
        return gpu if self.gpu else interpreter

    # ── calls into the student's code ─────────────────────────────────────────────────────────────
    def _send(self, op, timeout=None, worker=None, **payload):
        reply = (worker or self.worker).request(op, payload, timeout or self.check.timeout)
        if "error" in reply:
            raise CheckFailed(text("raised", self.language, error=reply["error"][1]))
        return reply["ok"]

    def call(self, name, *args, backward=None, allow_torch=False, sanitize=False, **kwargs):
        """Call the student's `name` in the worker; returns its output (and grads when backward= is given).
        Floating-point tensor arguments travel inside NaN (nan_framed), so a read past a row or past the end of a
        tensor shows in the output; `ctx.last_args` holds them as the worker got them."""
        args = tuple(nan_framed(a) for a in args)
        kwargs = {k: nan_framed(v) for k, v in kwargs.items()}
        self.last_args = args
        reply = self._send("call", name=name, args=list(args), kwargs=kwargs, backward=backward,
                           **({"sanitize": True} if sanitize else {}))
        out, grads, info = _call_reply(name, reply, self.language)
        self.last_info = info
        if sanitize and not self.check.interpreted:
            raise RuntimeError(f"check {self.check.id}: ctx.call(sanitize=True) needs interpreted=True")
        for found in info["out_of_bounds"]:
            raise CheckFailed(out_of_bounds_message(name, found, self.language))
        for i in info["inputs_modified"]:
            raise CheckFailed(text("input_changed", self.language, name=name, index=i))
        for shape in info["stores_past_end"]:
            raise CheckFailed(text("store_past_end", self.language, name=name, shape=tuple(shape)))
        self.kernels_launched_from_submission(name, info, self.check.kernels)
        if not allow_torch:
            self.no_forbidden_calls(name, info)
        return (out, grads) if backward is not None else out

    def kernels_launched_from_submission(self, name, info, kernels):
        """Each kernel in `kernels` was launched, and the launched kernel is the one defined in the submission's own
        program under that name (not a kernel of the same name from anywhere else)."""
        definitions = structure.definition_lines(self.program)
        for kernel in kernels:
            launches = [launch for launch in info["launched"] if launch[0] == kernel]
            if not launches:
                names = sorted({launch[0] for launch in info["launched"]})
                raise CheckFailed(text("not_launched", self.language, name=name, kernel=kernel,
                                       launched=", ".join(names) or text("no_kernel", self.language)))
            for _, filename, line in launches:
                if filename != self.worker.program_path or line not in definitions.get(kernel, ()):
                    raise CheckFailed(text("not_yours", self.language, name=name, kernel=kernel))

    def no_forbidden_calls(self, name, info, allowed=()):
        banned = [c for c in info["forbidden"] if c[0] in self.lesson.forbidden and c[0] not in allowed]
        if banned:
            op, shapes, _ = banned[0]
            raise CheckFailed(text("forbidden", self.language, name=name, op=op, shapes=[tuple(s) for s in shapes]))

    def warm_up(self, name, *args, key="student", backward=False, **kwargs):
        """One untimed call of `name` (the student's, or the reference's with key="reference") on these inputs, once
        per shape: Triton compiles and autotunes now, beside the other checks, and a timing later measures kernels.
        The reference's warm-ups run beside the student's (a thread of their own); the first timing waits for them."""
        shape = (key, name, backward, _shape_of(args), _shape_of(sorted(kwargs.items())))
        if shape in self._warmed:
            return
        self._warmed.add(shape)

        def warm():
            worker = self._reference() if key == "reference" else self.worker
            done = self._send("warm", worker=worker, name=name, args=list(args), kwargs=kwargs, key="student",
                              backward=backward)
            if done is not None:
                raise CheckFailed(text("bad_timing", self.language, name=name, what=wire.describe_type(done)))
        if key == "reference":
            self._pending.append(self._reference_side().submit(warm))
        else:
            warm()

    def _reference_side(self):
        if self._reference_jobs is None:
            self._reference_jobs = ThreadPoolExecutor(1, thread_name_prefix=f"reference-{self.check.id}")
        return self._reference_jobs

    def _settle_reference(self):
        """Wait for the reference's start and warm-ups running beside the check: their errors are the check's."""
        pending, self._pending = self._pending, []
        for job in pending:
            job.result()

    def finish(self):
        """The check is over: let the reference's thread end before its worker is closed."""
        if self._reference_jobs is not None:
            self._reference_jobs.shutdown(wait=True, cancel_futures=True)

    def bench(self, name, *args, key="student", backward=False, **kwargs):
        """Milliseconds of one call of `name` (the student's, or with key="reference" the reference solution's, timed
        in a worker of its own that never ran student code), once every other check is done."""
        self.warm_up(name, *args, key=key, backward=backward, **kwargs)
        self._settle_reference()
        if self._quiet is not None:
            self._quiet.wait()
        worker = self._reference() if key == "reference" else self.worker
        ms = self._send("bench", worker=worker, name=name, args=list(args), kwargs=kwargs, key="student",
                        backward=backward)
        if type(ms) not in (int, float) or not ms > 0:
            raise CheckFailed(text("bad_timing", self.language, name=name, what=wire.describe_type(ms)))
        return float(ms)

    def best_times(self, first, second, within, rounds=3):
        """(ms, ms): the best of up to `rounds` interleaved timings of two measurements (zero-argument callables).

        Another process on the same GPU (a class graded in parallel) can slow any one timing by 2× or more, but
        never makes a slow kernel fast. So the two are timed in turn, and another round is taken only while the
        first's best time is above `within` × the second's: what is really too slow stays so in every round, and
        a correct kernel is not failed for a noisy neighbour."""
        best_first = best_second = float("inf")
        for _ in range(rounds):
            best_first, best_second = min(best_first, first()), min(best_second, second())
            if best_first <= within * best_second:
                break
        return best_first, best_second

    def bench_against_reference(self, name, *args, slowdown_allowed, rounds=3, backward=False, **kwargs):
        """(student ms, reference ms), timed in turn until the student is within `slowdown_allowed` (best_times); both
        warmed up first."""
        for key in ("student", "reference"):
            self.warm_up(name, *args, key=key, backward=backward, **kwargs)
        def timing(key):
            return lambda: self.bench(name, *args, key=key, backward=backward, **kwargs)
        return self.best_times(timing("student"), timing("reference"), slowdown_allowed, rounds)

    def load_reference(self):
        """Start the reference solution's worker now, beside the check's other work (its start is never timed)."""
        self._pending.append(self._reference_side().submit(self._reference))

    def aot(self, kernel, signature, constexprs, capabilities=(80, 90), **options):
        shared = self._send("aot", kernel=kernel, signature=signature, constexprs=constexprs,
                            capabilities=list(capabilities), **options)
        if type(shared) is not dict or not all(type(v) is int for v in shared.values()) \
                or set(shared) != {str(c) for c in capabilities}:
            raise CheckFailed(text("bad_compile", self.language, kernel=kernel, what=wire.describe_type(shared)))
        return {int(cc): v for cc, v in shared.items()}

    def ttir(self, kernel, signature, constexprs, capability=90, **options):
        """The Triton IR (text) of the student's kernel compiled for a real GPU: a compile_only check reads it."""
        ir = self._send("ttir", kernel=kernel, signature=signature, constexprs=constexprs, capability=capability,
                        **options)
        if type(ir) is not str:
            raise CheckFailed(text("bad_compile", self.language, kernel=kernel, what=wire.describe_type(ir)))
        return ir

    # ── verdicts ──────────────────────────────────────────────────────────────────────────────────
    def fail(self, message):
        raise CheckFailed(message)

    def expect_close(self, got, exact, same_precision=None, what="output", factor=4.0, floor=None):
        """Compare with a float64 `exact` result. The allowed error is `factor` × the error that the same
        computation done by PyTorch in the input's precision makes (`same_precision`), at least `floor`."""
        exact = exact.detach()
        dtype = same_precision.dtype if same_precision is not None else (got.dtype if isinstance(got, torch.Tensor) else torch.float32)
        floor = floor if floor is not None else {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(dtype, 1e-5 if not self.gpu else 2e-3)
        name, language = str(dtype).replace("torch.", ""), self.language
        atol, rule = floor, text("rule_floor", language, floor=floor, dtype=name)
        if same_precision is not None:
            own = (same_precision.double() - exact.double()).abs().nan_to_num(0).max().item()
            if factor * own > floor:
                atol = factor * own
                rule = text("rule_factor", language, atol=atol, factor=factor, dtype=name, own=own)
            else:
                tf32 = text("tf32", language) if self.gpu and dtype == torch.float32 else ""
                rule = text("rule_factor_floor", language, floor=floor, factor=factor, dtype=name, own=own, tf32=tf32)
        problem = mismatch(got, exact.to(dtype), atol, 0.0, rule=rule, what=what, language=language)
        if problem:
            raise CheckFailed(problem)


def _shape_of(value):
    """What decides which kernels a call compiles: tensors' dtype, shape and strides; other values as they are."""
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), tuple(value.shape), value.stride())
    if isinstance(value, (list, tuple)):
        return tuple(_shape_of(v) for v in value)
    return repr(value)


def static_problems(lesson, check, program, functions, language="en"):
    """Problems found without running anything: missing names, unfinished TODOs."""
    for name in check.needs:
        if name not in functions:
            return text("not_defined", language, name=name)
    todos = [(name, unfinished_todos(functions[name])) for name in check.needs]
    todos = [(name, found) for name, found in todos if found]
    if not todos:
        return None
    name, found = todos[0]
    number, hint = found[0]
    also = ", ".join(text("todo_in", language, numbers=", ".join(str(n) for n, _ in f), name=fn) for fn, f in todos)
    return todo_message(number, name, hint, language) + text("unfinished", language, todos=also)


def submission_seed(program, check_id):
    """The seed of a check's random inputs, taken from the submission's code: the same notebook gets the same
    inputs, hence the same grade, in every regrade and in any shard of a class (a wrong kernel that only some
    inputs expose would otherwise gain or lose points on a regrade); any edit of the code draws new inputs."""
    digest = hashlib.sha256(f"{check_id}\n{program}".encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "little")


def grading_jobs(mode):
    """How many checks of one submission run at once: FA_GRADING_JOBS, else one per CPU core in interpreter and
    structure modes (the interpreter is CPU-bound), and on a GPU one per two cores, 2 to 8 (a check's time there is
    mostly the CPU's: Triton's compiles and the judge's references; its small shapes leave the GPU idle)."""
    if os.environ.get("FA_GRADING_JOBS"):
        return max(1, int(os.environ["FA_GRADING_JOBS"]))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(2, min(8, cores // 2)) if mode == "gpu" else max(1, cores)


def run_lesson(lesson_id, notebook_path, mode, only=None, log=None, timeout=None, repeat=1, progress=None, jobs=None):
    """Grade one notebook: every check (or those in `only`) in a fresh worker. Returns a Report.
    `timeout` (seconds) overrides every check's own limit (tests use it to keep hang cases short).
    Each check's inputs are random, drawn from `submission_seed`.
    `repeat` > 1 runs each check that many times, the runs after the first with fresh seeds (a check passes only if
    every run does): how the reference solutions are shown to pass with any seed (`grader check --repeat 20`).
    `progress(check_id, run, runs, failed)` is called after each run of a check (a long --repeat shows progress).
    `jobs`: how many checks run at once (default `grading_jobs(mode)`); `log` is called as each check finishes."""
    from . import bytecode, lessons
    lesson = lessons.get(lesson_id)
    judge_cpu = _own_cpu_seconds()
    bytecode.warm(mode)  # once per environment, where it has no Python bytecode (grader/bytecode.py)
    source_nb = notebook.read(source_path(lesson_id))
    submitted = notebook.read(notebook_path)
    program, cell_problems = notebook.student_program(submitted, source_nb)
    language = editions.language_of(submitted)
    submission = Submission(program, notebook.function_sources(program), cell_problems,
                            structure.tampering(notebook.student_code(program)), sandbox.warning(language, mode),
                            hidden=(Path(notebook_path).resolve().parent, Path.cwd()), language=language)
    report = Report(lesson_id, mode, language=language)
    wanted = [c for c in lesson.checks if not only or c.id in only]
    runnable = [c for c in lesson.checks if runs_in(c, mode)]
    # A check that cannot run in this mode counts only when every check that ran passed (unrunnable_verdict), so
    # asking for one of them runs the others too (without reporting them).
    needed = runnable if any(c not in runnable for c in wanted) else [c for c in wanted if c in runnable]
    results = {}
    work = Path(tempfile.mkdtemp(prefix=f"grade-{lesson_id}-"))
    zygotes = Zygotes(submission, work, mode, lesson=lesson_id)
    hangs = Hangs()

    def grade(check, quiet=None):
        if timeout:
            check = dataclasses.replace(check, timeout=timeout)
        fresh = [int.from_bytes(os.urandom(4), "little") for _ in range(repeat - 1)]
        seeds = [submission_seed(program, check.id)] + fresh
        # a speed check takes no slot: it compiles, then mostly waits for `quiet`
        with hangs.slot(check, slots) if quiet is None else contextlib.nullcontext():
            results[check.id] = _run_check(lesson, check, mode, submission, seeds, work, source_nb, progress, zygotes,
                                           hangs, quiet)
        if log and check in wanted and check in runnable:
            log(results[check.id])

    # Checks run side by side, each in its own worker (jobs at once). A speed check starts with them (its worker, its
    # compiles, the reference's: Context.warm_up) but times only once every other check is done (`quiet`), so that no
    # other check of this submission shares the GPU while it times.
    todo = [c for c in lesson.checks if c in needed or c in wanted]
    timed = [c for c in todo if c.id.startswith("speed")]
    others = [c for c in todo if c not in timed]
    quiet = threading.Event()
    # `jobs` checks hold a slot at a time; once a function has hung, the checks that call it run without one.
    slots = threading.Semaphore(max(1, jobs or grading_jobs(mode)))
    try:
        with ThreadPoolExecutor(max(1, len(todo))) as pool:
            timing = [pool.submit(grade, check, quiet) for check in timed]
            try:
                list(pool.map(grade, others))
            finally:
                quiet.set()
            for job in timing:
                job.result()
            zygotes.record_cpu()  # FA_PROFILE only
            Timings.record(lesson=lesson_id, check="judge", side="judge", mode=mode, what="cpu",
                           seconds=round(_own_cpu_seconds() - judge_cpu, 2), compiling=0.0)
    finally:
        zygotes.close()
        shutil.rmtree(work, ignore_errors=True)
    failed = [c.id for c in runnable if c.id in results and not results[c.id].passed]
    for check in wanted:
        if check not in runnable:
            results[check.id] = unrunnable_verdict(results[check.id], check, mode, failed, language)
            if log:
                log(results[check.id])
        report.tests.append(results[check.id])
    return report


def _own_cpu_seconds():
    """CPU seconds of this process, all its threads (FA_PROFILE: the judge's own share of a lesson's grading)."""
    import resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


UNRUNNABLE_RULE = text("unrunnable_rule")  # the notebooks quote it (lesson 00's "How grading feedback reads")


def runs_in(check, mode):
    """Whether `check` runs in `mode`. An interpreted check (the memory check) on a GPU machine whose numpy or
    Triton the interpreter cannot work with is judged like one the mode cannot run (unrunnable_verdict)."""
    if check.interpreted and mode == "gpu":
        from .notebook_setup import interpreter_problem
        return mode in check.modes and interpreter_problem() is None
    return mode in check.modes


def unrunnable_verdict(result, check, mode, failed, language="en"):
    """The one rule for every lesson's checks that a mode cannot run (bf16, long sequences and speed need a GPU;
    in structure mode nothing but the compile runs): UNRUNNABLE_RULE."""
    needs = text("needs_gpu" if check.modes == ("gpu",) else "needs_interpreter", language)
    if check.interpreted and mode == "gpu":
        from .notebook_setup import interpreter_problem
        needs = text("needs_working_interpreter", language, why=interpreter_problem(language))
    head = f"{check.title_in(language)} [mode: {mode}]"
    if not result.passed:
        return result
    if failed:
        return dataclasses.replace(result, points=0.0, passed=False, failed_runs=result.runs, message=(
            f"{head}: " + text("unrunnable_failed", language, mode=mode, needs=needs, count=len(failed),
                               failed=", ".join(failed), rule=text("unrunnable_rule", language))))
    return dataclasses.replace(result, message=(
        f"{head}: {text('ok', language)} — " + text("unrunnable_ok", language, mode=mode, needs=needs)))


@dataclass
class Submission:
    program: str            # what a worker runs (notebook.student_program)
    functions: dict         # {name: source} of its top-level functions
    cell_problems: list     # cells that could not be graded (syntax errors)
    tampering: list         # constructs that reach into the grading process (structure.tampering)
    not_contained: str      # why the worker runs outside the sandbox (None when it runs inside)
    hidden: tuple = ()      # folders the sandbox hides even where they lie inside one it shows (the course's)
    language: str = "en"    # the edition it was written in: its messages speak it (grader/editions.py)


def _run_check(lesson, check, mode, submission, seeds, work, source_nb, progress=None, zygotes=None, hangs=None,
               quiet=None):
    began = time.monotonic()
    try:
        return _judge_check(lesson, check, mode, submission, seeds, work, source_nb, progress, zygotes, hangs, quiet)
    finally:
        Timings.record(lesson=lesson.id, check=check.id, side="judge", mode=mode, what="check",
                       seconds=round(time.monotonic() - began, 4), compiling=0.0)


def _judge_check(lesson, check, mode, submission, seeds, work, source_nb, progress=None, zygotes=None, hangs=None,
                 quiet=None):
    language = submission.language

    def verdict(passed, message, runs=1, failed_runs=None):
        tag = f"[mode: {mode}]"
        ok = text("ok", language)
        message = f"{check.title_in(language)} {tag}: " + (ok + (f" — {message}" if message else "") if passed else message)
        if submission.not_contained:
            message += f"\n⚠ {submission.not_contained}"
        return Result(check.id, check.points if passed else 0.0, check.points, passed, message,
                      runs, (0 if passed else runs) if failed_runs is None else failed_runs)

    program = submission.program
    problem = static_problems(lesson, check, program, submission.functions, language)
    if problem:
        return verdict(False, problem + ("; " + "; ".join(submission.cell_problems) if submission.cell_problems else ""))
    if submission.tampering:
        return verdict(False, structure.tampering_message(submission.tampering, program, language))
    if not runs_in(check, mode) or check.compile_only:
        problem = structure.check_structure(lesson, check, program, language)
        if problem or not runs_in(check, mode):
            return verdict(not problem, problem or text("structure_only", language))
    workers = []

    def start(program_text, folder):
        worker_mode = "compile" if check.compile_only else "interpreter" if check.interpreted else mode
        zygote = zygotes.get(worker_mode, program_text) if zygotes and folder == "submission" else None
        workers.append(Worker(worker_mode, program_text, work / folder, work / "logs", submission.hidden, language,
                              zygote=zygote, hangs=hangs if folder == "submission" else None, check_id=check.id,
                              timing_tag={"lesson": lesson.id, "check": check.id, "side": folder},
                              reference=folder == "reference"))
        return workers[-1]

    def reference():
        if len(workers) < 2:  # the reference solution runs in a worker of its own, never beside student code
            start(notebook.reference_program(source_nb), "reference")
            loaded = workers[-1].request("load", {"key": "student", "path": workers[-1].program_path},
                                         timeout=check.timeout)
            if "error" in loaded:
                raise RuntimeError(f"the reference solution failed to load: {loaded['error']}")
        return workers[1]

    try:
        worker = start(program, "submission")
        loaded = worker.request("load", {"key": "student", "path": worker.program_path}, timeout=check.timeout)
        if "error" in loaded:
            return verdict(False, text("load_failed", language, error=loaded["error"][1]))
        failures, note = [], None
        for run, seed in enumerate(seeds, 1):
            try:
                ctx_mode = "interpreter" if check.interpreted else mode  # its inputs: on the CPU, interpreter-sized
                ctx = Context(lesson, check, ctx_mode, worker, seed, program, reference, language, quiet)
                try:
                    note = check.fn(ctx)
                finally:
                    ctx.finish()
            except CheckFailed as failure:
                failures.append(f"{failure}" + text("seed", language, seed=seed))
            if progress:
                progress(check.id, run, len(seeds), len(failures))
        if note is not None and type(note) is not str:
            raise TypeError(f"check {check.id} returned {type(note).__name__}, not a note")
        if failures:
            runs = text("repeat_failed", language, failed=len(failures), runs=len(seeds)) if len(seeds) > 1 else ""
            return verdict(False, runs + failures[0], len(seeds), len(failures))
        runs = text("repeat_ok", language, runs=len(seeds)) if len(seeds) > 1 else ""
        return verdict(True, f"{note} ({runs})" if note and runs else note or runs, len(seeds))
    except WorkerGone as gone:
        return verdict(False, str(gone))
    except Exception:  # a bug in the check itself must not pass a student
        return verdict(False, text("grader_failed", language, trace=traceback.format_exc(limit=4)))
    finally:
        for worker in workers:
            worker.close()

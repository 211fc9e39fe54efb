"""The judge: runs a lesson's checks against a notebook, each check in its own worker process.

A lesson module (grader/lessons/*.py) declares its checks with `@lesson.check(points, title, needs)`.
A check gets a `Context`: it makes inputs and references here, asks the worker to call the student's
function (`ctx.call`), and judges the raw outputs here, in a process that never ran student code.
"""
import dataclasses
import hashlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing import Pipe
from pathlib import Path

import torch

from . import notebook, structure
from .notebook_checks import mismatch, unfinished_todos

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = Path(__file__).resolve().parent / "source"


def source_path(lesson_id):
    return SOURCE_DIR / lesson_id / f"{lesson_id}.ipynb"


class CheckFailed(Exception):
    """A check's verdict: what is wrong, in words a learner can act on."""


class WorkerGone(Exception):
    pass


class Worker:
    """One child process running the student's program, with a time limit on every request."""

    def __init__(self, mode, log_dir):
        self.mode = mode
        parent, child = Pipe()
        self.log_path = Path(log_dir) / f"worker-{os.getpid()}-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "wb")
        env = dict(os.environ, FA_MODE=mode, FA_QUIET="1",
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        env.pop("TRITON_INTERPRET", None)
        if mode == "compile":  # kernels are compiled for GPU targets, never run: no interpreter, no GPU needed
            env["FA_MODE"] = "structure"
        elif mode == "interpreter":
            env["TRITON_INTERPRET"] = "1"  # before any kernel in the student's program is defined
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.worker", str(child.fileno())], pass_fds=[child.fileno()],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)  # its own process group, so a hang is killed with its children
        child.close()
        self.conn = parent
        self.request("start", {"mode": mode}, timeout=60)

    def output_tail(self, limit=1500):
        self.log.flush()
        data = self.log_path.read_bytes()
        text = data[-limit:].decode("utf-8", "replace")
        return ("…" if len(data) > limit else "") + text.strip()

    def request(self, op, payload, timeout):
        try:
            self.conn.send_bytes(pickle.dumps((op, payload)))  # plain pickle: tensors travel by value
            if not self.conn.poll(timeout):
                self.kill()
                raise WorkerGone(f"timed out after {timeout:.0f} s (an endless loop, or a kernel that never "
                                 "finishes?); the process running your code was stopped")
            reply = pickle.loads(self.conn.recv_bytes())
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = self.process.wait(timeout=10)
            why = f"killed by signal {-code}" if code and code < 0 else f"exit status {code}"
            tail = self.output_tail()
            raise WorkerGone(f"the process running your code died ({why}) during `{op}`; a crash, os._exit() "
                             "or an out-of-bounds store does this" + (f". Its last output:\n{tail}" if tail else ""))
        return reply

    def kill(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()

    def close(self):
        if self.process.poll() is None:
            try:
                self.conn.send_bytes(pickle.dumps(("stop", {})))
                self.process.wait(timeout=10)
            except Exception:
                self.kill()
        self.conn.close()
        self.log.close()


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
                       "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "baddbmm", "addmm", "tensordot")


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

    def check(self, points, title, needs=(), kernels=(), modes=None, timeout=240, compile_only=False):
        def register(fn):
            self.checks.append(Check(fn.__name__, points, title, fn, tuple(needs), tuple(kernels),
                                     tuple(modes or self.default_modes), timeout, compile_only))
            return fn
        return register


class Context:
    """What a check uses: inputs, calls into the worker, and verdicts with clear messages."""

    def __init__(self, lesson, check, mode, worker, seed):
        self.lesson, self.check, self.mode, self.worker = lesson, check, mode, worker
        self.seed = seed
        self.gen = torch.Generator().manual_seed(seed)
        self.gpu = mode == "gpu"
        self.last_info = None

    # ── inputs ────────────────────────────────────────────────────────────────────────────────────
    def randn(self, *shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=self.gen, dtype=torch.float64) * scale).to(dtype)

    def pick(self, gpu, interpreter):
        return gpu if self.gpu else interpreter

    # ── calls into the student's code ─────────────────────────────────────────────────────────────
    def _send(self, op, timeout=None, **payload):
        reply = self.worker.request(op, payload, timeout or self.check.timeout)
        if reply[0] == "error":
            _, kind, text = reply
            raise CheckFailed(f"{kind} while running your code: {text}")
        return reply[1]

    def call(self, name, *args, backward=None, allow_torch=False, **kwargs):
        """Call the student's `name` in the worker; returns its output (and grads when backward= is given)."""
        out, grads, info = self._send("call", name=name, args=args, kwargs=kwargs, backward=backward)
        self.last_info = info
        for i in info["inputs_modified"]:
            raise CheckFailed(f"`{name}` changed its input argument {i} in place; inputs must stay unchanged")
        for kernel in self.check.kernels:
            if kernel not in info["launched"]:
                raise CheckFailed(f"`{name}` did not launch `{kernel}`: the graded wrapper must run your Triton "
                                  f"kernel (it launched {info['launched'] or 'no kernel'})")
        if not allow_torch:
            self.no_forbidden_calls(name, info)
        return (out, grads) if backward is not None else out

    def no_forbidden_calls(self, name, info, allowed=()):
        banned = [c for c in info["forbidden"] if c[0] in self.lesson.forbidden and c[0] not in allowed]
        if banned:
            op, shapes = banned[0]
            raise CheckFailed(f"`{name}` called torch `{op}` on tensors of shapes {shapes}: this lesson asks you to "
                              f"compute it yourself, so that call costs this check's points")

    def bench(self, name, *args, key="student", backward=False, **kwargs):
        return self._send("bench", name=name, args=args, kwargs=kwargs, key=key, backward=backward)

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
        """(student ms, reference ms), timed in turn until the student is within `slowdown_allowed` (best_times)."""
        def timing(key):
            return lambda: self.bench(name, *args, key=key, backward=backward, **kwargs)
        return self.best_times(timing("student"), timing("reference"), slowdown_allowed, rounds)

    def load_reference(self):
        path = Path(self.worker.log_path).with_suffix(".reference.py")
        path.write_text(notebook.reference_program(notebook.read(source_path(self.lesson.id))))
        return self._send("load", key="reference", path=str(path))

    def aot(self, kernel, signature, constexprs, capabilities=(80, 90), **options):
        return self._send("aot", kernel=kernel, signature=signature, constexprs=constexprs,
                          capabilities=capabilities, **options)

    # ── verdicts ──────────────────────────────────────────────────────────────────────────────────
    def fail(self, message):
        raise CheckFailed(message)

    def expect_close(self, got, exact, same_precision=None, what="output", factor=4.0, floor=None):
        """Compare with a float64 `exact` result. The allowed error is `factor` × the error that the same
        computation done by PyTorch in the input's precision makes (`same_precision`), at least `floor`."""
        exact = exact.detach()
        dtype = same_precision.dtype if same_precision is not None else (got.dtype if isinstance(got, torch.Tensor) else torch.float32)
        floor = floor if floor is not None else {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}.get(dtype, 1e-5 if not self.gpu else 2e-3)
        atol = floor
        if same_precision is not None:
            atol = max(floor, factor * (same_precision.double() - exact.double()).abs().nan_to_num(0).max().item())
        problem = mismatch(got, exact.to(dtype), atol=atol, rtol=0.0, what=what)
        if problem:
            raise CheckFailed(problem)


def static_problems(lesson, check, program, functions):
    """Problems found without running anything: missing names, unfinished TODOs."""
    for name in check.needs:
        if name not in functions:
            return f"`{name}` is not defined in the notebook (was its cell deleted or renamed?)"
    todos = [(name, unfinished_todos(functions[name])) for name in check.needs]
    todos = [(name, found) for name, found in todos if found]
    if not todos:
        return None
    name, found = todos[0]
    number, hint = found[0]
    also = ", ".join(f"TODO {', '.join(str(n) for n, _ in f)} in `{fn}`" for fn, f in todos)
    return f"TODO {number} in `{name}` is not done ({hint}); unfinished: {also}"


def submission_seed(program, check_id):
    """The seed of a check's random inputs, taken from the submission's code: the same notebook gets the same
    inputs, hence the same grade, in every regrade and in any shard of a class (a wrong kernel that only some
    inputs expose would otherwise gain or lose points on a regrade); any edit of the code draws new inputs."""
    digest = hashlib.sha256(f"{check_id}\n{program}".encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "little")


def run_lesson(lesson_id, notebook_path, mode, only=None, log=None, timeout=None, repeat=1, progress=None):
    """Grade one notebook: every check (or those in `only`) in a fresh worker. Returns a Report.
    `timeout` (seconds) overrides every check's own limit (tests use it to keep hang cases short).
    Each check's inputs are random, drawn from `submission_seed`.
    `repeat` > 1 runs each check that many times, the runs after the first with fresh seeds (a check passes only if
    every run does): how the reference solutions are shown to pass with any seed (`grader check --repeat 20`).
    `progress(check_id, run, runs, failed)` is called after each run of a check (a long --repeat shows progress)."""
    from . import lessons
    lesson = lessons.get(lesson_id)
    program, cell_problems = notebook.student_program(notebook.read(notebook_path),
                                                      notebook.read(source_path(lesson_id)))
    functions = notebook.function_sources(program)
    report = Report(lesson_id, mode)
    work = Path(tempfile.mkdtemp(prefix=f"grade-{lesson_id}-"))
    program_path = work / "submission.py"
    program_path.write_text(program, encoding="utf-8")
    try:
        for check in lesson.checks:
            if only and check.id not in only:
                continue
            if timeout:
                check = dataclasses.replace(check, timeout=timeout)
            fresh = [int.from_bytes(os.urandom(4), "little") for _ in range(repeat - 1)]
            seeds = [submission_seed(program, check.id)] + fresh
            result = _run_check(lesson, check, mode, program, program_path, functions, cell_problems, seeds, work,
                                progress)
            report.tests.append(result)
            if log:
                log(result)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def _run_check(lesson, check, mode, program, program_path, functions, cell_problems, seeds, work, progress=None):
    def verdict(passed, message, runs=1, failed_runs=None):
        tag = f"[mode: {mode}]"
        return Result(check.id, check.points if passed else 0.0, check.points, passed,
                      f"{check.title} {tag}: " + ("ok" + (f" — {message}" if message else "") if passed else message),
                      runs, (0 if passed else runs) if failed_runs is None else failed_runs)

    problem = static_problems(lesson, check, program, functions)
    if problem:
        return verdict(False, problem + ("; " + "; ".join(cell_problems) if cell_problems else ""))
    if mode not in check.modes:
        problem = structure.check_structure(lesson, check, program)
        return verdict(not problem, problem or "structure only: the code was not run")
    worker = None
    try:
        worker = Worker("compile" if check.compile_only else mode, work)
        loaded = worker.request("load", {"key": "student", "path": str(program_path)}, timeout=check.timeout)
        if loaded[0] == "error":
            return verdict(False, f"your notebook's code failed to load: {loaded[2]}")
        failures, note = [], None
        for run, seed in enumerate(seeds, 1):
            try:
                note = check.fn(Context(lesson, check, mode, worker, seed))
            except CheckFailed as failure:
                failures.append(f"{failure} (seed {seed})")
            if progress:
                progress(check.id, run, len(seeds), len(failures))
        if failures:
            runs = f"failed {len(failures)} of {len(seeds)} runs with fresh seeds; the first: " if len(seeds) > 1 else ""
            return verdict(False, runs + failures[0], len(seeds), len(failures))
        runs = f"{len(seeds)} runs, fresh seeds" if len(seeds) > 1 else ""
        return verdict(True, f"{note} ({runs})" if note and runs else note or runs, len(seeds))
    except WorkerGone as gone:
        return verdict(False, str(gone))
    except Exception:  # a bug in the check itself must not pass a student
        return verdict(False, "the grader itself failed on this check; tell your instructor:\n"
                       + traceback.format_exc(limit=4))
    finally:
        if worker:
            worker.close()

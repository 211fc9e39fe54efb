"""The processes that run student code, as the judge (grader.harness) sees them: how they start (a new process in the
sandbox, or a fork of a zygote), how the judge talks to them (plain data, grader/wire.py), how long they may run, how
they end, and where their Triton compile caches live. What runs inside them is grader/worker.py.

  Worker    one process running one program (the learner's, or the reference's) for one check
  Zygote    a sandboxed process that imported torch and Triton once (never CUDA, never student code) and forks a
            Worker for each check of one submission: milliseconds instead of seconds per check
  Zygotes   the zygotes of one submission's grading, one per worker mode
  Hangs     the calls of one submission that hung, shared by its checks (an endless loop costs one check the limit)
  Timings   where grading time goes (FA_PROFILE)
  Caches    the Triton caches: one per submission, and one for the reference solutions that no submission can see
"""
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import sandbox, wire
from .messages import text


class WorkerGone(Exception):
    pass


MAX_REPLY_BYTES = 1 << 31  # a reply larger than this is the check's failure, never the judge's
_PREPARING = threading.Lock()
REAP_POLL = 0.01  # seconds between two questions to a zygote about a worker that has not exited yet (Forked._code)

# How long one call of the learner's code may run before the judge takes it for an endless loop: seconds of run
# time, Triton's compile time not counted (the reference solutions' calls take 2 s at most in the interpreter, and
# milliseconds on a GPU once compiled). After one call hangs, every call of the same function that is still running
# or comes later gets SHORT_AFTER_HANG, so an endless loop costs one check the full limit and the others seconds.
HANG_AFTER = {"interpreter": 30.0, "gpu": 30.0, "structure": 30.0}
SHORT_AFTER_HANG = 5.0
LOAD = "load"  # what Hangs calls the execution of the notebook's top-level code (its definitions)


class Hangs:
    """The calls of one submission that hung, {function name (or LOAD): (check id, seconds, when)}, shared by the
    checks of that submission, which run side by side."""

    def __init__(self):
        self.lock = threading.Lock()
        self.found = {}

    def record(self, what, check_id, seconds):
        with self.lock:
            self.found.setdefault(what, (check_id, seconds, time.monotonic()))

    def get(self, what):
        with self.lock:
            return self.found.get(what)

    def affects(self, check):
        """Whether `check` calls something that hung (then it runs at once, with SHORT_AFTER_HANG per call)."""
        with self.lock:
            return LOAD in self.found or any(name in self.found for name in check.needs)

    def slot(self, check, slots):
        """A context in which `check` runs: one of the `slots` (a semaphore of `jobs`), or none at all once something
        it calls has hung: those checks are quick by then, and waiting for a slot would multiply their seconds."""
        hangs = self

        class Slot:
            def __enter__(self):
                self.held = False
                while not self.held and not hangs.affects(check):
                    self.held = slots.acquire(timeout=0.2)

            def __exit__(self, *exc):
                if self.held:
                    slots.release()
        return Slot()


class Timings:
    """Where grading time goes (FA_PROFILE=FILE: one JSON line per worker start, request and check, appended):
    benchmarks/grading_stages.py sums them per lesson and stage. Off (no file written) unless FA_PROFILE is set."""

    lock = threading.Lock()

    @classmethod
    def record(cls, **fields):
        path = os.environ.get("FA_PROFILE")
        if not path:
            return
        fields.update(at=round(time.time(), 3), judge=os.getpid())  # when it ended, in which judge: a class's timeline
        with cls.lock, open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(fields) + "\n")


def _log_path(logs, kind):
    Path(logs).mkdir(parents=True, exist_ok=True)
    return Path(logs) / f"{kind}-{os.getpid()}-{time.monotonic_ns()}.log"


def _prepare(mode, program_text, scratch):
    """Lay out the scratch folder once (checks of one submission start side by side and share it); returns whether
    the worker runs contained, and the scratch folder as the worker sees it."""
    scratch = Path(scratch)
    with _PREPARING:
        if not (scratch / "submission.py").exists():
            sandbox.prepare(scratch, program_text)
    contained = sandbox.status(mode)[0]
    return contained, sandbox.INSIDE if contained else scratch


def _launch(mode, scratch, place, contained, hidden, channel, log, *flags, reference=False):
    """worker.py (with `flags`) in the sandbox of `scratch`, talking over the socket `channel`, output into `log`; in
    its own process group, so that a hang is killed with its children. A `reference` worker (it runs the reference
    solution, never student code) also gets the reference solutions' Triton cache (sandbox.reference_cache_dir)."""
    argv = [sys.executable, str(place / "worker" / "worker.py"), str(channel.fileno()), *flags]
    cache = sandbox.reference_cache_dir() if reference else None
    inside_cache = (sandbox.REFERENCE_CACHE_INSIDE if contained else cache) if reference else None
    env = sandbox.environment(mode, place / "home", reference_cache=inside_cache, contained=contained)
    if contained:
        argv, env = sandbox.command(argv, scratch, env, gpu=mode == "gpu", hidden=hidden,
                                    reference_cache=cache), {}
    return subprocess.Popen(argv, pass_fds=[channel.fileno()], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, cwd=scratch, start_new_session=True)


class Worker:
    """One child process running a program (the student's, or the reference for speed comparisons) inside the
    sandbox (grader/sandbox.py), with a time limit on every request. Requests and replies are plain data
    (grader/wire.py): nothing the worker sends is unpickled or executed here."""

    timing_tag = None  # {lesson, check, side}: what Timings records this worker's time under

    def __init__(self, mode, program_text, scratch, logs, hidden=(), language="en", zygote=None, hangs=None,
                 check_id=None, timing_tag=None, reference=False):
        began = time.monotonic()
        self.timing_tag = timing_tag
        self.mode, self.language = mode, language
        self.hangs, self.check_id = hangs, check_id  # hangs: the submission's Hangs (None for the reference's worker)
        self.reports_compiles = False
        self.log_path = _log_path(logs, "worker")
        self.log = open(self.log_path, "wb")
        parent, child = socket.socketpair()
        self.contained, place = _prepare(mode, program_text, scratch)
        self.program_path = str(place / "submission.py")
        self.process = None
        if zygote is not None:  # a fork of a process that has imported torch already (same sandbox, same program)
            try:
                self.process = zygote.fork(child, self.log, mode)
            except ZygoteGone:
                self.process = None
        if self.process is None:
            self.process = _launch(mode, scratch, place, self.contained, hidden, child, self.log, reference=reference)
        child.close()
        self.conn = parent
        try:
            started = self.request("start", {"mode": "structure" if mode == "compile" else mode, "language": language},
                                   timeout=120)
        except BaseException:
            self.close()
            raise
        if "error" in started:  # the worker could not set itself up (an unsupported Triton, say): no check can run
            self.close()
            raise WorkerGone(text("start_failed", language, error=started["error"][1][:1500]))
        facts = started.get("ok")
        self.reports_compiles = type(facts) is dict and facts.get("reports_compiles") is True
        self._timed("start", time.monotonic() - began, 0.0, forked=isinstance(self.process, Forked))

    def _timed(self, what, seconds, compiling, **extra):
        if self.timing_tag is not None:
            Timings.record(**self.timing_tag, mode=self.mode, what=what, seconds=round(seconds, 4),
                           compiling=round(compiling, 4), **extra)

    def output_tail(self, limit=1500):
        self.log.flush()
        data = self.log_path.read_bytes()
        text = data[-limit:].decode("utf-8", "replace")
        return ("…" if len(data) > limit else "") + text.strip()

    def request(self, op, payload, timeout):
        """The worker's reply to one request: {"ok": value} or {"error": [kind, text]}, type-checked. `timeout` bounds
        the whole request; a call of the learner's code also stops at HANG_AFTER seconds of run time (Hangs)."""
        what = payload.get("name") if op in ("call", "bench") else LOAD if op == "load" else None
        if self.hangs is None or type(what) is not str:
            what = None
        began, self.compiling = time.monotonic(), 0.0
        try:
            wire.send_message(self.conn, wire.encode(dict(payload, op=op), keep_storage=True))
            reply = self._reply(op, what, timeout)
            if op != "start":  # the worker's start is timed whole, process and imports included (__init__)
                self._timed(op, time.monotonic() - began, self.compiling)
        except wire.Timeout:
            self.kill()
            if what is not None:
                self.hangs.record(what, self.check_id, timeout)
            raise WorkerGone(text("timed_out", self.language, seconds=timeout))
        except wire.TooLarge as size:
            self.kill()
            raise WorkerGone(text("too_large", self.language, megabytes=int(str(size)) / 2**20, op=op,
                                  limit=MAX_REPLY_BYTES / 2**20))
        except wire.WireError as error:
            self.kill()
            raise WorkerGone(text("not_plain", self.language, op=op, error=error))
        except (EOFError, OSError):
            why = _death(self.process.wait(timeout=10), self.contained, self.language)
            tail = self.output_tail()
            raise WorkerGone(text("died", self.language, why=why, op=op)
                             + (text("last_output", self.language, tail=tail) if tail else ""))
        if type(reply) is dict and set(reply) == {"ok"}:
            return reply
        if (type(reply) is dict and set(reply) == {"error"} and type(reply["error"]) is list
                and len(reply["error"]) == 2 and all(type(x) is str for x in reply["error"])):
            return reply
        self.kill()
        raise WorkerGone(text("malformed", self.language, op=op))

    def _reply(self, op, what, timeout):
        """Wait for the reply, counting the run time of the learner's code: the wait minus the compiles the worker
        reports ({"progress": "compiling" | "compiled"}, GPU only). Raises WorkerGone when a call of `what` runs past
        HANG_AFTER, or past SHORT_AFTER_HANG once `what` has hung in another check."""
        started = time.monotonic()
        run_limit = HANG_AFTER.get(self.mode) if what is not None and op in ("call", "load") else None
        if self.mode == "gpu" and not self.reports_compiles:
            run_limit = None  # an old Triton without the compile hook: compiles would count as run time
        paused, compiling_since, short = 0.0, None, None

        def run_time(now):
            return now - started - paused - (now - compiling_since if compiling_since is not None else 0.0)

        while True:
            now = time.monotonic()
            hung = self.hangs.get(what) if short is None and what is not None else None
            if hung is not None and hung[0] != self.check_id:
                # SHORT_AFTER_HANG seconds of run time from the start of this call, or from now if it hung meanwhile
                short = (hung, SHORT_AFTER_HANG if hung[2] <= started else run_time(now) + SHORT_AFTER_HANG)
            waits = [started + timeout - now]
            if compiling_since is None:
                if run_limit is not None:
                    waits.append(run_limit - run_time(now))
                if short is not None:
                    waits.append(short[1] - run_time(now))
            wait = min(waits)
            if wait <= 0:
                if waits[0] <= 0:
                    raise wire.Timeout()
                self.kill()
                if short is not None and short[1] - run_time(now) <= 0:
                    (check_id, seconds, _), _ = short
                    raise WorkerGone(text("short_after_hang", self.language, what=self._named(what), check=check_id,
                                          seconds=seconds, short=SHORT_AFTER_HANG))
                self.hangs.record(what, self.check_id, run_limit)
                raise WorkerGone(text("hung", self.language, what=self._named(what), seconds=run_limit,
                                      short=SHORT_AFTER_HANG))
            # wake at least twice a second while another check may find a hang of the same function
            ready, _, _ = select.select([self.conn], [], [], min(wait, 0.5) if what is not None else wait)
            if not ready:
                continue
            reply = wire.decode(wire.recv_message(self.conn, MAX_REPLY_BYTES, max(1.0, started + timeout - now)))
            if (type(reply) is dict and reply.get("progress") in ("compiling", "compiled")
                    and set(reply) <= {"progress", "kernel", "key"}):
                if reply["progress"] == "compiling" and compiling_since is None:
                    compiling_since = time.monotonic()
                elif reply["progress"] == "compiled" and compiling_since is not None:
                    self._timed("compile", time.monotonic() - compiling_since, time.monotonic() - compiling_since,
                                kernel=str(reply.get("kernel"))[:100], key=str(reply.get("key"))[:600])
                    paused += time.monotonic() - compiling_since
                    self.compiling = paused
                    compiling_since = None
                continue
            return reply

    def _named(self, what):
        return text("top_level_code", self.language) if what == LOAD else f"`{what}`"

    def kill(self):
        if isinstance(self.process, Forked):
            self.process.kill_group()
        else:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.process.wait()

    def close(self):
        if self.process.poll() is None:
            try:
                wire.send_message(self.conn, wire.encode({"op": "stop"}))
                self.process.wait(timeout=10)
            except Exception:
                self.kill()
        self.conn.close()
        self.log.close()


class ZygoteGone(Exception):
    pass


class Zygote:
    """A sandboxed process that has imported torch and Triton and forks a fresh worker for each check of one
    submission (worker.py's `zygote`). Each check still runs in a process of its own, with the submission loaded
    anew, but starts in milliseconds instead of the seconds a new Python spends importing torch and whatever a first
    call imports (worker.prepare_imports). On a GPU machine the zygote never initialises CUDA: a CUDA context cannot
    cross a fork, so each forked worker makes its own (a second or so). Where the zygote is gone (killed by a worker,
    say), or could not prepare itself, workers start as new processes again."""

    def __init__(self, mode, program_text, scratch, logs, hidden=()):
        self.lock = threading.Lock()
        self.log = open(_log_path(logs, "zygote"), "wb")
        self.conn, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.contained, place = _prepare(mode, program_text, scratch)
        self.process = _launch(mode, scratch, place, self.contained, hidden, child, self.log, "--zygote", mode)
        child.close()
        try:
            ready = self._receive(timeout=120)  # {"ready": pid, "steps": {step: seconds}}: torch and Triton imported
        except ZygoteGone:
            self.close()
            raise
        steps = ready.get("steps") if type(ready) is dict else None
        # what the zygote says it spent, for FA_PROFILE only (never trusted: it is a number in a report)
        self.steps = {str(k)[:40]: v for k, v in steps.items() if type(v) in (int, float)} if type(steps) is dict else {}

    def _receive(self, timeout):
        self.conn.settimeout(timeout)
        try:
            message = self.conn.recv(1 << 16)
        except (OSError, socket.timeout) as error:
            raise ZygoteGone(str(error))
        if not message:
            raise ZygoteGone("the zygote closed its socket")
        return json.loads(message)

    def ask(self, request, fds=(), timeout=30):
        with self.lock:
            try:
                socket.send_fds(self.conn, [json.dumps(request).encode()], list(fds))
            except OSError as error:
                raise ZygoteGone(str(error))
            return self._receive(timeout)

    def fork(self, channel, log, mode):
        """A worker of `mode`: the zygote's own, or (a zygote of the GPU) a compile check's."""
        request = {"op": "fork", "env": sandbox.mode_variables(mode)}
        return Forked(self, self.ask(request, fds=(channel.fileno(), log.fileno()))["pid"])

    def close(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the zygote and, with its sandbox, every worker it forked
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()
        self.conn.close()
        self.log.close()


class Forked:
    """The subprocess.Popen-like handle of a worker that a Zygote forked: the zygote signals and reaps it."""

    def __init__(self, zygote, pid):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def _code(self, timeout):
        """The exit code, or None once `timeout` seconds have passed with the worker still running. The zygote answers
        at once (worker._reap), so it is asked again and again: it serves one request at a time, and a worker that
        takes seconds to exit (its CUDA context torn down on a busy machine) must not hold every other check's fork
        behind its wait."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                code = self.zygote.ask({"op": "wait", "pid": self.pid})["code"]
            except ZygoteGone:
                return -signal.SIGKILL  # the zygote's sandbox ended, and every process in it with it
            if code is not None or time.monotonic() >= deadline:
                return code
            time.sleep(REAP_POLL)

    def poll(self):
        if self.returncode is None:
            self.returncode = self._code(0)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            self.returncode = self._code(3600 if timeout is None else timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired("worker", timeout)
        return self.returncode

    def kill_group(self):
        try:
            self.zygote.ask({"op": "kill", "pid": self.pid})
        except ZygoteGone:  # contained, the worker died with the zygote's sandbox; otherwise its pid is ours to kill
            if not self.zygote.contained:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


class Zygotes:
    """The zygotes of one submission's grading, each started when a check first needs it. Triton decorates its own
    library once, for its interpreter or for its compiler, when it is imported: so one zygote forks the workers that
    run kernels in the interpreter, and another (in the GPU's sandbox when grading on a GPU) those that compile them:
    the GPU's, and the compile checks'."""

    def __init__(self, submission, work, mode, lesson=None):
        self.submission, self.work, self.mode, self.lesson = submission, work, mode, lesson
        self.lock, self.locks, self.started = threading.Lock(), {}, {}

    def get(self, worker_mode, program_text):
        if os.environ.get("FA_ZYGOTE") == "0":  # FA_ZYGOTE=0: a new process per check
            return None
        kind = "interpreter" if worker_mode == "interpreter" else "gpu" if self.mode == "gpu" else "compile"
        with self.lock:
            lock = self.locks.setdefault(kind, threading.Lock())
        with lock:  # the two zygotes start side by side
            if kind not in self.started:
                began = time.monotonic()
                try:
                    self.started[kind] = Zygote(kind, program_text, self.work / "submission", self.work / "logs",
                                                self.submission.hidden)
                except (ZygoteGone, OSError):
                    self.started[kind] = None
                Timings.record(lesson=self.lesson, check=f"zygote ({kind})", side="submission", mode=kind,
                               what="zygote", seconds=round(time.monotonic() - began, 4), compiling=0.0,
                               steps=getattr(self.started[kind], "steps", {}))
            return self.started[kind]

    def record_cpu(self):
        """FA_PROFILE: the CPU seconds of each zygote and of every worker it forked and reaped (all of them, once the
        checks are done). Asked while the threads that started the zygotes still run: bwrap's --die-with-parent ends a
        sandbox when the thread that started it ends."""
        if not os.environ.get("FA_PROFILE"):
            return
        for kind, zygote in list(self.started.items()):
            if zygote is None:
                continue
            try:
                usage = zygote.ask({"op": "usage"}, timeout=5)
            except ZygoteGone:
                continue
            seconds = sum(v for v in usage.values() if type(v) in (int, float)) if type(usage) is dict else 0
            Timings.record(lesson=self.lesson, check=f"zygote ({kind})", side="submission", mode=kind, what="cpu",
                           seconds=round(seconds, 2), compiling=0.0)

    def close(self):
        for zygote in list(self.started.values()):
            if zygote is not None:
                zygote.close()


def _death(code, contained, language="en"):
    """How a worker process ended, in words: bwrap reports a child killed by signal N as exit status 128 + N."""
    number = -code if code and code < 0 else code - 128 if contained and code and code > 128 else None
    if number is None:
        return text("exit_status", language, code=code)
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "?"
    return text("signal", language, number=number, name=name) + (
        text("out_of_bounds", language) if name in ("SIGSEGV", "SIGBUS") else "")

"""A broken submission costs its own points only (COURSE_SPEC §5): a hang, a crash, an exit, a monkey-patch.

Each check runs in its own process: these tests show that the process boundary alone holds, so they grade with
the judge's static guard (structure.tampering) switched off; the last test shows that with it on, a patch of torch
is refused before anything runs, with a message that says where."""
import os

import pytest

from grader import structure
from grader.harness import run_lesson
from tests.mutants import SEGFAULT, Mutant, write

NUMERIC = {"softmax_power_of_two", "softmax_ragged"}
KERNEL_ONLY = {"softmax_compiles"}  # never calls softmax(), so it must keep its point


def grade(mutant, tmp_path, mode, checks=NUMERIC, timeout=20):
    path = write("00_setup", mutant, tmp_path / "00_setup.ipynb")
    report = run_lesson("00_setup", path, mode, only=checks | KERNEL_ONLY, timeout=timeout)
    return {t.id: t for t in report.tests}


@pytest.fixture
def without_static_guard(monkeypatch):
    monkeypatch.setattr(structure, "tampering", lambda code: [])


def test_a_hang_costs_only_the_checks_that_call_it(tmp_path, mode):
    tests = grade(Mutant("hang", [("    n_rows, n_cols = x.shape\n", "    n_rows, n_cols = x.shape\n    while True:\n        pass\n")],
                         NUMERIC), tmp_path, mode, checks={"softmax_ragged"}, timeout=10)
    assert not tests["softmax_ragged"].passed and "timed out after 10 s" in tests["softmax_ragged"].message
    assert tests["softmax_compiles"].passed


@pytest.mark.parametrize("statement,expected", [(SEGFAULT, "died (killed by signal 11, SIGSEGV: a memory access out of bounds)"),
                                                ("import os; os._exit(3)", "died (exit status 3)"),
                                                ("raise SystemExit(0)", "SystemExit")])
def test_a_crash_or_an_exit_costs_only_the_checks_that_call_it(statement, expected, tmp_path, mode,
                                                               without_static_guard):
    tests = grade(Mutant("exit", [("    n_rows, n_cols = x.shape\n", f"    n_rows, n_cols = x.shape\n    {statement}\n")],
                         NUMERIC), tmp_path, mode)
    for name in NUMERIC:
        assert not tests[name].passed and expected in tests[name].message, tests[name].message
    assert tests["softmax_compiles"].passed


PATCH = ("    n_rows, n_cols = x.shape\n",
         "    n_rows, n_cols = x.shape\n    torch.allclose = lambda *a, **k: True\n"
         "    torch.testing.assert_close = lambda *a, **k: None\n    torch.Tensor.__sub__ = lambda a, b: a * 0\n")
WRONG = ("BLOCK_SIZE=BLOCK_SIZE)\n    return out", "BLOCK_SIZE=BLOCK_SIZE)\n    return out * 0.5")


def test_patched_comparisons_do_not_fool_the_judge(tmp_path, mode, without_static_guard):
    tests = grade(Mutant("patch", [PATCH, WRONG], NUMERIC), tmp_path, mode)
    for name in NUMERIC:
        assert not tests[name].passed and "values are off" in tests[name].message
    assert tests["softmax_compiles"].passed


def test_the_static_guard_refuses_a_patch_of_torch_and_says_where(tmp_path, mode):
    tests = grade(Mutant("patch", [PATCH], NUMERIC), tmp_path, mode)
    for test in tests.values():
        assert not test.passed and "your code uses a change to `torch` (`torch.allclose`)" in test.message, test.message


ZYGOTE_PROGRAM = '''
import os
calls = []

def count():
    calls.append(1)
    return len(calls)

def hang():
    while True:
        pass

def kill_the_zygote():
    os.kill(os.getppid(), 9)

def cuda_sum():
    import torch
    return float(torch.ones(3, device="cuda").sum())

def hardware_queues():
    return os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")
'''


def test_forked_workers_start_fresh_and_outlive_their_zygote(tmp_path, mode):
    """Each check's worker is forked from a zygote that imported torch once (processes.Zygote): still a process of
    its own per check, with the program loaded anew (on a GPU, with a CUDA context of its own); a hang is killed
    alone; a worker that kills the zygote costs its own check, and the next check starts a new process instead."""
    from grader.processes import Worker, WorkerGone, Zygote
    scratch, logs = tmp_path / "scratch", tmp_path / "logs"
    zygote = Zygote(mode, ZYGOTE_PROGRAM, scratch, logs)

    def worker():
        w = Worker(mode, ZYGOTE_PROGRAM, scratch, logs, zygote=zygote)
        assert "ok" in w.request("load", {"key": "student", "path": w.program_path}, timeout=60)
        return w

    def call(w, name, timeout=60):
        reply = w.request("call", {"name": name, "args": [], "kwargs": {}, "backward": None}, timeout=timeout)
        return reply["ok"][0]

    try:
        first, second = worker(), worker()
        assert type(first.process).__name__ == "Forked" and first.process.pid != second.process.pid
        assert [call(first, "count"), call(first, "count"), call(second, "count")] == [1, 2, 1]
        if mode == "gpu":
            assert call(first, "cuda_sum") == call(second, "cuda_sum") == 3.0
            expected = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # worker._one_hardware_queue
            assert call(first, "hardware_queues") == call(second, "hardware_queues") == expected
        with pytest.raises(WorkerGone, match="timed out after 3 s"):
            call(first, "hang", timeout=3)
        assert call(second, "count") == 2
        third = worker()
        try:
            call(third, "kill_the_zygote")
        except WorkerGone:
            pass  # it dies with the zygote's sandbox, at once or at its next request
        fourth = worker()  # the zygote is gone: a new process
        assert type(fourth.process).__name__ == "Popen" and call(fourth, "count") == 1
        if mode == "gpu":
            assert call(fourth, "hardware_queues") == expected
        for w in (first, second, third, fourth):
            w.close()
    finally:
        zygote.close()


def test_waiting_for_one_worker_never_holds_up_the_next_fork(tmp_path, mode):
    """The zygote serves one request at a time. A worker slow to exit (its CUDA context torn down on a busy machine)
    is waited for by the judge's polling (Forked._code), never inside the zygote: while one check waits seconds for
    its worker, another check's worker still forks at once (in a class of twelve shards, forks queued behind such
    waits took 13 to 18 s each)."""
    import subprocess
    import threading
    import time
    from grader.processes import Worker, Zygote
    scratch, logs = tmp_path / "scratch", tmp_path / "logs"
    zygote = Zygote(mode, ZYGOTE_PROGRAM, scratch, logs)
    try:
        alive = Worker(mode, ZYGOTE_PROGRAM, scratch, logs, zygote=zygote)  # idle: it will not exit by itself

        def wait_for_it():
            try:
                alive.process.wait(timeout=8)  # what Worker.close does for a worker that does not exit at once
            except subprocess.TimeoutExpired:
                pass
        waiting = threading.Thread(target=wait_for_it)
        waiting.start()
        time.sleep(0.5)
        began = time.monotonic()
        second = Worker(mode, ZYGOTE_PROGRAM, scratch, logs, zygote=zygote)
        forked_in = time.monotonic() - began
        assert type(second.process).__name__ == "Forked"
        assert forked_in < 5, f"a fork waited {forked_in:.1f} s behind another worker's wait"
        assert waiting.is_alive(), "the wait ended early: it no longer tests anything"
        waiting.join()
        for w in (alive, second):
            w.close()
    finally:
        zygote.close()


# ── hangs are bounded (issue 21): an endless loop costs its first check HANG_AFTER, every other call SHORT_AFTER_HANG ──
PER_QUERY_WRAPPER = "def per_query_attention(q, k, v, sm_scale=None):\n"
ENDLESS = Mutant("endless_loop", [(PER_QUERY_WRAPPER, PER_QUERY_WRAPPER + "    while True:\n        pass\n")],
                 {"basic", "ragged_n", "odd_head_dim", "m_ne_n", "fp16", "custom_scale", "strided", "memory_safety"})
HANG_BUDGET = {"interpreter": 120, "gpu": 60}  # seconds an endless loop may add to a submission's grading


@pytest.mark.timing  # it measures wall time: on a GPU it runs alone (make test-gpu)
def test_an_endless_loop_costs_a_bounded_time_and_says_why(tmp_path, mode):
    import time
    from grader.__main__ import reference_notebook
    from grader import notebook, processes
    lesson = "03_per_query_kernel"
    reference = tmp_path / "reference.ipynb"
    notebook.write(reference_notebook(lesson), reference)
    started = time.monotonic()
    assert run_lesson(lesson, reference, mode).score > 0
    reference_seconds, started = time.monotonic() - started, time.monotonic()
    report = run_lesson(lesson, write(lesson, ENDLESS, tmp_path / "hang.ipynb"), mode)
    extra = time.monotonic() - started - reference_seconds
    messages = {t.id: t.message for t in report.tests}
    assert extra <= HANG_BUDGET[mode], f"an endless loop cost {extra:.0f} s more than the reference: {messages}"
    hung = [m for m in messages.values() if f"ran for {processes.HANG_AFTER[mode]:.0f} s without returning" in m]
    short = [m for m in messages.values() if f"did not return within {processes.SHORT_AFTER_HANG:.0f} s" in m]
    assert hung and len(hung) + len(short) == len(ENDLESS.caught_by), messages
    assert all("it already hung in the check" in m for m in short)
    assert next(t for t in report.tests if t.id == "compiles").passed  # never calls the wrapper: keeps its point


def scripted_worker(script, mode="gpu", reports_compiles=True, hangs=None, check_id="this_check"):
    """A Worker without a process: its socket's far end plays `script`, [(seconds to wait, message to send), ...], in
    a thread. Only the judge's waiting and its counting of run time are under test."""
    import socket
    import threading
    import time
    from grader import wire
    from grader.processes import Hangs, Worker
    judge_end, far_end = socket.socketpair()

    def play():
        try:
            wire.recv_message(far_end, 1 << 20)  # the request
            for pause, message in script:
                time.sleep(pause)
                wire.send_message(far_end, wire.encode(message))
        except OSError:
            pass  # the judge stopped listening (a hang it found)
    threading.Thread(target=play, daemon=True).start()
    worker = object.__new__(Worker)
    worker.mode, worker.language, worker.conn = mode, "en", judge_end
    worker.hangs, worker.check_id, worker.reports_compiles = hangs or Hangs(), check_id, reports_compiles
    worker.kill = lambda: None
    return worker


def call(worker, timeout=30):
    return worker.request("call", {"name": "attention", "args": [], "kwargs": {}, "backward": None}, timeout=timeout)


@pytest.mark.parametrize("instructor", [None, "4"])
def test_a_gpu_worker_asks_for_one_hardware_queue_before_the_driver_opens(instructor, monkeypatch):
    """CUDA_DEVICE_MAX_CONNECTIONS=1 (worker._one_hardware_queue) is in the environment when torch creates the
    worker's context (the driver reads it then; a class's contexts start two to three times faster with it), and a
    number the instructor set wins."""
    import torch
    from grader import worker
    if instructor is None:
        monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", instructor)
    seen = []
    monkeypatch.setattr(worker, "_blocking_sync", lambda: seen.append(os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")))
    monkeypatch.setattr(torch.cuda, "init", lambda: seen.append(os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")))
    monkeypatch.setattr(torch, "empty", lambda *args, **kwargs: None)
    worker.Session._warm_up_gpu()
    assert seen == [instructor or "1"] * 2


def test_compile_time_is_not_run_time(monkeypatch):
    """On a GPU the first call of a kernel compiles it: the worker reports the compile, and only the rest counts."""
    from grader import processes
    monkeypatch.setattr(processes, "HANG_AFTER", {"gpu": 1.0})
    compiling_long = [(0.1, {"progress": "compiling"}), (2.0, {"progress": "compiled"}), (0.3, {"ok": [1, None, {}]})]
    assert call(scripted_worker(compiling_long)) == {"ok": [1, None, {}]}
    hangs = processes.Hangs()
    with pytest.raises(processes.WorkerGone, match="`attention` ran for 1 s without returning"):
        call(scripted_worker([(2.5, {"ok": [1, None, {}]})], hangs=hangs))
    assert hangs.get("attention")[0] == "this_check"
    # an old Triton whose compiles the worker cannot report: only the request's own limit applies on a GPU
    assert call(scripted_worker([(1.5, {"ok": [2, None, {}]})], reports_compiles=False)) == {"ok": [2, None, {}]}


def test_after_a_hang_every_other_call_of_that_function_gets_a_short_limit(monkeypatch):
    from grader import processes
    monkeypatch.setattr(processes, "HANG_AFTER", {"interpreter": 30.0})
    monkeypatch.setattr(processes, "SHORT_AFTER_HANG", 0.5)
    hangs = processes.Hangs()
    hangs.record("attention", "first_check", 30.0)
    with pytest.raises(processes.WorkerGone, match="it already hung in the check `first_check`"):
        call(scripted_worker([(2.0, {"ok": [1, None, {}]})], mode="interpreter", hangs=hangs))
    quick = scripted_worker([(0.1, {"ok": [3, None, {}]})], mode="interpreter", hangs=hangs)
    assert call(quick) == {"ok": [3, None, {}]}  # a call that returns in time still counts


def test_the_worker_reports_each_compile_also_one_that_fails(monkeypatch):
    """A GPU worker wraps Triton's compile step (JITFunction._do_compile) to tell the judge when it compiles; the
    wrapper passes results and errors through unchanged, and names the kernel and its specialisation (FA_PROFILE)."""
    from triton.runtime.jit import JITFunction
    from grader import worker
    events = []

    def compile_step(self, key, *args, **kwargs):
        if key == "bad":
            raise ValueError("a kernel that does not compile")
        return f"kernel for {key}"
    monkeypatch.setattr(JITFunction, "_do_compile", compile_step)
    assert worker.Session._hook_compiles(lambda *event: events.append(event)) is True
    assert JITFunction._do_compile(None, "good") == "kernel for good"
    with pytest.raises(ValueError, match="does not compile"):
        JITFunction._do_compile(None, "bad")
    assert events == [("compiling",), ("compiled", "?", "good"), ("compiling",), ("compiled", "?", "bad")]

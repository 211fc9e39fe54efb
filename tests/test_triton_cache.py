"""The Triton caches of grading (issue 25): a submission's checks share its compiled kernels (one compile per kernel,
however many checks need it at once), but never native code, and never anything of the reference's.

Triton compiles ahead of time for sm_90 on any machine (COURSE_SPEC §8), so these tests run without a GPU."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader import sandbox

ROOT = Path(__file__).resolve().parent.parent

COMPILE = textwrap.dedent('''
    import json, sys, time
    sys.path.insert(0, sys.argv[2])  # where triton_cache.py is (the worker's folder in the sandbox)
    import triton, triton.language as tl
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def scale(X, Y, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs, mask=offs < N) * 2, mask=offs < N)

    hits = []
    knobs.compilation.listener = lambda **info: hits.append(info["cache_hit"])
    source = triton.compiler.ASTSource(fn=scale, signature={"X": "*fp32", "Y": "*fp32", "N": "i32", "BLOCK": "constexpr"},
                                       constexprs={"BLOCK": 128})
    started = time.time()
    triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    print(json.dumps({"cache_hit": hits, "seconds": time.time() - started}))
''')


def compile_in_processes(tmp_path, count):
    script = tmp_path / "compile.py"
    script.write_text(COMPILE)
    env = {"PATH": "/usr/bin:/bin", "TRITON_CACHE_DIR": str(tmp_path / "cache"),
           "TRITON_CACHE_MANAGER": "triton_cache:SubmissionCache", "HOME": str(tmp_path)}
    runs = [subprocess.Popen([sys.executable, str(script), "x", str(ROOT / "grader")], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(count)]
    results = []
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_checks_that_need_the_same_kernel_at_once_compile_it_once(tmp_path):
    results = compile_in_processes(tmp_path, 3)
    assert sorted(r["cache_hit"] for r in results) == [[False], [True], [True]], results
    assert compile_in_processes(tmp_path, 1)[0]["cache_hit"] == [True]  # and a later check finds it


NATIVE = textwrap.dedent('''
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from triton_cache import SubmissionCache
    launcher = "__triton_launcher.cpython-311-x86_64-linux-gnu.so"
    helper = "cuda_utils.cpython-311-x86_64-linux-gnu.so"  # one of Triton's driver helpers: the zygote loads them
    cache = SubmissionCache("0123abcd")
    if sys.argv[2] == "build":  # what triton.runtime.build.compile_module_from_src does: look, build, put
        assert cache.get_file(launcher) is None
        print("claimed", flush=True)
        time.sleep(1.5)  # the C compiler
        print(cache.put(b"a launcher", launcher), cache.put(b"a driver helper", helper),
              cache.get_file(helper), flush=True)
    else:
        started = time.monotonic()
        found = cache.get_file(launcher)
        print(found, round(time.monotonic() - started, 2), cache.get_file(helper))
''')


def test_a_launcher_is_built_once_per_submission_and_a_driver_helper_stays_private(tmp_path):
    """A kernel signature's launcher (native code that Triton builds with the C compiler) is shared by the checks
    of a submission, like its kernels: a check that asks for it while another builds it waits and loads that one.
    A driver helper never leaves the process that built it: the zygote loads those, and it runs no student code."""
    script = tmp_path / "native.py"
    script.write_text(NATIVE)
    env = {"PATH": "/usr/bin:/bin", "TRITON_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    command = [sys.executable, str(script), str(ROOT / "grader")]
    builder = subprocess.Popen(command + ["build"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert builder.stdout.readline().strip() == "claimed", builder.stderr.read()[-2000:]
    reader = subprocess.run(command + ["read"], env=env, capture_output=True, text=True, timeout=120)
    built, _ = builder.communicate(timeout=120)
    assert builder.returncode == 0 and reader.returncode == 0, reader.stderr[-2000:]
    launcher, helper, helper_found = built.split()
    assert launcher.startswith(str(tmp_path / "cache")) and helper_found == helper
    assert not helper.startswith(str(tmp_path / "cache")), helper
    found, waited, other_helper = reader.stdout.split()
    assert found == launcher and float(waited) >= 0.5, reader.stdout  # it waited for the build, then loaded it
    assert other_helper == "None", reader.stdout


def test_the_reference_cache_is_hidden_from_every_submission_sandbox(tmp_path, monkeypatch):
    """Even where it lies inside a folder the sandbox must show (here: a folder of Python's), the reference solutions'
    cache is masked in a student's sandbox, and bound only into a reference worker's."""
    contained, why = sandbox.status()
    if not contained:
        pytest.skip(f"no sandbox here: {why}")
    python_dirs = sandbox._python_dirs
    monkeypatch.setattr(sandbox, "_python_dirs", lambda: python_dirs() + [tmp_path / "python"])
    monkeypatch.setenv("FA_REFERENCE_CACHE", str(tmp_path / "python" / "ref"))
    (tmp_path / "python" / "ref").mkdir(parents=True)
    (tmp_path / "python" / "visible.txt").write_text("a public file beside it")
    (tmp_path / "python" / "ref" / "answer.ttir").write_text("the reference kernel, compiled")
    (tmp_path / "scratch").mkdir()
    argv = ["/bin/sh", "-c", f"ls {tmp_path / 'python'} {tmp_path / 'python' / 'ref'} "
                             f"{sandbox.REFERENCE_CACHE_INSIDE} 2>&1; true"]
    env = {"PATH": "/usr/bin:/bin"}
    student = subprocess.run(sandbox.command(argv, tmp_path / "scratch", env, gpu=False), capture_output=True,
                             text=True).stdout
    assert "visible.txt" in student and "answer.ttir" not in student, student
    reference = subprocess.run(sandbox.command(argv, tmp_path / "scratch", env, gpu=False,
                                               reference_cache=sandbox.reference_cache_dir()),
                               capture_output=True, text=True).stdout
    assert "answer.ttir" in reference, reference


STOPPED = textwrap.dedent('''
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
    from grader.worker import compile_until

    @triton.jit
    def tile_sum(X, Y, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.sum(tl.load(X + offs[:, None] * BLOCK + offs[None, :]), axis=0))

    source = triton.compiler.ASTSource(fn=tile_sum, signature={"X": "*fp16", "Y": "*fp16", "BLOCK": "constexpr"},
                                       constexprs={"BLOCK": 64})
    llir = compile_until(source, GPUTarget("cuda", 90, 32), {"num_warps": 4}, "llir")
    ttir = compile_until(source, GPUTarget("cuda", 90, 32), {"num_warps": 4}, "ttir")
    cached = sorted(os.listdir(os.environ["TRITON_CACHE_DIR"]))
    whole = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    print(json.dumps({"shared": [llir["shared"], whole.metadata.shared], "stages": [sorted(llir["asm"]), sorted(ttir["asm"])],
                      "ttir_same": ttir["asm"]["ttir"] == whole.asm["ttir"], "cached_before_whole": cached}))
''')


def test_a_compile_check_stops_after_the_ir_it_reads(tmp_path):
    """The compile checks (ctx.aot, ctx.ttir) stop Triton after the stage they read: the same shared memory and Triton
    IR as a whole compile, no PTX or ptxas, and nothing in the cache that a whole compile could later take for its own."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    (tmp_path / "cache").mkdir()
    script = tmp_path / "stopped.py"  # a file: Triton reads a kernel's source from it
    script.write_text(STOPPED)
    run = subprocess.run([sys.executable, str(script), str(ROOT)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["shared"][0] == got["shared"][1] > 0, got
    assert got["stages"] == [["llir", "ttgir", "ttir"], ["ttir"]], got
    assert got["ttir_same"], got
    assert got["cached_before_whole"] == [], got

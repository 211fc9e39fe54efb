"""`make compat`: the course on every Triton a learner may have (issue "Grading a class fast, and on the Triton that
students actually have"). Not a pytest file: it installs each Triton version and takes a while per version.

    python tests/compat.py --versions 3.4.0 3.5.1 3.6.0 3.7.1 3.8.0 3.9.0 --out tests/reports/compat.txt

For each Triton version (with torch as installed in .venv, the CPU build), in a folder of its own put first on
PYTHONPATH (so .venv's own triton and numpy stay untouched):
  1. numpy: the newest release whose interpreter runs `range(0, N, BLOCK)` over a kernel argument (Triton ≤ 3.6
     breaks with numpy ≥ 2.4, COURSE_SPEC §8), tried newest first among NUMPY_CANDIDATES;
  2. every reference solution graded with `python -m grader check --mode interpreter` (this includes each lesson's
     ahead-of-time compile for sm_80/sm_90): full marks or not, and whether the compile checks passed;
  3. every solutions notebook executed top to bottom in interpreter mode (nbclient), in an empty folder.
Writes one row per version. The set-up cell's tested range (grader/notebook_setup.py TESTED_TRITON) comes from it.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NUMPY_CANDIDATES = ("2.4.6", "2.3.5")
PROBE = """
import os
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl

@triton.jit
def add_one(X, N, BLOCK: tl.constexpr):
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(X + offs, tl.load(X + offs, mask=offs < N) + 1, mask=offs < N)

x = torch.zeros(40)
add_one[(1,)](x, 40, BLOCK=16)
assert bool((x == 1).all())
"""


def python(args, env, timeout=1800, cwd=ROOT):
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def install(triton_version, numpy_version, folder):
    shutil.rmtree(folder, ignore_errors=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder),
                           f"triton=={triton_version}", f"numpy=={numpy_version}"], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-1500:])


def environment(folder):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)]), PYTHONUNBUFFERED="1")
    env.pop("TRITON_INTERPRET", None)
    return env


def grade_references(env, lessons, log):
    """{lesson: (score, max, compile checks passed)}"""
    found = {}
    with tempfile.TemporaryDirectory() as folder:
        for lesson in lessons:
            path = Path(folder) / f"{lesson}.ipynb"
            python(["-m", "grader", "fill", lesson, "--out", str(path)], env)
            done = python(["-m", "grader", "check", lesson, str(path), "--mode", "interpreter", "--json"], env)
            try:
                report = json.loads(done.stdout)
            except json.JSONDecodeError:
                found[lesson] = (None, None, False)
                log(f"    {lesson}: grader failed: {done.stderr[-500:]}")
                continue
            compiled = all(t["passed"] for t in report["tests"] if t["id"].startswith("compiles"))
            found[lesson] = (report["score"], report["max_score"], compiled)
            failed = [f"{t['id']}: {t['message'][:300]}" for t in report["tests"] if not t["passed"]]
            log(f"    {lesson}: {report['score']:g}/{report['max_score']:g}" + "".join(f"\n      {f}" for f in failed))
    return found


def execute_solutions(env, lessons, log):
    """{lesson: None or the error}"""
    script = ("import sys, nbformat; from nbclient import NotebookClient\n"
              "nb = nbformat.read(sys.argv[1], as_version=4)\n"
              "NotebookClient(nb, timeout=1200, kernel_name='python3').execute()\n")
    found = {}
    for lesson in lessons:
        with tempfile.TemporaryDirectory() as folder:
            shutil.copy(ROOT / "solutions" / f"{lesson}.ipynb", folder)
            alone = dict(env, PYTHONPATH=env["PYTHONPATH"].split(os.pathsep)[0])  # the notebook alone: no grader
            done = python(["-c", script, f"{lesson}.ipynb"], alone, cwd=folder)
            found[lesson] = None if done.returncode == 0 else done.stderr.strip().splitlines()[-1][:300]
            log(f"    {lesson}: notebook " + ("ran" if found[lesson] is None else f"FAILED: {found[lesson]}"))
    return found


def main():
    from grader.build import lesson_ids
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=["3.4.0", "3.5.1", "3.6.0", "3.7.1", "3.8.0", "3.9.0"])
    parser.add_argument("--lessons", nargs="*", default=lesson_ids())
    parser.add_argument("--out", default=str(ROOT / "tests" / "reports" / "compat.txt"))
    parser.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "fa-compat"))
    args = parser.parse_args()
    import torch
    lines = [f"# python tests/compat.py: torch {torch.__version__} (CPU), python {sys.version.split()[0]}, "
             f"interpreter mode; lessons {', '.join(args.lessons)}",
             f"{'triton':<8} {'numpy':<7} {'notebooks run':<14} {'references full':<16} {'AOT compile':<12} seconds"]
    details = []
    for version in args.versions:
        started = time.time()
        folder = Path(args.work) / f"triton-{version}"
        numpy_used = None
        for numpy_version in NUMPY_CANDIDATES:
            install(version, numpy_version, folder)
            if python(["-c", PROBE], environment(folder), timeout=300).returncode == 0:
                numpy_used = numpy_version
                break
        print(f"triton {version}: numpy {numpy_used or 'none works'}", flush=True)
        details.append(f"triton {version} (numpy {numpy_used or 'none works'}):")
        if numpy_used is None:
            lines.append(f"{version:<8} {'-':<7} {'-':<14} {'-':<16} {'-':<12} {time.time() - started:.0f}")
            continue
        log = lambda text: (print(text, flush=True), details.append(text))
        graded = grade_references(environment(folder), args.lessons, log)
        ran = execute_solutions(environment(folder), args.lessons, log)
        full = sum(1 for s, m, _ in graded.values() if s is not None and s == m)
        compiled = sum(1 for _, _, c in graded.values() if c)
        lines.append(f"{version:<8} {numpy_used:<7} {sum(e is None for e in ran.values())}/{len(ran):<12} "
                     f"{full}/{len(graded):<14} {compiled}/{len(graded):<10} {time.time() - started:.0f}")
        print(lines[-1], flush=True)
    text = "\n".join(lines + [""] + details) + "\n"
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

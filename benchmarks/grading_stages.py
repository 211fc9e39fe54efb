"""Where the time of grading goes (issue "Grading a class fast"): each stage measured on this machine.

    .venv/bin/python benchmarks/grading_stages.py [--mode interpreter|gpu] [--repeat 3] --out FILE

Stages, each the median of --repeat runs:
  python + torch        a new Python importing torch (what every process that grades pays: judge, worker)
  judge import          python -c "import grader.harness" (torch, Triton, the grader)
  sandbox               bubblewrap around a Python that does nothing
  worker, new process   a sandboxed worker ready to load a submission (python, torch, Triton imported)
  worker, forked        the same, forked from a zygote that imported them once (the CPU modes' default)
  load                  executing a reference solution's program in a ready worker
  lesson, new process   grading a lesson's reference with a new process per check (FA_ZYGOTE=0)
  lesson, forked        the same with forked workers
  nbgrader              `nbgrader autograde` of one reference submission, less `grader check` of the same notebook
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader import classroom, harness, notebook, sandbox  # noqa: E402
from grader.__main__ import reference_notebook  # noqa: E402
from tests.conftest import LESSONS  # noqa: E402


def median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run(argv, env=None):
    subprocess.run(argv, check=True, capture_output=True, env=env, cwd=ROOT)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="interpreter")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lessons", nargs="*", default=LESSONS)
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = []

    def row(stage, seconds, note=""):
        rows.append(f"{stage:<34} {seconds:8.2f} s  {note}")
        print(rows[-1], flush=True)

    python = sys.executable
    row("python + torch", median_seconds(lambda: run([python, "-c", "import torch"]), args.repeat))
    row("judge import", median_seconds(lambda: run([python, "-c", "import grader.harness"]), args.repeat))
    contained, why = sandbox.status(args.mode)
    work = Path(tempfile.mkdtemp(prefix="stages-"))
    if contained:
        sandbox.prepare(work / "empty", "")
        argv = sandbox.command([python, "-c", "pass"], work / "empty", sandbox.environment(args.mode, "/tmp"),
                               gpu=args.mode == "gpu")
        row("sandbox (bwrap + python)", median_seconds(lambda: run(argv), args.repeat))
    else:
        row("sandbox", 0.0, f"not contained: {why}")

    lesson = "03_per_query_kernel" if "03_per_query_kernel" in args.lessons else args.lessons[0]
    program = notebook.reference_program(notebook.read(harness.source_path(lesson)))

    def worker(zygote=None):
        w = harness.Worker(args.mode, program, work / "w", work / "logs", zygote=zygote)
        return w

    def new_worker():
        worker().close()
    row("worker, new process", median_seconds(new_worker, args.repeat), "sandbox + python + torch + Triton")
    if args.mode != "gpu":
        zygote = harness.Zygote(args.mode, program, work / "w", work / "logs")
        row("worker, forked", median_seconds(lambda: worker(zygote).close(), args.repeat), "from a zygote")
        zygote.close()
    ready = worker()
    row(f"load ({lesson})", median_seconds(
        lambda: ready.request("load", {"key": "student", "path": ready.program_path}, timeout=120), args.repeat))
    ready.close()

    for lesson in args.lessons:
        path = work / f"{lesson}.ipynb"
        notebook.write(reference_notebook(lesson), path)
        for label, zygote in (("new process", "0"), ("forked", "1")):
            if args.mode == "gpu" and zygote == "1":
                continue
            os.environ["FA_ZYGOTE"] = zygote
            started = time.perf_counter()
            report = harness.run_lesson(lesson, path, args.mode)
            row(f"lesson {lesson}, {label}", time.perf_counter() - started,
                f"{report.score:g}/{report.max_score:g}, {len(report.tests)} checks")
        os.environ.pop("FA_ZYGOTE", None)

    lesson = args.lessons[0]
    course = classroom.new_course(work / "course", [lesson])
    classroom.submit(course, "reference", lesson, reference_notebook(lesson))
    started = time.perf_counter()
    classroom.autograde(course, lesson)
    nbgrader_total = time.perf_counter() - started
    started = time.perf_counter()
    run([python, "-m", "grader", "check", lesson, str(course / "submitted" / "reference" / lesson / f"{lesson}.ipynb"),
         "--mode", args.mode])
    check_total = time.perf_counter() - started
    row(f"nbgrader autograde ({lesson})", nbgrader_total, f"grader check of the same notebook: {check_total:.1f} s")

    head = [f"# benchmarks/grading_stages.py --mode {args.mode}: {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f} at the end, sandbox {'on' if contained else 'off'}"]
    if args.out:
        Path(args.out).write_text("\n".join(head + rows) + "\n")


if __name__ == "__main__":
    main()

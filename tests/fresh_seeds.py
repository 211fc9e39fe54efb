"""How often does the grader fail a correct solution? Each lesson's reference solution, every check run
`--repeat` times with fresh random seeds, in one grading mode (issue 6: report the false-failure count).

    python tests/fresh_seeds.py --mode interpreter --repeat 20 --jobs 2 --out tests/fresh_seeds_interpreter.txt

Not a pytest file (it takes minutes per lesson); its committed reports are the evidence. A check that fails
any run is a false failure of the grader, to be fixed in the check (tolerance, input range), not here.
"""
import argparse
import concurrent.futures as futures
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader import notebook  # noqa: E402
from grader.__main__ import reference_notebook  # noqa: E402
from grader.harness import run_lesson  # noqa: E402
from tests.conftest import LESSONS  # noqa: E402


def grade_reference(lesson, mode, repeat, folder):
    path = Path(folder) / f"{lesson}.ipynb"
    notebook.write(reference_notebook(lesson), path)
    started = time.time()
    report = run_lesson(lesson, path, mode, repeat=repeat)
    return report, time.time() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", required=True, choices=["gpu", "interpreter", "structure"])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2, help="lessons graded at once")
    parser.add_argument("--lessons", nargs="*", default=LESSONS)
    parser.add_argument("--out", help="also write the report here")
    args = parser.parse_args()
    lines = [f"# python tests/fresh_seeds.py --mode {args.mode} --repeat {args.repeat}: each check of each "
             f"lesson's reference solution, {args.repeat} runs with fresh seeds"]
    total_runs = total_failed = 0
    with tempfile.TemporaryDirectory() as folder, futures.ThreadPoolExecutor(args.jobs) as pool:
        jobs = {lesson: pool.submit(grade_reference, lesson, args.mode, args.repeat, folder) for lesson in args.lessons}
        for lesson, job in jobs.items():
            report, seconds = job.result()
            runs = sum(t.runs for t in report.tests)
            failed = sum(t.failed_runs for t in report.tests)
            total_runs, total_failed = total_runs + runs, total_failed + failed
            static = sum(1 for t in report.tests if t.runs == 1)  # structure-only (or unmet TODO): not run
            found = [f"{lesson}: {len(report.tests) - static} checks run {args.repeat} times"
                     + (f" (+ {static} checked once, statically)" if static else "")
                     + f" = {runs} check runs, {failed} failed ({seconds:.0f} s)"]
            found += [f"  FAILED {t.id}: {t.failed_runs} of {t.runs}: {t.message}" for t in report.tests if t.failed_runs]
            print("\n".join(found), flush=True)
            lines += found
    lines.append(f"false failures: {total_failed} of {total_runs} check runs (mode {args.mode})")
    print(lines[-1])
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    sys.exit(1 if total_failed else 0)


if __name__ == "__main__":
    main()

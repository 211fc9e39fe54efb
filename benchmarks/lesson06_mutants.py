"""Grade lesson 06's wrong submissions (tests/mutants/lesson06.py) and print KILLED / SURVIVED for each.

    python -m benchmarks.lesson06_mutants --mode gpu            # on the H200 (lesson06_gpu.sh runs this)
    python -m benchmarks.lesson06_mutants --mode interpreter --only empty_chunk_nan

Each mutant is graded on the checks that must catch it and the checks it must keep passing (grader.harness.run_lesson,
as tests/test_lessons.py does), several mutants at a time (each check runs in its own worker process anyway).
KILLED: every check in `caught_by` failed and every check in `passes` passed. Mutants marked gpu_only are graded in
gpu mode only.
"""
import argparse
import concurrent.futures as futures
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LESSON = "06_flash_decoding"


def grade(mutant, mode, folder):
    from grader.harness import run_lesson
    from tests import mutants
    path = mutants.write(LESSON, mutant, Path(folder) / f"{mutant.name}.ipynb")
    started = time.time()
    caught_by, passes = mutant.expected(mode)
    report = run_lesson(LESSON, path, mode, only=caught_by | passes, timeout=mutant.timeout)
    failed = {t.id for t in report.tests if not t.passed}
    return mutant, report, failed, time.time() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", default="gpu", choices=["gpu", "interpreter", "structure"])
    parser.add_argument("--jobs", type=int, default=6, help="mutants graded at once")
    parser.add_argument("--only", nargs="*", help="only these mutants")
    args = parser.parse_args(argv)
    from tests import mutants
    chosen = [m for m in mutants.load(LESSON) if (not args.only or m.name in args.only)
              and (args.mode == "gpu" or not m.gpu_only)]
    started, killed, problems = time.time(), 0, []
    with tempfile.TemporaryDirectory() as folder, futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for mutant, report, failed, seconds in pool.map(lambda m: grade(m, args.mode, folder), chosen):
            caught_by, passes = mutant.expected(args.mode)
            missed = sorted(caught_by - failed)
            lost = sorted(passes & failed)
            ok = not missed and not lost
            killed += ok
            verdict = "KILLED  " if ok else "SURVIVED"
            print(f"{verdict} {mutant.name:32} {report.score:g}/{report.max_score:g} in {seconds:4.0f} s; failed: "
                  f"{', '.join(sorted(failed)) or 'nothing'}", flush=True)
            for check_id in missed + lost:
                message = next(t.message for t in report.tests if t.id == check_id)
                why = "not caught by" if check_id in missed else "cost points it should not, in"
                problems.append(f"{mutant.name}: {why} {check_id}: {message[:600]}")
    print(f"\nkilled {killed} of {len(chosen)} wrong submissions in {args.mode} mode ({time.time() - started:.0f} s)")
    for problem in problems:
        print("  " + problem)
    sys.exit(0 if killed == len(chosen) else 1)


if __name__ == "__main__":
    main()

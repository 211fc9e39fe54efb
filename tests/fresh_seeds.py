"""Does a grade depend on the random seed? Every check run `--repeat` times with fresh random seeds, in one
grading mode (issue 6: report the false-failure count).

    python tests/fresh_seeds.py --mode interpreter --repeat 20 --jobs 2 --out tests/reports/fresh_seeds_interpreter.txt
    python tests/fresh_seeds.py --mutants --mode interpreter --repeat 8 --out tests/reports/mutant_seeds_interpreter.txt

Without --mutants it grades each lesson's reference solution: a check that fails any run is a false failure.
With --mutants it grades every wrong submission of tests/mutants: a check that fails some runs and passes others
is a lottery (regrading the same notebook could change its score), and a check listed in the mutant's
`caught_by` must fail every run. Either is fixed in the check (tolerance, input range), not here.
Not a pytest file (it takes minutes per lesson); its committed reports are the evidence.
"""
import argparse
import concurrent.futures as futures
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader import notebook  # noqa: E402
from grader.__main__ import reference_notebook  # noqa: E402
from grader.harness import run_lesson  # noqa: E402
from tests import mutants  # noqa: E402
from tests.conftest import LESSONS  # noqa: E402


def grade(lesson, mutant, args, folder):
    """(report, seconds): the lesson's reference solution (mutant None) or a wrong submission, every check
    `args.repeat` times."""
    path = Path(folder) / f"{lesson}-{mutant.name if mutant else 'reference'}.ipynb"
    if mutant:
        mutants.write(lesson, mutant, path)
    else:
        notebook.write(reference_notebook(lesson), path)
    started = time.time()
    report = run_lesson(lesson, path, args.mode, repeat=args.repeat, timeout=mutant.timeout if mutant else None)
    return report, time.time() - started


def reference_verdicts(lesson, mutant, report, seconds, args):
    """One line per lesson, one more per check that failed a run (a false failure)."""
    runs = sum(t.runs for t in report.tests)
    failed = sum(t.failed_runs for t in report.tests)
    static = sum(1 for t in report.tests if t.runs == 1)  # structure-only (or unmet TODO): not run
    lines = [f"{lesson}: {len(report.tests) - static} checks run {args.repeat} times"
             + (f" (+ {static} checked once, statically)" if static else "")
             + f" = {runs} check runs, {failed} failed ({seconds:.0f} s)"]
    lines += [f"  FAILED {t.id}: {t.failed_runs} of {t.runs}: {t.message}" for t in report.tests if t.failed_runs]
    return lines, {"runs": runs, "failed": failed}


def mutant_verdicts(lesson, mutant, report, seconds, args):
    """One line per mutant; problems (a lottery check, a `caught_by` check that passed a run) get their own."""
    failing = sorted(t.id for t in report.tests if t.failed_runs == t.runs)
    lottery = [t for t in report.tests if 0 < t.failed_runs < t.runs]
    ran = [t for t in report.tests if t.runs > 1]  # not the static checks of structure mode
    missed = [t for t in ran if t.id in mutant.caught_by and t.failed_runs < t.runs]
    lines = [f"{lesson} {mutant.name}: fails every run of {', '.join(failing) or 'nothing'} ({seconds:.0f} s)"]
    lines += [f"  LOTTERY {t.id}: failed {t.failed_runs} of {t.runs} runs: {t.message}" for t in lottery]
    lines += [f"  MISSED {t.id} (in caught_by): failed {t.failed_runs} of {t.runs} runs" for t in missed]
    return lines, {"problems": len(lottery) + len(missed)}


def grade_all(cases, describe, args):
    """Grade each (lesson, mutant or None), `args.jobs` at once; print its lines as it ends. Returns all the
    lines and the sums of the counts that `describe` gave."""
    lines, totals = [], Counter()
    with tempfile.TemporaryDirectory() as folder, futures.ThreadPoolExecutor(args.jobs) as pool:
        running = [(case, pool.submit(grade, *case, args, folder)) for case in cases]
        for case, job in running:
            found, counts = describe(*case, *job.result(), args)
            print("\n".join(found), flush=True)
            lines += found
            totals.update(counts)
    return lines, totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", required=True, choices=["gpu", "interpreter", "structure"])
    parser.add_argument("--repeat", type=int, default=20, help="runs of each check (at least 2)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks graded at once")
    parser.add_argument("--lessons", nargs="*", default=LESSONS)
    parser.add_argument("--out", help="also write the report here")
    parser.add_argument("--mutants", action="store_true", help="grade the wrong submissions of tests/mutants instead")
    args = parser.parse_args()
    if args.repeat < 2:
        parser.error("--repeat must be at least 2: one run cannot show a verdict that changes with the seed")
    command = (f"# python tests/fresh_seeds.py {'--mutants ' if args.mutants else ''}--mode {args.mode} "
               f"--repeat {args.repeat}")
    if args.mutants:
        cases = [(lesson, m) for lesson in args.lessons for m in mutants.load(lesson)
                 if args.mode == "gpu" or not m.gpu_only]
        lines, totals = grade_all(cases, mutant_verdicts, args)
        header = f"{command}: every check of each wrong submission, {args.repeat} runs with fresh seeds"
        bad = totals["problems"]
        summary = f"seed-dependent verdicts: {bad} in {len(cases)} wrong submissions"
    else:
        lines, totals = grade_all([(lesson, None) for lesson in args.lessons], reference_verdicts, args)
        header = f"{command}: each check of each lesson's reference solution, {args.repeat} runs with fresh seeds"
        bad = totals["failed"]
        summary = f"false failures: {bad} of {totals['runs']} check runs"
    lines = [header] + lines + [f"{summary} (mode {args.mode})"]
    print(lines[-1])
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

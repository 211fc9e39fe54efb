"""Command line (COURSE_SPEC §6).

  python -m grader check LESSON NOTEBOOK [--mode auto|gpu|interpreter|structure] [--json] [--only ID ...] [--repeat N]
  python -m grader fill LESSON --out PATH
  python -m grader build [--check] [--lesson ID ...]
  python -m grader run-solutions [--lesson ID ...] [--language en zh] [--out DIR]
  python -m grader translations LESSON [--language zh]
  python -m grader course DIR [--language zh] [--lesson ID ...]
  python -m grader demo
  python -m grader release [LESSON ...] [--course DIR]
  python -m grader autograde LESSON [--jobs N | --shard I --of N | --merge --of N] [--force] [--course DIR]
  python -m grader feedback LESSON [--course DIR]
  python -m grader export [--out CSV] [--course DIR]
"""
import argparse
import json
import os
import sys
import threading
from pathlib import Path

from . import notebook, notebook_setup, sandbox
from .harness import ROOT, run_lesson, source_path


def release_path(lesson_id, language="en"):
    edition = ROOT / "course" if language == "en" else ROOT / "course" / language
    return edition / lesson_id / f"{lesson_id}.ipynb"


def reference_notebook(lesson_id, language="en"):
    """The student notebook with every TODO filled by the reference solution (what `grader fill` writes); in another
    edition, the reference code with that edition's hints."""
    source = notebook.read(source_path(lesson_id))
    if language != "en":
        from . import editions
        source = editions.translate(source, lesson_id, language)[0]
    return notebook.filled(notebook.read(release_path(lesson_id, language)), source)


def cmd_check(args):
    from . import lessons
    lessons.get(args.lesson)  # a clear error for an unknown lesson before anything else
    if not Path(args.notebook).exists():
        sys.exit(f"no such notebook: {args.notebook}")
    from . import classroom
    problem = classroom.inspect_notebook(args.notebook, args.lesson)
    if problem:  # what make autograde would say of it: not graded, and why
        sys.exit(f"not graded: {problem}")
    mode, reason = notebook_setup.detect_mode(args.mode)
    if not args.json:
        print(f"Grading {args.notebook} as {args.lesson} — mode: {mode} ({reason})")
        print("Sandbox: " + (sandbox.warning(mode=mode) or "on (bubblewrap): student code cannot read the course's files"))
    shown = threading.Lock()

    def show_done(result):  # checks finish in any order: a line on stderr each, the results in order at the end
        with shown:
            print(f"   {result.id}: {'passed' if result.passed else 'failed'}", file=sys.stderr, flush=True)

    def show_progress(check_id, run, runs, failed):  # --repeat N: a line per run, on stderr, so --json stays clean
        with shown:
            print(f"   {check_id}: run {run} of {runs} done, {failed} failed", file=sys.stderr, flush=True)

    report = run_lesson(args.lesson, args.notebook, mode, only=set(args.only or ()) or None,
                        log=None if args.json else show_done,
                        repeat=args.repeat, progress=show_progress if args.repeat > 1 else None)
    if args.json:
        print(json.dumps(report.as_json(), indent=1, ensure_ascii=False))
        return
    for result in report.tests:  # in the lesson's order
        print(f"{'✅' if result.passed else '❌'} {result.id:<28} {result.points:g}/{result.max_points:g}  {result.message}")
    print(f"Score: {report.score:g} / {report.max_score:g} (mode: {mode})")


def cmd_fill(args):
    from . import lessons
    lessons.get(args.lesson)
    notebook.write(reference_notebook(args.lesson, args.language), args.out)
    print(f"wrote {args.out}: {args.lesson} with every TODO filled by the reference solution")


def cmd_build(args):
    from . import build
    changed = build.build(check_only=args.check, only=args.lesson)
    if args.check and changed:
        sys.exit("out of date (run `make build`): " + ", ".join(str(p) for p in changed))
    print("up to date" if not changed else "rebuilt: " + ", ".join(str(p) for p in changed))


def cmd_course(args):
    from . import build, classroom
    course = classroom.new_course(args.dir, args.lesson or build.lesson_ids(), args.language)
    print(f"{course}: an nbgrader course with the {args.language} edition released (nbgrader_config.py, source/, "
          "release/); collect submissions of either edition into submitted/ and run `nbgrader autograde` there")


def cmd_translations(args):
    from . import editions, lessons
    lessons.get(args.lesson)
    source = notebook.read(source_path(args.lesson))
    path = editions.write_catalog(editions.skeleton(source, args.lesson, args.language), args.language, args.lesson)
    _, missing = editions.translate(source, args.lesson, args.language)
    stale = editions.stale_entries(source, args.lesson, args.language)
    print(f"{path}: {len(missing)} required texts without a translation" + (f"; dropped {len(stale)} stale" if stale else ""))


def cmd_run_solutions(args):
    from . import run_solutions
    run_solutions.main(args.lesson, args.out, args.timeout, args.language)


def cmd_demo(args):
    from . import classroom
    table = classroom.demo()
    bad = [k for k, (score, top, _) in table.items()
           if (k[1] == "reference" and score != top) or (k[1] != "reference" and score >= top)]
    if bad:
        sys.exit(f"unexpected scores for {bad}")


def cmd_release(args):
    from . import build, classroom
    course = Path(args.course)
    for path in classroom.release_lessons(course, args.lessons or build.lesson_ids()):
        lesson = path.parent.name
        same = course.resolve() == (ROOT / "grader").resolve() and \
            notebook.read(path).cells == notebook.read(release_path(lesson)).cells
        print(f"released {lesson}: {path}" + (f" (the same notebook as {release_path(lesson).relative_to(ROOT)}; "
                                              "the Chinese edition: course/zh/…)" if same else ""))


def cmd_autograde(args):
    from . import classroom
    course = Path(args.course)
    mode, reason = notebook_setup.detect_mode(os.environ.get("FA_GRADING_MODE", "auto"))
    print(f"Grading {args.lesson} in {course} — mode: {mode} ({reason})", flush=True)
    if args.shard is not None:
        graded = classroom.grade_shard(course, args.lesson, args.shard, args.of, force=args.force, mode=mode)
        print(f"shard {args.shard} of {args.of}: graded {len(graded)} submissions")
        return
    if args.merge:
        outcome = classroom.merge_shards(course, args.lesson, args.of)
    else:
        outcome = classroom.autograde_class(course, args.lesson, jobs=args.jobs, force=args.force)
    scores = classroom.scores(course)
    record = classroom.GradingRecord(course).rows(args.lesson)
    for student in classroom.students(course, args.lesson):
        row = record.get(student, {})
        if row.get("status", classroom.GRADED) != classroom.GRADED:
            print(f"  {student:<24} {row['status'].upper()}: {row['reason']}")
        elif (args.lesson, student) in scores:
            score, top, graded_in = scores[(args.lesson, student)]
            kept = "" if student in outcome else "  (unchanged since its last grading)"
            print(f"  {student:<24} {score:g}/{top:g}  [{graded_in}]{kept}")
    failed = [s for s, (status, _) in outcome.items() if status == classroom.FAILED]
    refused = [s for s, (status, _) in outcome.items() if status == classroom.NOT_GRADED]
    print(f"{len(outcome) - len(failed) - len(refused)} graded, {len(refused)} not graded (the notebook's fault: "
          f"tell the student), {len(failed)} failed to grade (the grader's: fix it, then grade again)")
    if failed:
        sys.exit(1)


def cmd_feedback(args):
    from . import classroom
    pages = classroom.feedback(Path(args.course), args.lesson)
    print(f"{len(pages)} feedback pages: {Path(args.course) / 'feedback'}/<student>/{args.lesson}/{args.lesson}.html")


def cmd_export(args):
    from . import classroom
    count = classroom.export(Path(args.course), args.out)
    print(f"wrote {args.out}: {count} students, each lesson's score, mode and status, each check's points")


def main(argv=None):
    import warnings
    warnings.filterwarnings("ignore", message="Object of type")  # SQLAlchemy chatter of nbgrader's gradebook API
    parser = argparse.ArgumentParser(prog="python -m grader", description="FlashAttention in Triton: grading tools")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="grade one notebook without a gradebook")
    check.add_argument("lesson")
    check.add_argument("notebook")
    check.add_argument("--mode", default="auto", choices=["auto", "gpu", "interpreter", "structure"])
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.add_argument("--only", nargs="*", help="run only these check ids")
    check.add_argument("--repeat", type=int, default=1,
                       help="run each check N times: the first with the submission's own seed, the rest fresh")
    check.set_defaults(run=cmd_check)
    fill = sub.add_parser("fill", help="write the student notebook with every TODO filled by the reference")
    fill.add_argument("lesson")
    fill.add_argument("--out", required=True)
    fill.add_argument("--language", default="en", help="the edition: en (default) or zh")
    fill.set_defaults(run=cmd_fill)
    build = sub.add_parser("build", help="regenerate course/ and solutions/ from grader/source/")
    build.add_argument("--check", action="store_true", help="only report files that are out of date")
    build.add_argument("--lesson", nargs="*", help="only these lessons")
    build.set_defaults(run=cmd_build)
    course = sub.add_parser("course", help="make an nbgrader course folder with one edition's sources and releases")
    course.add_argument("dir")
    course.add_argument("--language", default="en", help="en (default) or zh")
    course.add_argument("--lesson", nargs="*", help="only these lessons")
    course.set_defaults(run=cmd_course)
    words = sub.add_parser("translations", help="write or update an edition's catalog for a lesson (empty entries to fill)")
    words.add_argument("lesson")
    words.add_argument("--language", default="zh")
    words.set_defaults(run=cmd_translations)
    solutions = sub.add_parser("run-solutions", help="run each solutions notebook and record its outputs in it")
    solutions.add_argument("--lesson", nargs="*", help="only these lessons")
    solutions.add_argument("--out", help="write the executed notebooks here instead of into solutions/")
    solutions.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    solutions.add_argument("--language", nargs="*", help="only these editions (en, zh); default: every one")
    solutions.set_defaults(run=cmd_run_solutions)
    course_folder = dict(default=str(ROOT / "grader"), help="the nbgrader course folder (default: grader/)")
    release = sub.add_parser("release", help="nbgrader generate_assignment of lessons (default: all) in the course")
    release.add_argument("lessons", nargs="*")
    release.add_argument("--course", **course_folder)
    release.set_defaults(run=cmd_release)
    auto = sub.add_parser("autograde", help="autograde a lesson's new and changed submissions, in parallel shards if asked")
    auto.add_argument("lesson")
    auto.add_argument("--course", **course_folder)
    auto.add_argument("--jobs", type=int, default=1, help="parallel workers (one GPU each where there are several)")
    auto.add_argument("--force", action="store_true", help="regrade unchanged submissions too")
    auto.add_argument("--shard", type=int, help="grade only shard I of --of N (e.g. one Slurm array task)")
    auto.add_argument("--merge", action="store_true", help="merge the --of N shards into the gradebook")
    auto.add_argument("--of", type=int, default=1, help="number of shards")
    auto.set_defaults(run=cmd_autograde)
    feedback = sub.add_parser("feedback", help="an HTML feedback page per student of a lesson")
    feedback.add_argument("lesson")
    feedback.add_argument("--course", **course_folder)
    feedback.set_defaults(run=cmd_feedback)
    export = sub.add_parser("export", help="a CSV of every student's grades: each lesson, each check")
    export.add_argument("--course", **course_folder)
    export.add_argument("--out", default=str(ROOT / "grader" / "grades.csv"))
    export.set_defaults(run=cmd_export)
    demo = sub.add_parser("demo", help="release and autograde sample submissions with real nbgrader")
    demo.set_defaults(run=cmd_demo)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()

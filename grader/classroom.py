"""Grading with real nbgrader: release, collect submissions, autograde a class, feedback, export.

The instructor's loop (README, "Instructors"): `make release`, `make autograde`, `make feedback`, `make export`, in
the course folder grader/ (nbgrader's config, gradebook and submissions live there). `autograde_class` grades a class
so that bad notebooks cost only their own grade: each submission is inspected first (a corrupt file, a deleted graded
cell, another lesson's notebook, an oversized file is *not graded*, with the reason), unchanged submissions keep
their grade, the rest is graded by nbgrader in shards (a private copy of the course each) and merged; a submission
nbgrader fails on is not graded either, never a silent 0. The course's grading record (a table of its own in
nbgrader's gradebook.db) keeps each grade's mode, status and reason, and the notebook it graded.

`python -m grader demo` (make demo) runs the whole instructor workflow in a scratch course folder
(demo/, git-ignored): generate_assignment for every lesson, three sample submissions per lesson
(reference-filled, untouched release, one realistic bug), `nbgrader autograde`, then a score table.
"""
import csv
import hashlib
import html
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from . import notebook, notebook_setup
from .harness import ROOT, grading_jobs

GRADER_DIR = Path(__file__).resolve().parent


def nbgrader(args, course, extra_env=None, check=True):
    """Run one nbgrader command in `course`, with this repo importable by the grading kernels."""
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # alembic, jupyter
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"], cwd=course, env=env,
                          capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def new_course(path, lessons, language="en"):
    """A course folder: our config and the sources of `lessons` in the edition `language` (grader/editions.py), then
    the release of each lesson. Either edition grades submissions of both into the same gradebook."""
    from . import editions
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    shutil.copy(GRADER_DIR / "nbgrader_config.py", path)
    for lesson in lessons:
        source = notebook.read(GRADER_DIR / "source" / lesson / f"{lesson}.ipynb")
        if language != "en":
            source = editions.translate(source, lesson, language)[0]
        notebook.write(source, path / "source" / lesson / f"{lesson}.ipynb")
        nbgrader(["generate_assignment", lesson, "--force"], path)
    return path


def submit(course, student, lesson, nb):
    target = Path(course) / "submitted" / student / lesson / f"{lesson}.ipynb"
    notebook.write(nb, target)
    (target.parent / "timestamp.txt").write_text("2026-11-29 12:00:00.000000 UTC")
    return target


def release(course, lesson):
    return notebook.read(Path(course) / "release" / lesson / f"{lesson}.ipynb")


def autograde(course, lesson, student=None, extra_env=None, check=True):
    """Plain `nbgrader autograde` of a lesson (every student, or one), regrading what was graded before."""
    args = ["autograde", lesson, "--force"] + ([f"--student={student}"] if student else [])
    return nbgrader(args, course, extra_env, check)


def feedback(course, lesson):
    """nbgrader generate_feedback: one HTML page per graded student, showing each check's message and mode; a
    student whose notebook was not graded gets a page that says why (from the course's grading record)."""
    nbgrader(["generate_feedback", lesson, "--force"], course)
    for student, row in GradingRecord(course).rows(lesson).items():
        if row["status"] != GRADED:
            page = Path(course) / "feedback" / student / lesson / f"{lesson}.html"
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(NOT_GRADED_PAGE.format(lesson=html.escape(lesson), status=html.escape(row["status"]),
                                                   reason=html.escape(row["reason"])), encoding="utf-8")
    return sorted((Path(course) / "feedback").glob(f"*/{lesson}/*.html"))


NOT_GRADED_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{lesson}: {status}</title></head>
<body style="font-family: sans-serif; max-width: 50em; margin: 2em auto">
<h2>{lesson}: {status}</h2>
<p>Your submission could not be graded, so it has no score yet (it is not a zero):</p>
<p style="border-left: 4px solid #c44e52; padding-left: 1em">{reason}</p>
<p>Hand in a corrected notebook; it is graded the next time your instructor grades this lesson.</p>
</body></html>
"""


def graded_modes(path):
    """The modes named in the outputs (messages) of the graded checks of one autograded notebook."""
    found = set()
    for cell in notebook.read(path).cells:
        if notebook.is_test(cell):
            for output in cell.get("outputs", []):
                text = output.get("text", "") + output.get("evalue", "")
                found |= set(re.findall(r"\[mode: (\w+)\]", text))
    return found


def grading_errors(path):
    """What broke in the grading of a graded notebook: a hidden test cell whose error is not a check's verdict
    (CheckFailed), e.g. ModuleNotFoundError: No module named 'grader' where the grader was not importable."""
    found = []
    for cell in notebook.read(path).cells:
        if notebook.is_test(cell):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error" and output.get("ename") != "CheckFailed":
                    found.append(f"the hidden test `{notebook.grade_id(cell)}` raised {output.get('ename')}: "
                                 f"{output.get('evalue')}"[:600])
    return found


def scores(course):
    """{(lesson, student): (score, max_score, mode)} read from the gradebook and the graded notebooks."""
    from nbgrader.api import Gradebook
    result = {}
    with Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                graded = Path(course) / "autograded" / submission.student_id / assignment.name / f"{assignment.name}.ipynb"
                modes = graded_modes(graded) if graded.exists() else set()
                result[(assignment.name, submission.student_id)] = (submission.score, submission.max_score,
                                                                     "/".join(sorted(modes)) or "?")
    return result


def demo(course_dir=ROOT / "demo"):
    from . import lessons
    sys.path.insert(0, str(ROOT))
    from tests import mutants  # the realistic wrong submissions of the test-suite

    mode, reason = notebook_setup.detect_mode(os.environ.get("FA_GRADING_MODE", "auto"))
    print(f"Grading mode on this machine: {mode} ({reason})")
    ids = list(lessons.LESSONS)
    started = time.time()
    course = new_course(course_dir, ids)
    print(f"released {len(ids)} lessons with nbgrader generate_assignment ({time.time() - started:.0f} s)")
    for lesson in ids:
        source = notebook.read(GRADER_DIR / "source" / lesson / f"{lesson}.ipynb")
        submit(course, "reference", lesson, notebook.filled(release(course, lesson), source))
        submit(course, "untouched", lesson, release(course, lesson))
        bug = mutants.load(lesson)[0]
        mutants.write(lesson, bug, Path(course) / "buggy.ipynb")
        submit(course, "buggy", lesson, notebook.read(Path(course) / "buggy.ipynb"))
        print(f"  {lesson}: buggy submission = {bug.name} ({bug.why})")
        lesson_started = time.time()
        autograde(course, lesson)
        print(f"  autograded {lesson} for 3 students ({time.time() - lesson_started:.0f} s)", flush=True)
    table = scores(course)
    print(f"\n{'lesson':<24} {'reference':>12} {'untouched':>12} {'buggy':>12}  graded in mode")
    for lesson in ids:
        cells = [table.get((lesson, s)) for s in ("reference", "untouched", "buggy")]
        shown = [f"{c[0]:g}/{c[1]:g}" if c else "missing" for c in cells]
        modes_seen = sorted({c[2] for c in cells if c})
        print(f"{lesson:<24} {shown[0]:>12} {shown[1]:>12} {shown[2]:>12}  {', '.join(modes_seen)}")
    print(f"\ngradebook: {course / 'gradebook.db'}; graded notebooks: {course / 'autograded'} "
          f"({time.time() - started:.0f} s in all)")
    return table


# ── the course's grading record: status, mode and reason of every grade, beside nbgrader's own tables ──────
GRADED, NOT_GRADED, FAILED = "graded", "not graded", "grading failed"


class GradingRecord:
    """A table of the course's own in nbgrader's gradebook.db (nbgrader and its migrations leave unknown tables
    alone): for each (lesson, student) the status of the last grading (graded / not graded: the submission's fault /
    grading failed: the grader's, to fix), the reason, the mode that graded it, the sha256 of the notebook graded and
    when. One writer at a time: the process that merges a class's grades."""

    COLUMNS = ("lesson", "student", "status", "reason", "mode", "sha256", "graded_at")

    def __init__(self, course):
        self.path = Path(course) / "gradebook.db"

    def _connect(self):
        db = sqlite3.connect(self.path)
        db.execute("CREATE TABLE IF NOT EXISTS course_grading (lesson TEXT, student TEXT, status TEXT, reason TEXT, "
                   "mode TEXT, sha256 TEXT, graded_at TEXT, PRIMARY KEY (lesson, student))")
        return db

    def rows(self, lesson=None):
        if not self.path.exists():
            return {}
        with self._connect() as db:
            found = db.execute("SELECT * FROM course_grading" + (" WHERE lesson = ?" if lesson else ""),
                               (lesson,) if lesson else ()).fetchall()
        rows = [dict(zip(self.COLUMNS, row)) for row in found]
        return {r["student"]: r for r in rows} if lesson else {(r["lesson"], r["student"]): r for r in rows}

    def put(self, lesson, student, status, reason="", mode="", sha256=""):
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO course_grading VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (lesson, student, status, reason, mode, sha256,
                        datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")))


# ── before grading: is it a notebook of this lesson at all? ──────────────────────────────────────────────────
MAX_NOTEBOOK_BYTES = 64 * 2**20  # a lesson's notebook with its outputs is a few MB; more is data or images saved in it


def submission_path(course, lesson, student):
    return Path(course) / "submitted" / student / lesson / f"{lesson}.ipynb"


def graded_cell_ids(nb):
    return {notebook.grade_id(c) for c in nb.cells if notebook.grade_id(c) and
            (notebook.is_test(c) or notebook.is_solution(c))}


def _lessons_graded_cells():
    from . import lessons
    return {lesson: graded_cell_ids(notebook.read(GRADER_DIR / "source" / lesson / f"{lesson}.ipynb"))
            for lesson in lessons.LESSONS}


def inspect_submission(course, lesson, student):
    """None when the submission can be graded, else why not, in words for the instructor and the student."""
    path = submission_path(course, lesson, student)
    if not path.exists():
        others = sorted(p.name for p in path.parent.glob("*.ipynb"))
        return (f"there is no {lesson}.ipynb in submitted/{student}/{lesson}/" +
                (f" (it holds {', '.join(others)}): the notebook must keep the name it was released with"
                 if others else ": nothing was handed in"))
    return inspect_notebook(path, lesson)


def inspect_notebook(path, lesson):
    """None when the notebook at `path` can be graded as `lesson`, else why not (`make autograde` and `grader check`
    give the same answer)."""
    import nbformat
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        return (f"the notebook is {size / 2**20:,.0f} MB, more than the {MAX_NOTEBOOK_BYTES / 2**20:.0f} MB a "
                "submission may be (data or images saved in it?): clear its outputs (Kernel → Restart & Clear "
                "Output), save it and hand it in again")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        return "the file is not a notebook (not UTF-8 text): hand in the .ipynb file itself"
    except json.JSONDecodeError as error:
        return (f"the file is not a valid notebook: its JSON breaks at line {error.lineno}, column {error.colno} "
                f"({error.msg}); the file was cut or edited outside Jupyter: download it again and hand it in again")
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as error:
        return f"the file is not a Jupyter notebook that nbformat can read ({type(error).__name__}: {error})"[:600]
    expected = _lessons_graded_cells()[lesson]
    found = graded_cell_ids(nb)
    if not found & expected:
        other = [name for name, ids in _lessons_graded_cells().items() if ids & found]
        return (f"this is the notebook of lesson {other[0]}, handed in as {lesson}: hand in {lesson}.ipynb"
                if other else f"this notebook has none of the graded cells of {lesson}: hand in the notebook that "
                              "was released for it, with the TODO cells filled in")
    missing = sorted(expected - found)
    if missing:
        return (f"the graded cell{'s' if len(missing) > 1 else ''} {', '.join(f'`{m}`' for m in missing)} "
                f"{'are' if len(missing) > 1 else 'is'} missing (deleted, or the code was copied into a notebook that "
                "lost their metadata): copy the code into a fresh copy of the released notebook and hand that in")
    return None


def sha256_of(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if Path(path).exists() else ""


# ── a class: plan, shards, merge ────────────────────────────────────────────────────────────────────────────
def students(course, lesson):
    folder = Path(course) / "submitted"
    return sorted(p.name for p in folder.iterdir() if (p / lesson).is_dir()) if folder.exists() else []


def plan(course, lesson, force=False):
    """(to grade, {student: why it cannot be graded}, unchanged since their last grading), from the submissions and
    the grading record: the same answer in every Slurm task of a class, since only the merge writes the record."""
    record = GradingRecord(course).rows(lesson)
    to_grade, refused, unchanged = [], {}, []
    for student in students(course, lesson):
        problem = inspect_submission(course, lesson, student)
        if problem:
            refused[student] = problem
            continue
        last = record.get(student)
        graded = Path(course) / "autograded" / student / lesson / f"{lesson}.ipynb"
        if (not force and last and last["status"] == GRADED and graded.exists()
                and last["sha256"] == sha256_of(submission_path(course, lesson, student))):
            unchanged.append(student)
        else:
            to_grade.append(student)
    return to_grade, refused, unchanged


def shard_dir(course, index):
    return Path(course) / ".shards" / str(index)


def shards(course, lesson, count, force=False):
    """The students each of `count` shards grades: shard i takes every count-th student of the plan from the i-th."""
    to_grade = plan(course, lesson, force)[0]
    return [to_grade[index::count] for index in range(count)]


def shard_students(course, lesson, index, count, force=False):
    return shards(course, lesson, count, force)[index]


def _failures(log, course, lesson):
    """{student: the last line of nbgrader's error} from an `nbgrader autograde` log (stderr)."""
    failures = {}
    for part in log.split("There was an error processing assignment: ")[1:]:
        match = re.match(r"\S*?submitted/([^/\s]+)/" + re.escape(lesson), part)
        if not match:
            continue
        lines = [line.strip() for line in part.split("\n")[1:] if line.strip() and not line.startswith("[")]
        error = next((line for line in reversed(lines) if re.match(r"[\w.]+(Error|Exception|Failed)\b", line)),
                     lines[-1] if lines else "nbgrader failed")
        failures[match.group(1)] = re.sub(r"^[\w.]*?(\w+: )", r"\1", error)[:1200]
    return failures


def shard_threads(shards_at_once):
    """CPU threads for each process of one of `shards_at_once` shards graded side by side on this machine: its cores
    shared out, at least one. torch and OpenMP give every process one thread per core by default; a class of twelve
    judges (and their workers) with sixteen threads each on sixteen cores spends its CPU switching and spinning."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // max(1, shards_at_once))


def shard_checks(shards_per_gpu):
    """How many checks each of `shards_per_gpu` judges sharing one GPU runs at once (their FA_GRADING_JOBS): a lone
    judge's number (harness.grading_jobs) shared out, at least 2. Every check runs in a worker with a CUDA context of
    its own, and many contexts at once make each slow to create: on an H100 with 16 cores, twelve judges of 8 checks
    each kept about 35 workers in uninterruptible sleep (inside the driver) and a worker took 15 s to start; with 2
    checks each it took 2.5 s, and the class went from 15.3 to 18.0 submissions a minute
    (benchmarks/h200/issue25/README.md)."""
    return max(2, grading_jobs("gpu") // max(1, shards_per_gpu))


def grade_shard(course, lesson, index, count, gpu=None, force=False, mode=None, threads=None,
                checks=None):
    """Autograde every count-th student of the plan (from `index`) in a private copy of the course and its gradebook.
    Safe to run at the same time as the other shards: nothing is shared but read-only inputs. Writes the shard's
    students and nbgrader's failures into the shard folder, for merge_shards; returns the students it graded.
    `threads` (shard_threads) caps the CPU threads of its processes (OMP_NUM_THREADS, unless that is set already);
    `checks` (shard_checks, on a GPU) caps how many checks its judge runs at once (FA_GRADING_JOBS, the same way)."""
    course, shard = Path(course), shard_dir(course, index)
    mine = shard_students(course, lesson, index, count, force)
    shutil.rmtree(shard, ignore_errors=True)
    (shard / "submitted").mkdir(parents=True)
    shutil.copy(course / "nbgrader_config.py", shard)
    shutil.copy(course / "gradebook.db", shard / "gradebook.db")  # holds the released assignment
    (shard / "source").symlink_to((course / "source").resolve())
    for student in mine:
        shutil.copytree(course / "submitted" / student, shard / "submitted" / student, symlinks=True)
    failures = {}
    if mine:
        env = {"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {}
        if mode:
            env["FA_GRADING_MODE"] = mode
        if threads and not os.environ.get("OMP_NUM_THREADS"):
            env["OMP_NUM_THREADS"] = str(threads)  # torch in the judge, and in its workers (sandbox.PASSED_ENV)
        if checks and not os.environ.get("FA_GRADING_JOBS"):
            env["FA_GRADING_JOBS"] = str(checks)  # read by the judge (harness.grading_jobs) in nbgrader's kernel
        done = autograde(shard, lesson, extra_env=env, check=False)
        failures = _failures(done.stderr + done.stdout, shard, lesson)
        for student in mine:
            graded = shard / "autograded" / student / lesson / f"{lesson}.ipynb"
            if student not in failures and not graded.exists():
                failures[student] = f"nbgrader wrote no graded notebook (exit status {done.returncode})"
            elif student not in failures and grading_errors(graded):
                failures[student] = grading_errors(graded)[0]
    (shard / "shard.json").write_text(json.dumps({"students": mine, "failures": failures}))
    return mine


def merge_shards(course, lesson, count):
    """Copy each shard's grades, comments and graded notebooks into the course's gradebook (one writer), record each
    grading in the course's grading record, and remove the shards. Returns {student: (status, reason)} of this run."""
    course = Path(course)
    outcome = {}
    to_grade, refused, _ = plan(course, lesson)
    for index in range(count):
        shard = shard_dir(course, index)
        if not (shard / "shard.json").exists():
            raise RuntimeError(f"shard {index} of {count} has not run (no {shard / 'shard.json'})")
        done = json.loads((shard / "shard.json").read_text())
        for student in done["students"]:
            reason = done["failures"].get(student)
            outcome[student] = (FAILED, f"nbgrader could not grade it: {reason}") if reason else (GRADED, "")
        _copy_grades(course, shard, lesson, [s for s in done["students"] if s not in done["failures"]])
    for student, reason in refused.items():
        outcome[student] = (NOT_GRADED, reason)
    record = GradingRecord(course)
    for student, (status, reason) in outcome.items():
        graded = course / "autograded" / student / lesson / f"{lesson}.ipynb"
        if status != GRADED:
            _forget(course, lesson, student)  # an earlier grade belongs to another notebook: not this one's
        modes = "/".join(sorted(graded_modes(graded))) if status == GRADED else ""
        record.put(lesson, student, status, reason, modes, sha256_of(submission_path(course, lesson, student)))
    shutil.rmtree(course / ".shards", ignore_errors=True)
    return outcome


def _copy_grades(course, shard, lesson, students_):
    from nbgrader.api import Gradebook, MissingEntry
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb, \
            Gradebook(f"sqlite:///{shard / 'gradebook.db'}") as sgb:
        for student in students_:
            try:
                sub = sgb.find_submission(lesson, student)
            except MissingEntry:
                continue
            gb.update_or_create_student(student)
            try:
                gb.remove_submission(lesson, student)
            except MissingEntry:
                pass
            gb.add_submission(lesson, student, timestamp=sub.timestamp, extension=sub.extension)
            for snb in sub.notebooks:
                target = gb.find_submission_notebook(snb.name, lesson, student)
                target.flagged, target.late_submission_penalty = snb.flagged, snb.late_submission_penalty
                for g in snb.grades:
                    t = gb.find_grade(g.name, snb.name, lesson, student)
                    t.auto_score, t.manual_score, t.extra_credit = g.auto_score, g.manual_score, g.extra_credit
                    t.needs_manual_grade = g.needs_manual_grade
                for c in snb.comments:
                    t = gb.find_comment(c.name, snb.name, lesson, student)
                    t.auto_comment, t.manual_comment = c.auto_comment, c.manual_comment
            gb.db.commit()
            graded = shard / "autograded" / student / lesson
            if graded.exists():
                target_dir = course / "autograded" / student / lesson
                shutil.rmtree(target_dir, ignore_errors=True)
                shutil.copytree(graded, target_dir)


def _forget(course, lesson, student):
    """No grade, graded notebook or feedback page of an earlier submission stays for a notebook that was not graded."""
    from nbgrader.api import Gradebook, MissingEntry
    with Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gb:
        try:
            gb.remove_submission(lesson, student)
        except MissingEntry:
            pass
    for folder in ("autograded", "feedback"):
        shutil.rmtree(Path(course) / folder / student / lesson, ignore_errors=True)


def mixed_modes(course, lesson, mode):
    """{student: mode} of the lesson's grades made in another mode than `mode`."""
    return {student: row["mode"] for student, row in GradingRecord(course).rows(lesson).items()
            if row["status"] == GRADED and row["mode"] and row["mode"] != mode}


def autograde_class(course, lesson, jobs=1, gpus=None, force=False, log=print):
    """Autograde every new or changed submission of `lesson`: in `jobs` parallel shards (one GPU each when there are
    several: worker i gets GPU i % gpus), then one merge. Returns merge_shards' outcome of this run."""
    from concurrent.futures import ThreadPoolExecutor
    mode, reason = notebook_setup.detect_mode(os.environ.get("FA_GRADING_MODE", "auto"))
    other = mixed_modes(course, lesson, mode)
    if other:
        modes = sorted(set(other.values()))
        log(f"⚠ {len(other)} earlier grade(s) of {lesson} were made in {' and '.join(modes)} mode, and this machine "
            f"grades in {mode} mode ({reason}): a class graded in two modes is graded by two rules (README, 'One "
            f"mode per class'). Regrade everyone on one machine with FORCE=1. Graded in another mode: "
            + ", ".join(sorted(other)))
    to_grade, refused, unchanged = plan(course, lesson, force)
    if unchanged:
        log(f"{len(unchanged)} submission(s) unchanged since their last grading keep their grade (FORCE=1 regrades "
            "them): " + ", ".join(unchanged))
    jobs = max(1, min(jobs, len(to_grade)))
    if gpus is None:
        try:
            import torch
            gpus = torch.cuda.device_count()
        except Exception:
            gpus = 0
    checks = shard_checks(-(-jobs // gpus)) if mode == "gpu" and gpus else None  # shards per GPU, rounded up
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(grade_shard, course, lesson, i, jobs, (i % gpus) if gpus else None, force, mode,
                               shard_threads(jobs), checks) for i in range(jobs)]
        for f in futures:
            f.result()  # re-raise a shard's failure (a broken course folder, not a submission)
    return merge_shards(course, lesson, jobs)


# ── grades out: a CSV for the instructor's spreadsheet or LMS ───────────────────────────────────────────────
def export(course, out):
    """One row per student: id and name, then for each lesson its score, maximum, mode, status (graded, not graded,
    grading failed, not handed in) and the reason of a status other than graded, then the points of each of its
    checks. Returns the number of students."""
    from nbgrader.api import Gradebook, MissingEntry
    record = GradingRecord(course).rows()
    with Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gb:
        lessons_ = sorted(a.name for a in gb.assignments)
        checks = {a.name: [g.name for nb in a.notebooks for g in nb.grade_cells] for a in gb.assignments}
        ids = sorted({s.id for s in gb.students} | {student for (_, student) in record})
        header = ["student_id", "first_name", "last_name", "email"]
        for lesson in lessons_:
            header += [lesson, f"{lesson} max", f"{lesson} mode", f"{lesson} status", f"{lesson} reason"]
            header += [f"{lesson}:{name.removeprefix('test_')}" for name in checks[lesson]]
        rows = []
        for student in ids:
            try:
                who = gb.find_student(student)
                row = [student, who.first_name or "", who.last_name or "", who.email or ""]
            except MissingEntry:
                row = [student, "", "", ""]
            for lesson in lessons_:
                kept = record.get((lesson, student))
                try:
                    sub = gb.find_submission(lesson, student)
                except MissingEntry:
                    sub = None
                if sub is None or (kept and kept["status"] != GRADED):
                    status, reason = (kept["status"], kept["reason"]) if kept else ("not handed in", "")
                    row += ["", gb.find_assignment(lesson).max_score, "", status, reason] + [""] * len(checks[lesson])
                    continue
                points = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
                row += [sub.score, sub.max_score, kept["mode"] if kept else "", GRADED, ""]
                row += [points.get(name, "") for name in checks[lesson]]
            rows.append(row)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return len(rows)


def release_lessons(course, lessons_):
    """nbgrader generate_assignment of each lesson in `course` (its release/ folder and its gradebook entry)."""
    for lesson in lessons_:
        nbgrader(["generate_assignment", lesson, "--force"], course)
    return [Path(course) / "release" / lesson / f"{lesson}.ipynb" for lesson in lessons_]

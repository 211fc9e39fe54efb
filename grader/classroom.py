"""Grading with real nbgrader: release, collect submissions, autograde, read the gradebook.

`python -m grader demo` (make demo) runs the whole instructor workflow in a scratch course folder
(demo/, git-ignored): generate_assignment for every lesson, three sample submissions per lesson
(reference-filled, untouched release, one realistic bug), `nbgrader autograde`, then a score table.
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import notebook, notebook_setup
from .harness import ROOT

GRADER_DIR = Path(__file__).resolve().parent


def nbgrader(args, course, extra_env=None):
    """Run one nbgrader command in `course`, with this repo importable by the grading kernels."""
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # alembic, jupyter
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"], cwd=course, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
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


def autograde(course, lesson, student=None, extra_env=None):
    args = ["autograde", lesson, "--force"] + ([f"--student={student}"] if student else [])
    return nbgrader(args, course, extra_env)


def feedback(course, lesson):
    """nbgrader generate_feedback: one HTML page per student, showing each check's message and mode."""
    nbgrader(["generate_feedback", lesson, "--force"], course)
    return sorted((Path(course) / "feedback").glob(f"*/{lesson}/*.html"))


def graded_modes(path):
    """The modes named in the outputs (messages) of the graded checks of one autograded notebook."""
    found = set()
    for cell in notebook.read(path).cells:
        if notebook.is_test(cell):
            for output in cell.get("outputs", []):
                text = output.get("text", "") + output.get("evalue", "")
                found |= set(re.findall(r"\[mode: (\w+)\]", text))
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


# ── a class in parallel: shards, then one merge (nbgrader's SQLite gradebook takes one writer) ──────────
def students(course, lesson):
    return sorted(p.name for p in (Path(course) / "submitted").iterdir() if (p / lesson).is_dir())


def shard_dir(course, index):
    return Path(course) / ".shards" / str(index)


def shard_students(course, lesson, index, count):
    return students(course, lesson)[index::count]


def grade_shard(course, lesson, index, count, gpu=None):
    """Autograde every count-th student (from `index`) in a private copy of the course and its gradebook.
    Safe to run at the same time as the other shards: nothing is shared but read-only inputs."""
    course, shard = Path(course), shard_dir(course, index)
    shutil.rmtree(shard, ignore_errors=True)
    (shard / "submitted").mkdir(parents=True)
    shutil.copy(course / "nbgrader_config.py", shard)
    shutil.copy(course / "gradebook.db", shard / "gradebook.db")  # holds the released assignment
    (shard / "source").symlink_to((course / "source").resolve())
    mine = shard_students(course, lesson, index, count)
    for student in mine:
        shutil.copytree(course / "submitted" / student, shard / "submitted" / student, symlinks=True)
    if mine:
        autograde(shard, lesson, extra_env=None if gpu is None else {"CUDA_VISIBLE_DEVICES": str(gpu)})
    return mine


def merge_shards(course, lesson, count):
    """Copy each shard's grades, comments and graded notebooks into the course's gradebook (one writer)."""
    from nbgrader.api import Gradebook, MissingEntry
    course = Path(course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for index in range(count):
            shard = shard_dir(course, index)
            if not (shard / "gradebook.db").exists():
                raise RuntimeError(f"shard {index} of {count} has not run (no {shard / 'gradebook.db'})")
            with Gradebook(f"sqlite:///{shard / 'gradebook.db'}") as sgb:
                for sub in sgb.find_assignment(lesson).submissions:
                    student = sub.student_id
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


def autograde_class(course, lesson, jobs=1, gpus=None):
    """Autograde every submission of `lesson`: in `jobs` parallel shards (one GPU each when there are
    several: worker i gets GPU i % gpus), then one merge. jobs=1 is plain `nbgrader autograde`."""
    from concurrent.futures import ThreadPoolExecutor
    if jobs <= 1:
        return autograde(course, lesson)
    if gpus is None:
        try:
            import torch
            gpus = torch.cuda.device_count()
        except Exception:
            gpus = 0
    with ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(grade_shard, course, lesson, i, jobs, (i % gpus) if gpus else None) for i in range(jobs)]
        for f in futures:
            f.result()  # re-raise a shard's failure
    merge_shards(course, lesson, jobs)

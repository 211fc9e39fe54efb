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


def nbgrader(args, course):
    """Run one nbgrader command in `course`, with this repo importable by the grading kernels."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # alembic, jupyter
    done = subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"], cwd=course, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def new_course(path, lessons):
    """A scratch course folder: our config and sources, then the release of each lesson."""
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    shutil.copy(GRADER_DIR / "nbgrader_config.py", path)
    for lesson in lessons:
        shutil.copytree(GRADER_DIR / "source" / lesson, path / "source" / lesson)
        nbgrader(["generate_assignment", lesson, "--force"], path)
    return path


def submit(course, student, lesson, nb):
    target = Path(course) / "submitted" / student / lesson / f"{lesson}.ipynb"
    notebook.write(nb, target)
    (target.parent / "timestamp.txt").write_text("2026-11-29 12:00:00.000000 UTC")
    return target


def release(course, lesson):
    return notebook.read(Path(course) / "release" / lesson / f"{lesson}.ipynb")


def autograde(course, lesson, student=None):
    args = ["autograde", lesson, "--force"] + ([f"--student={student}"] if student else [])
    return nbgrader(args, course)


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
        submit(course, f"buggy", lesson, notebook.read(Path(course) / "buggy.ipynb"))
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

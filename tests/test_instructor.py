"""The instructor's path (issue 21): the README's commands, run as written, grade a class right; nothing of the answer
reaches a student; a broken grader fails loudly instead of recording zeros."""
import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader import classroom, notebook
from grader.__main__ import reference_notebook, release_path
from grader.harness import ROOT, source_path
from tests import mutants
from tests.conftest import LESSONS
from tests.test_isolation import ENDLESS

README = ROOT / "README.md"
MARKER = "<!-- instructor-commands"


def instructor_block(path=README):
    """The command block of the README's instructor section, as a list of lines."""
    text = path.read_text(encoding="utf-8")
    start = text.index("```bash\n", text.index(MARKER)) + len("```bash\n")
    return text[start:text.index("```", start)].rstrip("\n").split("\n")


def commands(lines):
    """The commands without their comments (a comment-only line becomes '#')."""
    return [re.sub(r"\s+#.*$", "", line).strip() if not line.lstrip().startswith("#") else "#" for line in lines]


# ── nothing of the answer reaches a student ─────────────────────────────────────────────────────────────────────
def released_notebooks():
    """Every release notebook of both editions: course/ and course/zh/ are nbgrader's generate_assignment output
    with the course's config (grader/build.py; test_build keeps them current)."""
    return [(lesson, language, release_path(lesson, language)) for lesson in LESSONS for language in ("en", "zh")]


@pytest.mark.parametrize("lesson,language,path", released_notebooks(), ids=lambda x: getattr(x, "name", x))
def test_the_release_holds_no_solution_no_solution_note_and_no_hidden_test(lesson, language, path):
    from grader import editions
    source = notebook.read(source_path(lesson))
    if language != "en":
        source = editions.translate(source, lesson, language)[0]
    notes = [c.source.strip() for c in source.cells if "solution-notes" in notebook.tags(c)]
    assert notes, f"{lesson} has no solution notes to look for"
    release = notebook.read(path)
    text = "\n".join(c.source for c in release.cells)
    for cell in release.cells:
        assert "solution-notes" not in notebook.tags(cell)
    for note in notes:
        first_line = note.split("\n")[0].strip()
        assert first_line not in text, f"{path}: the solution note '{first_line[:60]}' is in the release"
        body = max(note.split("\n"), key=len).strip()
        assert body not in text, f"{path}: a solution note's text is in the release: {body[:80]}"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "grader.hidden"):
        assert marker not in text, f"{path} holds {marker!r}"
    regions = sum(c.source.count("### BEGIN SOLUTION") for c in source.cells)
    stubs = sum(c.source.count(classroom_stub()) for c in release.cells)
    assert regions == stubs > 0, f"{path}: {regions} solution regions in the source, {stubs} stubs in the release"


def classroom_stub():
    return 'raise NotImplementedError("TODO: replace this line with your code")'


# ── the grader is importable wherever nbgrader runs it ──────────────────────────────────────────────────────────
@pytest.mark.cpu_only
def test_make_setup_installs_the_grader_so_it_imports_from_any_folder(tmp_path):
    """nbgrader runs each grading kernel in autograded/<student>/<lesson>/: no relative PYTHONPATH reaches the repo."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", "import grader.hidden, grader; print(grader.__file__)"], cwd=tmp_path,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"`import grader` fails outside the repository: {done.stderr[-800:]}"
    assert Path(done.stdout.strip()).resolve().is_relative_to(ROOT)


def test_a_grader_the_grading_kernel_cannot_import_fails_the_class_loudly(tmp_path, mode):
    """Every hidden test raising ModuleNotFoundError used to be recorded as a 0 by nbgrader: now the submission is
    marked 'grading failed', has no score, and `python -m grader autograde` exits 1."""
    lesson = "00_setup"
    course = tmp_path / "course"
    source = notebook.read(source_path(lesson))
    for cell in source.cells:  # the grading kernel cannot import what the hidden tests import
        cell.source = cell.source.replace("from grader.hidden import grade", "from grader.not_installed import grade")
    course.mkdir()
    shutil.copy(ROOT / "grader" / "nbgrader_config.py", course)
    notebook.write(source, course / "source" / lesson / f"{lesson}.ipynb")
    classroom.release_lessons(course, [lesson])
    classroom.submit(course, "ada", lesson, reference_notebook(lesson))
    done = subprocess.run([sys.executable, "-m", "grader", "autograde", lesson, "--course", str(course)],
                          capture_output=True, text=True, env=dict(os.environ, FA_GRADING_MODE=mode))
    assert done.returncode == 1, done.stdout + done.stderr
    row = classroom.GradingRecord(course).rows(lesson)["ada"]
    assert row["status"] == classroom.FAILED and "ModuleNotFoundError" in row["reason"], row
    assert "GRADING FAILED" in done.stdout and "grader.not_installed" in done.stdout
    assert (lesson, "ada") not in classroom.scores(course)  # no zero in the gradebook


# ── the README's block, verbatim, on a class of six ─────────────────────────────────────────────────────────────
CLASS = {  # student: what they hand in (before a resubmission)
    "ada": "reference", "ben": "bug", "cy": "corrupt", "dee": "endless loop", "eve": "release", "fay": "bug",
}
# The endless loop is handed in for lesson 03 only: it costs its time limit (about a minute on 2 cores), and lesson 00's
# pass is there for the gradebook across lessons; in lesson 00 dee hands in a bug (00's
# hanging kernel is the wrong submission kernel_hangs of tests/test_lessons.py)
ENDLESS_LOOPS = {"03_per_query_kernel": ENDLESS}
COLLECT = '''
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.test_instructor import collect
collect(Path.cwd() / "grader", sys.argv[1], sys.argv[2:])
'''


def collect(course, lesson, students):
    """What an instructor's collection puts in grader/submitted/ for the class (or for the students named)."""
    for student in students:
        what = CLASS[student]
        if what == "reference":
            nb = reference_notebook(lesson)
        elif what == "release":
            nb = notebook.read(Path(course) / "release" / lesson / f"{lesson}.ipynb")
        else:
            mutant = ENDLESS_LOOPS[lesson] if what == "endless loop" and lesson in ENDLESS_LOOPS \
                else mutants.load(lesson)[0]
            path = mutants.write(lesson, mutant, Path(course).parent / f"{student}.ipynb")
            nb = notebook.read(path)
        path = classroom.submit(course, student, lesson, nb)
        if what == "corrupt":  # cut off in the middle, as an interrupted download leaves it
            text = path.read_text(encoding="utf-8")
            path.write_text(text[:len(text) // 2], encoding="utf-8")


def copy_of_the_repository(target):
    """A fresh clone's files (what git tracks, as this working tree has them), with this machine's .venv."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)  # mtimes kept: make sees .venv up to date
    (target / ".venv").symlink_to(ROOT / ".venv")


def run_block(lines, cwd, lesson, env):
    """The block in one bash, its lesson set where it sets one, the comment-only line replaced by the collection."""
    script = []
    for line in lines:
        if re.match(r"LESSON=\S+", line):
            line = f"LESSON={lesson}"
        elif line.lstrip().startswith("#"):
            line = f'"{sys.executable}" collect.py $LESSON {" ".join(CLASS)}'
        script.append(line)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(script)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, f"the README's instructor block failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.cpu_only
def test_the_readmes_instructor_commands_grade_a_class(tmp_path):
    # the copy's `make setup` must find .venv up to date, or it would reinstall the grader from the copy
    stale = subprocess.run(["make", "-q", ".venv/.installed"], cwd=ROOT, capture_output=True)
    assert stale.returncode == 0, "run `make setup` first: .venv is older than requirements.txt or pyproject.toml"
    lines = instructor_block()
    assert [c for c in commands(lines) if c == "#"] == ["#"], "the block has one comment line: where submissions arrive"
    assert commands(instructor_block(ROOT / "README.zh.md")) == commands(lines), "README.zh.md's block differs"
    repo = tmp_path / "repo"
    repo.mkdir()
    copy_of_the_repository(repo)
    (repo / "collect.py").write_text(COLLECT.format(root=str(ROOT)))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FA_GRADING_MODE", "MAKEFLAGS", "MFLAGS")}
    course = repo / "grader"
    outputs = {}
    for lesson in ("00_setup", "03_per_query_kernel"):
        outputs[lesson] = run_block(lines, repo, lesson, env)
        released = notebook.read(course / "release" / lesson / f"{lesson}.ipynb")
        assert not any("solution-notes" in notebook.tags(c) or "About the solution" in c.source for c in released.cells)
        assert released.cells == notebook.read(release_path(lesson)).cells  # what to hand out: course/ is the same
        record = classroom.GradingRecord(course).rows(lesson)
        scores = classroom.scores(course)
        top = scores[(lesson, "ada")][1]
        assert scores[(lesson, "ada")][:2] == (top, top), outputs[lesson]  # the reference: full marks
        assert scores[(lesson, "eve")][0] == 0  # the untouched release
        assert 0 <= scores[(lesson, "ben")][0] < top
        assert record["cy"]["status"] == classroom.NOT_GRADED and "not a valid notebook" in record["cy"]["reason"]
        assert (lesson, "cy") not in scores  # not graded is no zero
        assert scores[(lesson, "dee")][0] < top
        dee = notebook.read(course / "autograded" / "dee" / lesson / f"{lesson}.ipynb")
        if lesson in ENDLESS_LOOPS:
            assert "without returning" in " ".join(o.get("text", "") for c in dee.cells for o in c.get("outputs", []))
        assert all(row["mode"] for s, row in record.items() if s != "cy")
        assert "NOT GRADED: the file is not a valid notebook" in outputs[lesson]
        # fay hands in again, fixed: only her notebook is graded again
        classroom.submit(course, "fay", lesson, reference_notebook(lesson))
        again = run_block([f"LESSON={lesson}"] + [line for line in lines if line.startswith(("make autograde",
                                                                                            "make feedback"))],
                          repo, lesson, env)
        assert classroom.scores(course)[(lesson, "fay")][:2] == (top, top), again
        assert "unchanged since its last grading" in again and again.count("(unchanged since") == 4, again
        pages = {p.parts[-3] for p in (course / "feedback").glob(f"*/{lesson}/{lesson}.html")}
        assert pages == set(CLASS), pages
        assert "not a valid notebook" in (course / "feedback" / "cy" / lesson / f"{lesson}.html").read_text()
    with open(course / "grades.csv", encoding="utf-8") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    assert set(rows) == set(CLASS)
    assert rows["ada"]["03_per_query_kernel"] == rows["ada"]["03_per_query_kernel max"] == "10.0"
    assert rows["cy"]["03_per_query_kernel"] == "" and rows["cy"]["03_per_query_kernel status"] == "not graded"
    assert "not a valid notebook" in rows["cy"]["03_per_query_kernel reason"]
    assert rows["ada"]["03_per_query_kernel status"] == "graded" and rows["ada"]["03_per_query_kernel reason"] == ""
    assert rows["ada"]["03_per_query_kernel:basic"] == "1.0" and rows["eve"]["00_setup:softmax_ragged"] == "0.0"
    assert not (course / ".shards").exists()
    (tmp_path / "autograde_03.txt").write_text(outputs["03_per_query_kernel"])
    print(outputs["03_per_query_kernel"])


# ── bad notebooks are not graded, with the reason; the class's other grades are not touched ──────────────────────
def test_bad_notebooks_are_not_graded_and_say_why(tmp_path):
    lesson = "03_per_query_kernel"
    course = tmp_path / "course"
    (course / "release" / lesson).mkdir(parents=True)
    good = reference_notebook(lesson)
    classroom.submit(course, "good", lesson, good)
    path = classroom.submit(course, "cut", lesson, good)
    path.write_text(path.read_text(encoding="utf-8")[:3000], encoding="utf-8")
    classroom.submit(course, "other_lesson", lesson, reference_notebook("00_setup"))
    deleted = reference_notebook(lesson)
    deleted.cells = [c for c in deleted.cells if notebook.grade_id(c) != "per_query_attention_kernel"]
    classroom.submit(course, "deleted_cell", lesson, deleted)
    os.truncate(classroom.submit(course, "huge", lesson, good), 2 * 2**30)  # 2 GB (sparse: no disk used)
    renamed = classroom.submit(course, "renamed", lesson, good)
    renamed.rename(renamed.with_name("my_notebook.ipynb"))
    (course / "submitted" / "binary" / lesson).mkdir(parents=True)
    (course / "submitted" / "binary" / lesson / f"{lesson}.ipynb").write_bytes(b"PK\x03\x04\xff\xfe zip")
    why = {s: classroom.inspect_submission(course, lesson, s) for s in classroom.students(course, lesson)}
    assert why.pop("good") is None
    expected = {"cut": "its JSON breaks at line", "other_lesson": "this is the notebook of lesson 00_setup",
                "deleted_cell": "the graded cell `per_query_attention_kernel` is missing",
                "huge": "the notebook is 2,048 MB, more than the 64 MB", "renamed": "(it holds my_notebook.ipynb)",
                "binary": "not a notebook (not UTF-8 text)"}
    assert set(why) == set(expected)
    for student, words in expected.items():
        assert words in why[student], (student, why[student])
    to_grade, refused, unchanged = classroom.plan(course, lesson)
    assert to_grade == ["good"] and set(refused) == set(expected) and unchanged == []


def test_a_class_graded_in_two_modes_is_flagged(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    record = classroom.GradingRecord(course)
    record.put("04_tiled_kernel_2d", "ada", classroom.GRADED, mode="gpu", sha256="x")
    record.put("04_tiled_kernel_2d", "ben", classroom.GRADED, mode="interpreter", sha256="y")
    record.put("04_tiled_kernel_2d", "cy", classroom.NOT_GRADED, reason="corrupt")
    assert classroom.mixed_modes(course, "04_tiled_kernel_2d", "interpreter") == {"ada": "gpu"}
    assert classroom.mixed_modes(course, "04_tiled_kernel_2d", "gpu") == {"ben": "interpreter"}

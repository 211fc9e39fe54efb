"""Submissions that attack the grader (tests/mutants/attacks.py) get exactly the points they earn, and change nothing
outside their sandbox: not the course's files, not the gradebook, not another student's folder, not the judge."""
import hashlib
import re
from pathlib import Path

import pytest

from grader import notebook, structure
from grader.__main__ import reference_notebook
from grader.harness import ROOT, run_lesson, source_path
from tests.mutants.attacks import ATTACKS, LESSON


def write_attack(attack, targets, path):
    nb = reference_notebook(LESSON)
    for grade_id, change in attack.cells(targets).items():
        cell = next(c for c in nb.cells if notebook.grade_id(c) == grade_id)
        if isinstance(change, tuple):
            old, new = change
            assert cell.source.count(old) == 1, f"{attack.name}: {old!r} must occur once in {grade_id}"
            cell.source = cell.source.replace(old, new)
        else:
            cell.source = change
    notebook.write(nb, path)
    return path


@pytest.fixture
def course(tmp_path):
    """An nbgrader course as the attacks find it: a gradebook, another student's submission, the course's files."""
    folder = tmp_path / "course"
    (folder / "submitted" / "bob" / LESSON).mkdir(parents=True)
    (folder / "gradebook.db").write_bytes(b"SQLite format 3\x00 grades")
    (folder / "submitted" / "bob" / LESSON / "bob.ipynb").write_text("bob's work")
    solutions = ROOT / "solutions" / f"{LESSON}.ipynb"
    targets = {"source": str(source_path(LESSON)), "solutions": str(solutions),
               "solutions_size": solutions.stat().st_size, "gradebook": str(folder / "gradebook.db"),
               "other_student": str(folder / "submitted" / "bob" / LESSON / "planted.db"),
               "course_file": str(ROOT / "course" / "planted.db"), "marker": str(tmp_path / "judge_ran_this.png")}
    return folder, targets


def fingerprint(folder):
    """Every file under the course folder and the repository's course, solutions and grader folders, with a hash."""
    files = [p for top in (folder, ROOT / "course", ROOT / "solutions", ROOT / "grader")
             for p in Path(top).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def grade(attack, course, tmp_path, mode):
    folder, targets = course
    path = write_attack(attack, targets, folder / "submitted" / "mallory" / LESSON / f"{LESSON}.ipynb")
    before = fingerprint(folder)
    report = run_lesson(LESSON, path, mode)
    after = fingerprint(folder)
    after.pop(str(path), None), before.pop(str(path), None)
    assert after == before, f"{attack.name} changed files outside its sandbox: " \
                            f"{sorted(set(after.items()) ^ set(before.items()))[:4]}"
    assert not Path(targets["marker"]).exists(), f"{attack.name}: the judge ran the submission's payload"
    assert not Path("/tmp/trojan.png").exists(), f"{attack.name}: a tensor subclass ran code outside the sandbox"
    return report


@pytest.mark.parametrize("structure_mode", [False, True], ids=["run", "structure"])
@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_an_attack_gets_only_what_it_earns(attack, structure_mode, course, tmp_path, mode):
    grading_mode = "structure" if structure_mode else mode  # interpreter on the CPU, gpu under make test-gpu
    report = grade(attack, course, tmp_path, grading_mode)
    # structure mode runs no student function: an attack that does its work only when called keeps the points of a
    # solution whose code has the lesson's structure; one that empties the kernels, or reaches into the process, not
    expected = attack.score if not structure_mode or attack.score == 0 else report.max_score
    messages = "\n".join(t.message for t in report.tests)
    assert report.score == expected, f"{attack.name}: {report.score} points\n{messages}"


@pytest.mark.parametrize("attack", [a for a in ATTACKS if a.guard != "static"], ids=lambda a: a.name)
def test_the_sandbox_and_the_channel_hold_without_the_static_guard(attack, course, tmp_path, monkeypatch, mode):
    monkeypatch.setattr(structure, "tampering", lambda code: [])
    report = grade(attack, course, tmp_path, mode)
    messages = "\n".join(t.message for t in report.tests)
    assert report.score == attack.score, f"{attack.name}: {report.score} points\n{messages}"


def test_the_static_guard_names_what_it_refuses(course, tmp_path, mode):
    attack = next(a for a in ATTACKS if a.name == "forges_the_worker_reply")
    report = grade(attack, course, tmp_path, mode)
    assert report.score == 0
    # the cell by the name the learner sees in it (Jupyter shows no cell numbers), and the line in that cell
    assert all(re.search(r"your code uses `import sys` \(the `per_query_attention` cell, line \d+: `import sys`\)",
                         t.message) for t in report.tests), report.tests[0].message

"""Every graded exercise: the release scores 0, the reference scores full marks, wrong kernels lose points."""
import re

import pytest

from grader import lessons, notebook
from grader.__main__ import reference_notebook, release_path
from grader.harness import ROOT, run_lesson
from tests import mutants
from tests.conftest import LESSONS, timing_checks

ALL_MUTANTS = [(lesson, m) for lesson in LESSONS for m in mutants.load(lesson)]


def mutant_case(lesson, mutant):
    """A mutant whose grading runs a speed check is timed on a GPU: marked `timing` (make test-gpu runs it alone)."""
    caught_by, passes = mutant.expected("gpu")
    timed = timing_checks(lesson) & (caught_by | passes)
    return pytest.param(lesson, mutant, id=f"{lesson}-{mutant.name}", marks=[pytest.mark.timing] if timed else [])


def failed(report):
    return {t.id for t in report.tests if not t.passed}


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.parametrize("grading_mode", ["interpreter", "structure"])
def test_release_scores_zero(lesson, grading_mode):
    report = run_lesson(lesson, release_path(lesson), grading_mode)
    assert report.max_score > 0
    assert report.score == 0, [t.message for t in report.tests if t.passed]
    for test in report.tests:
        assert "is not done" in test.message, test.message  # it names the unfinished TODO


@pytest.mark.parametrize("lesson", LESSONS)
def test_reference_scores_full_marks(lesson, mode, tmp_path):
    """Every check but the speed checks, which on a GPU run alone (test_reference_is_fast_enough)."""
    path = tmp_path / f"{lesson}.ipynb"
    notebook.write(reference_notebook(lesson), path)
    untimed = {c.id for c in lessons.get(lesson).checks} - timing_checks(lesson)
    report = run_lesson(lesson, path, mode, only=untimed if mode == "gpu" else None)
    assert report.score == report.max_score > 0, "\n".join(t.message for t in report.tests if not t.passed)


SPEED_LESSONS = [lesson for lesson in LESSONS if timing_checks(lesson)]


@pytest.mark.gpu
@pytest.mark.timing
@pytest.mark.parametrize("lesson", SPEED_LESSONS)
def test_reference_is_fast_enough(lesson, mode, tmp_path):
    """The reference solution against itself: its speed check passes when it has the GPU to itself (make test-gpu
    runs the timing tests alone, after the others)."""
    path = tmp_path / f"{lesson}.ipynb"
    notebook.write(reference_notebook(lesson), path)
    report = run_lesson(lesson, path, mode, only=timing_checks(lesson))
    assert {t.id for t in report.tests} == timing_checks(lesson)
    assert report.score == report.max_score > 0, "\n".join(t.message for t in report.tests if not t.passed)


TRITON_LESSONS = [l for l in LESSONS if lessons.get(l).kernels]  # the others run for real in every mode


@pytest.mark.parametrize("lesson", TRITON_LESSONS)
def test_reference_scores_full_marks_in_structure_mode(lesson, tmp_path):
    path = tmp_path / f"{lesson}.ipynb"
    notebook.write(reference_notebook(lesson), path)
    report = run_lesson(lesson, path, "structure")
    assert report.score == report.max_score > 0, "\n".join(t.message for t in report.tests if not t.passed)


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_has_wrong_submissions(lesson):
    assert len(mutants.load(lesson)) >= 6, f"tests/mutants/lesson{lesson[:2]}.py needs realistic wrong submissions"


def test_the_mutation_suite_is_class_sized():
    """Issue 6: at least 40 realistic wrong submissions across the lessons, each with the checks that catch it."""
    assert len(ALL_MUTANTS) >= 40 and all(m.caught_by for _, m in ALL_MUTANTS)


@pytest.mark.parametrize("lesson,mutant", [mutant_case(lesson, m) for lesson, m in ALL_MUTANTS])
def test_wrong_submission_loses_points(lesson, mutant, mode, tmp_path):
    if mutant.gpu_only and mode != "gpu":
        pytest.skip("shows only on a real GPU (make test-gpu)")
    path = mutants.write(lesson, mutant, tmp_path / f"{lesson}.ipynb")
    caught_by, passes = mutant.expected(mode)
    report = run_lesson(lesson, path, mode, only=caught_by | passes, timeout=mutant.timeout)
    messages = "\n".join(t.message for t in report.tests)
    for test in report.tests:  # whatever the submission printed or raised, a message stays readable
        assert len(test.message) < 4000, f"{mutant.name}: a message of {len(test.message)} characters"
    assert caught_by <= failed(report), f"{mutant.name} ({mutant.why}) was not caught:\n{messages}"
    assert not (passes & failed(report)), f"{mutant.name} cost points it should not:\n{messages}"
    blamed = sorted(named_todos(messages) & set(mutant.not_blamed))
    assert not blamed, f"{mutant.name} ({mutant.why}): a message blames TODO {blamed}, which is right:\n{messages}"
    assert report.score < report.max_score


def named_todos(text):
    """Every TODO number a message names: "TODO 7", "TODOs 7–9", "TODO 7, 8 and 10", "TODO 7、8 和 10"."""
    named = set()
    for group in re.finditer(r"TODOs? ?(\d+(?:\s*(?:,|、|–|-|and|和|or|或)\s*\d+)*)", text):
        numbers = re.split(r"\s*(,|、|and|和|or|或)\s*", group.group(1))
        for part in numbers:
            ends = re.split(r"\s*[–-]\s*", part)
            if all(e.isdigit() for e in ends):
                named.update(range(int(ends[0]), int(ends[-1]) + 1))
    return named


def test_named_todos_reads_every_way_a_message_names_them():
    assert named_todos("TODO 2 should stop the loop") == {2}
    assert named_todos("dK is wrong (TODOs 7–9); see TODO 12") == {7, 8, 9, 12}
    assert named_todos("TODO 7, 8 and 10; `x` 中的 TODO 3、4 和 6") == {3, 4, 6, 7, 8, 10}
    assert named_todos("no TODO here, 2 lines") == set()


def test_checks_parse_code_only_through_structure_parse():
    """A lesson's checks run in threads, and CPython 3.11's parser is not thread-safe ("AST constructor recursion depth
    mismatch" cost lesson 05's reference a check in CI): checks parse through structure.parse, which takes a lock."""
    for path in sorted((ROOT / "grader" / "lessons").glob("lesson*.py")):
        assert "ast.parse(" not in path.read_text(encoding="utf-8"), f"{path.name}: use structure.parse"

"""A class graded in parallel shards gives the same gradebook as one nbgrader run (issue: make autograde JOBS=N)."""
import re
import shutil

from grader import classroom, notebook
from grader.harness import run_lesson, source_path
from tests import mutants


def gradebook_rows(course, lesson):
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return sorted((s.student_id, nb.name, g.name, g.auto_score)
                      for s in gb.find_assignment(lesson).submissions for nb in s.notebooks for g in nb.grades)


def test_two_shards_give_the_same_gradebook_as_one_run(tmp_path):
    lesson = "00_setup"
    one = classroom.new_course(tmp_path / "one", [lesson])
    release = classroom.release(one, lesson)
    reference = notebook.filled(release, notebook.read(source_path(lesson)))
    bug = mutants.load(lesson)[2]
    buggy = notebook.read(mutants.write(lesson, bug, tmp_path / "bug.ipynb"))
    for student, nb in [("ada", reference), ("bob", release), ("cy", buggy)]:
        classroom.submit(one, student, lesson, nb)
    two = tmp_path / "two"
    shutil.copytree(one, two)
    classroom.autograde_class(one, lesson, jobs=1)
    classroom.autograde_class(two, lesson, jobs=2, gpus=0)
    rows = gradebook_rows(one, lesson)
    assert rows == gradebook_rows(two, lesson)
    scores = classroom.scores(two)
    assert scores[(lesson, "ada")][0] == scores[(lesson, "ada")][1] > 0
    assert scores[(lesson, "bob")][0] == 0
    assert 0 < scores[(lesson, "cy")][0] < scores[(lesson, "cy")][1]
    assert (two / "autograded" / "cy" / lesson / f"{lesson}.ipynb").exists()


def test_a_regrade_draws_the_same_inputs_and_an_edit_draws_new_ones(tmp_path, mode):
    """Inputs are random but seeded by the submission's code: regrading a notebook cannot change its score."""
    lesson = "00_setup"
    bug = next(m for m in mutants.load(lesson) if m.name == "contiguous_row_stride")
    path = mutants.write(lesson, bug, tmp_path / "bug.ipynb")

    def seed_of_failure():
        [test] = run_lesson(lesson, path, mode, only={"softmax_strided"}).tests
        assert not test.passed, test.message
        return int(re.search(r"\(seed (\d+)\)", test.message).group(1))

    first = seed_of_failure()
    assert seed_of_failure() == first
    nb = notebook.read(path)
    cell = next(c for c in nb.cells if notebook.is_solution(c) and "def softmax(" in c.source)
    cell.source += "\n# an edit\n"
    notebook.write(nb, path)
    assert seed_of_failure() != first


def test_shards_side_by_side_share_the_cores_out(tmp_path, monkeypatch):
    """Each of N shards graded at once gets cores // N CPU threads (OMP_NUM_THREADS for its nbgrader, judge and
    workers); one the instructor set is kept."""
    lesson = "00_setup"
    course = classroom.new_course(tmp_path / "course", [lesson])
    release = classroom.release(course, lesson)
    for student in ("ada", "bob"):
        classroom.submit(course, student, lesson, release)
    seen = []

    def autograde(shard, lesson, extra_env=None, check=True):
        seen.append(dict(extra_env or {}))
        return type("Done", (), {"stdout": "", "stderr": "", "returncode": 0})()

    monkeypatch.setattr(classroom, "autograde", autograde)
    monkeypatch.setattr(classroom.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert classroom.shard_threads(12) == 1 and classroom.shard_threads(2) == 8 and classroom.shard_threads(40) == 1
    classroom.grade_shard(course, lesson, 0, 2, threads=classroom.shard_threads(2))
    assert seen[-1]["OMP_NUM_THREADS"] == "8"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    classroom.grade_shard(course, lesson, 0, 2, threads=classroom.shard_threads(2))
    assert "OMP_NUM_THREADS" not in seen[-1]  # the instructor's 3 passes on unchanged, from the environment

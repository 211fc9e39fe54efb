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


def recording_autograde(seen):
    """A stand-in for classroom.autograde that grades nothing and records the environment each shard's nbgrader gets."""
    def autograde(shard, lesson, extra_env=None, check=True):
        seen.append(dict(extra_env or {}))
        return type("Done", (), {"stdout": "", "stderr": "", "returncode": 0})()
    return autograde


def test_shards_side_by_side_share_the_cores_out(tmp_path, monkeypatch):
    """Each of N shards graded at once gets cores // N CPU threads (OMP_NUM_THREADS for its nbgrader, judge and
    workers); one the instructor set is kept."""
    lesson = "00_setup"
    course = classroom.new_course(tmp_path / "course", [lesson])
    release = classroom.release(course, lesson)
    for student in ("ada", "bob"):
        classroom.submit(course, student, lesson, release)
    seen = []

    monkeypatch.setattr(classroom, "autograde", recording_autograde(seen))
    monkeypatch.setattr(classroom.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert classroom.shard_threads(12) == 1 and classroom.shard_threads(2) == 8 and classroom.shard_threads(40) == 1
    classroom.grade_shard(course, lesson, 0, 2, threads=classroom.shard_threads(2))
    assert seen[-1]["OMP_NUM_THREADS"] == "8"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    classroom.grade_shard(course, lesson, 0, 2, threads=classroom.shard_threads(2))
    assert "OMP_NUM_THREADS" not in seen[-1]  # the instructor's 3 passes on unchanged, from the environment


def test_judges_sharing_a_gpu_share_out_its_checks(tmp_path, monkeypatch):
    """Twelve judges on one GPU run 2 checks at once each, not a lone judge's 8 (each check is a CUDA context: with
    96 of them a worker took 15 s to start on an H100, 2.5 s with 24); two judges on two GPUs keep 8 each; an
    instructor's FA_GRADING_JOBS wins; interpreter mode is left as it was."""
    lesson = "00_setup"
    course = classroom.new_course(tmp_path / "course", [lesson])
    release = classroom.release(course, lesson)
    for student in [f"s{i}" for i in range(12)]:
        classroom.submit(course, student, lesson, release)
    seen = []

    def grade_shard(course, lesson, index, count, gpu=None, force=False, mode=None, threads=None, checks=None):
        seen.append((gpu, checks))
        return []

    monkeypatch.setattr(classroom.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.delenv("FA_GRADING_JOBS", raising=False)
    assert [classroom.shard_checks(n) for n in (1, 2, 4, 12, 40)] == [8, 4, 2, 2, 2]
    monkeypatch.setattr(classroom, "grade_shard", grade_shard)
    monkeypatch.setattr(classroom, "merge_shards", lambda course, lesson, count: {})
    monkeypatch.setattr(classroom.notebook_setup, "detect_mode", lambda wanted: ("gpu", "test"))
    classroom.autograde_class(course, lesson, jobs=12, gpus=1, force=True, log=lambda *a: None)
    assert seen == [(0, 2)] * 12
    seen.clear()
    classroom.autograde_class(course, lesson, jobs=2, gpus=2, force=True, log=lambda *a: None)
    assert seen == [(0, 8), (1, 8)]
    seen.clear()
    monkeypatch.setattr(classroom.notebook_setup, "detect_mode", lambda wanted: ("interpreter", "test"))
    classroom.autograde_class(course, lesson, jobs=2, gpus=0, force=True, log=lambda *a: None)
    assert seen == [(None, None)] * 2
    monkeypatch.undo()  # the real grade_shard passes it on to nbgrader, unless the instructor chose already
    monkeypatch.setattr(classroom, "autograde", recording_autograde(seen))
    monkeypatch.delenv("FA_GRADING_JOBS", raising=False)
    seen.clear()
    classroom.grade_shard(course, lesson, 0, 12, checks=2)
    assert seen[-1]["FA_GRADING_JOBS"] == "2"
    monkeypatch.setenv("FA_GRADING_JOBS", "5")
    classroom.grade_shard(course, lesson, 0, 12, checks=2)
    assert "FA_GRADING_JOBS" not in seen[-1]

"""The nbgrader round trip with the course's own config: generate_assignment -> autograde -> gradebook."""
from pathlib import Path

from grader import classroom, notebook
from grader.harness import source_path


def test_generate_autograde_and_read_the_gradebook(tmp_path, mode):
    course = classroom.new_course(tmp_path / "course", ["00_setup"])
    release = classroom.release(course, "00_setup")
    assert not any("grader.hidden" in c.source for c in release.cells)
    classroom.submit(course, "alice", "00_setup", notebook.filled(release, notebook.read(source_path("00_setup"))))
    classroom.submit(course, "bob", "00_setup", release)
    classroom.autograde(course, "00_setup")
    scores = classroom.scores(course)
    alice, bob = scores[("00_setup", "alice")], scores[("00_setup", "bob")]
    assert alice[0] == alice[1] == 7 and alice[2] == mode, alice
    assert bob[0] == 0 and bob[1] == 7, bob
    graded = (Path(course) / "autograded" / "bob" / "00_setup" / "00_setup.ipynb").read_text()
    assert "TODO 1 in `softmax_kernel` is not done" in graded and f"[mode: {mode}]" in graded

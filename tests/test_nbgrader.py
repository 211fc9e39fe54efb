"""The nbgrader round trip with the course's own config: generate_assignment -> autograde -> gradebook."""
import re
from pathlib import Path

from grader import classroom, notebook
from grader.harness import source_path


def test_generate_autograde_and_read_the_gradebook(tmp_path, mode):
    course = classroom.new_course(tmp_path / "course", ["00_setup"])
    release = classroom.release(course, "00_setup")
    assert not any("grader.hidden" in c.source for c in release.cells)
    classroom.submit(course, "alice", "00_setup", notebook.filled(release, notebook.read(source_path("00_setup"))))
    classroom.submit(course, "bob", "00_setup", release)
    # mallory leaves the TODOs and patches the grader inside her notebook: the grading kernel never runs her cells
    cheat = notebook.read(classroom.Path(course) / "release" / "00_setup" / "00_setup.ipynb")
    next(c for c in cheat.cells if notebook.grade_id(c) == "softmax").source += "\nimport grader.hidden\ngrader.hidden.grade = lambda *a, **k: None\n"
    classroom.submit(course, "mallory", "00_setup", cheat)
    # trent leaves the TODOs, deletes one test cell and empties another: nbgrader restores both from the gradebook
    tests = [c for c in release.cells if notebook.is_test(c)]
    edited = notebook.read(classroom.Path(course) / "release" / "00_setup" / "00_setup.ipynb")
    edited.cells = [c for c in edited.cells if notebook.grade_id(c) != notebook.grade_id(tests[0])]
    next(c for c in edited.cells if notebook.grade_id(c) == notebook.grade_id(tests[1])).source = "pass"
    classroom.submit(course, "trent", "00_setup", edited)
    classroom.autograde(course, "00_setup")
    scores = classroom.scores(course)
    alice, bob = scores[("00_setup", "alice")], scores[("00_setup", "bob")]
    assert alice[0] == alice[1] == 7 and alice[2] == mode, alice
    assert bob[0] == 0 and bob[1] == 7, bob
    assert scores[("00_setup", "mallory")][0] == 0
    assert scores[("00_setup", "trent")][:2] == (0, 7), scores[("00_setup", "trent")]
    graded_nb = notebook.read(Path(course) / "autograded" / "bob" / "00_setup" / "00_setup.ipynb")
    graded = " ".join("".join(o.get("text", "") for c in graded_nb.cells for o in c.get("outputs", [])).split())
    assert "TODO 1 in `softmax_kernel` is not done" in graded and f"[mode: {mode}]" in graded
    pages = {p.parts[-3]: " ".join(p.read_text().split()) for p in classroom.feedback(course, "00_setup")}
    assert set(pages) == {"alice", "bob", "mallory", "trent"}
    assert "TODO 1 in `softmax_kernel` is not done" in pages["bob"] and f"[mode: {mode}]" in pages["bob"]
    assert "softmax of rows of any length (masks)" in pages["alice"] and f"[mode: {mode}]" in pages["alice"]


def test_config_loads_without_error():
    """nbgrader only logs an error for a config file that raises, then grades with its defaults (and runs the
    student's cells in the grading kernel): the config must load."""
    from traitlets.config import Config
    from grader.harness import ROOT
    from grader.nbgrader_plugins import ExecuteGradedCellsOnly
    config = Config()
    path = ROOT / "grader" / "nbgrader_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: config, "__file__": str(path)})
    assert ExecuteGradedCellsOnly in config.Autograde.autograde_preprocessors
    assert config.Execute.kernel_name == "python3" and config.Execute.timeout >= 600


def test_one_class_mixes_editions(tmp_path, mode):
    """An English release grades Chinese submissions too (and the reverse): same hidden tests, one gradebook, each
    student's feedback in the language of their notebook."""
    from grader import editions
    from grader.__main__ import reference_notebook, release_path
    # each release gets the other edition's notebooks only (its own edition is what every other test grades)
    for released, handed_in, not_done in (("en", "zh", r"中的 TODO 1 还没有完成"),
                                         ("zh", "en", r"TODO 1 in `\w+` is not done")):
        course = classroom.new_course(tmp_path / released, ["00_setup"], language=released)
        classroom.submit(course, "ada", "00_setup", reference_notebook("00_setup", handed_in))
        classroom.submit(course, "bo", "00_setup", notebook.read(release_path("00_setup", handed_in)))
        classroom.autograde(course, "00_setup")
        scores = classroom.scores(course)
        assert scores[("00_setup", "ada")][:2] == (7, 7), scores
        assert scores[("00_setup", "bo")][:2] == (0, 7), scores
        graded = notebook.read(Path(course) / "autograded" / "bo" / "00_setup" / "00_setup.ipynb")
        text = " ".join("".join(o.get("text", "") for c in graded.cells for o in c.get("outputs", [])).split())
        assert re.search(not_done, text), text[:500]
        assert editions.language_of(graded) == handed_in

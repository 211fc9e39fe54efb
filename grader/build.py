"""`make build`: course/ and solutions/ from the source notebooks in grader/source/ (COURSE_SPEC §2).

1. The shared cells (tag `setup`: grader/notebook_setup.py; tag `check-helpers`: grader/notebook_checks.py)
   are copied into each source notebook, so one file is the source of each.
2. nbgrader `generate_assignment` makes the student release (no solutions, no hidden tests, no outputs, and with
   the course's config no cell tagged `solution-notes`: they belong to the solutions only).
3. solutions/NN.ipynb = the release as the student sees it, 🛑 STOP HERE 🛑, then the reference code with
   its notes, visible checks and demos, so a self-learner can run it top to bottom. The committed solutions carry
   the outputs of one top-to-bottom run (`python -m grader run-solutions`, grader/run_solutions.py), stamped with a
   fingerprint of their code: the build keeps those outputs only while the code is the same.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from . import editions, notebook
from .harness import ROOT, SOURCE_DIR

GRADER_DIR = Path(__file__).resolve().parent
SHARED_CELLS = {
    "setup": (GRADER_DIR / "notebook_setup.py", "\nMODE, DEVICE = course_setup()\n"),
    "check-helpers": (GRADER_DIR / "notebook_checks.py", ""),
}
SOLUTIONS_NOTE = ("> **Solutions notebook.** Above the stop marker (🛑) is the exercise exactly as a student gets "
                  "it: its checks print what a learner sees before solving (which TODO is not done). Below the marker "
                  "is the reference solution with its notes, checks, plots and timings, as one run of this notebook "
                  "printed them (the banner at the top says on which machine).")
STOP = ("---\n# 🛑 STOP HERE 🛑\n\nEverything above is the exercise exactly as a student gets it. "
        "Below is the reference solution: the code of every TODO cell, the notes that explain it, and the "
        "checks and plots run against it. Try the exercise first.")


def lesson_ids():
    return sorted(p.name for p in SOURCE_DIR.iterdir() if (p / f"{p.name}.ipynb").exists())


def shared_cell_text(tag):
    path, tail = SHARED_CELLS[tag]
    return path.read_text(encoding="utf-8").rstrip("\n") + "\n" + tail


def sync_shared_cells(nb):
    changed = False
    for cell in nb.cells:
        for tag in notebook.tags(cell) & SHARED_CELLS.keys():
            text = shared_cell_text(tag).rstrip("\n")
            if cell.source != text:
                cell.source, changed = text, True
    return changed


def clean(nb):
    """No outputs, no execution counts, no widget state: the committed form of every notebook."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cell.pop("id", None)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.nbformat, nb.nbformat_minor = 4, 4
    return nb


def generate_release(sources):
    """Run nbgrader generate_assignment in a scratch course folder on the source notebooks {id: notebook};
    returns {id: release notebook}."""
    lesson_ids_ = list(sources)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(GRADER_DIR / "nbgrader_config.py", tmp)
        for lesson, nb in sources.items():
            notebook.write(clean(nb), Path(tmp) / "source" / lesson / f"{lesson}.ipynb")
        # the config imports grader.nbgrader_plugins: the repo must be importable, or nbgrader silently
        # ignores the whole config (and writes its default stub)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))  # alembic
        for lesson in lesson_ids_:
            done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", lesson, "--force",
                                   "--log-level=WARN"], cwd=tmp, capture_output=True, text=True, env=env)
            if "Exception while loading config file" in done.stderr:
                raise SystemExit(f"nbgrader could not load grader/nbgrader_config.py:\n{done.stderr[-3000:]}")
            if done.returncode != 0:
                raise SystemExit(f"nbgrader generate_assignment {lesson} failed:\n{done.stdout}\n{done.stderr}")
        return {lesson: notebook.read(Path(tmp) / "release" / lesson / f"{lesson}.ipynb") for lesson in lesson_ids_}


def release_notebook(generated):
    return clean(generated)  # nbgrader_config's DropSolutionNotes has removed the `solution-notes` cells already


def solutions_notebook(release, source, language="en"):
    nb = nbformat.from_dict(json.loads(json.dumps(release)))
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(editions.SOLUTIONS_NOTE.get(language, SOLUTIONS_NOTE)))
    nb.cells.append(nbformat.v4.new_markdown_cell(editions.STOP.get(language, STOP)))
    for cell in source.cells:
        keep = (notebook.is_solution(cell) or notebook.tags(cell) & {"solution-notes", "check", "demo"}
                or (cell.cell_type == "markdown" and cell.source.lstrip().startswith("#")
                    and not notebook.tags(cell) & {"intro"}))
        if keep and not notebook.is_test(cell):
            copy = nbformat.from_dict(json.loads(json.dumps(cell)))
            copy.source = notebook.strip_solution_delimiters(copy.source)
            copy.metadata.pop("nbgrader", None)  # a plain notebook: nothing here is graded
            nb.cells.append(copy)
    return clean(nb)


def code_fingerprint(nb):
    """sha256 of a notebook's code cells, in order: what its outputs depend on."""
    digest = hashlib.sha256()
    for cell in nb.cells:
        if cell.cell_type == "code":
            digest.update(cell.source.encode("utf-8") + b"\0")
    return digest.hexdigest()


def with_recorded_outputs(nb, path):
    """`nb` (clean) with the outputs of the notebook at `path` when they were made by this very code (the run's
    fingerprint in its metadata matches), else `nb` unchanged: outputs never outlive the code that made them."""
    if not path.exists():
        return nb
    old = notebook.read(path)
    run = old.metadata.get("solution_run")
    if not run or run.get("code_sha256") != code_fingerprint(nb):
        return nb
    old_code = [c for c in old.cells if c.cell_type == "code"]
    for cell, recorded in zip([c for c in nb.cells if c.cell_type == "code"], old_code):
        cell.outputs, cell.execution_count = recorded.get("outputs", []), recorded.get("execution_count")
    nb.metadata["solution_run"] = run
    return nb


def _write_if_changed(nb, path, check_only, changed):
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        changed.append(path.relative_to(ROOT))
        if not check_only:
            notebook.write(nb, path)


def build(check_only=False, only=None):
    """Regenerate everything (or the lessons in `only`); returns the paths that changed (or would)."""
    changed = []
    ids = [i for i in lesson_ids() if not only or i in only]
    sources = {}
    for lesson in ids:
        path = SOURCE_DIR / lesson / f"{lesson}.ipynb"
        nb = notebook.read(path)
        sync_shared_cells(nb)
        _write_if_changed(clean(nb), path, check_only, changed)
        sources[lesson] = nb
    if check_only and changed:
        return changed  # the sources themselves are stale; the release would be generated from stale text
    generated = generate_release(sources)
    for lesson in ids:
        release = release_notebook(generated[lesson])
        _write_if_changed(release, ROOT / "course" / lesson / f"{lesson}.ipynb", check_only, changed)
        solution_path = ROOT / "solutions" / f"{lesson}.ipynb"
        _write_if_changed(with_recorded_outputs(solutions_notebook(release, sources[lesson]), solution_path),
                          solution_path, check_only, changed)
    for language in editions.LANGUAGES:  # each edition: the same sources with the words swapped (grader/editions.py)
        translated = {lesson: editions.translate(sources[lesson], lesson, language)[0] for lesson in ids
                      if editions.catalog_path(language, lesson).exists()}
        if not translated:
            continue
        generated = generate_release(translated)
        for lesson, source in translated.items():
            release = release_notebook(generated[lesson])
            release.metadata["course_language"] = language
            _write_if_changed(release, ROOT / "course" / language / lesson / f"{lesson}.ipynb", check_only, changed)
            solution_path = ROOT / "solutions" / language / f"{lesson}.ipynb"
            solution = solutions_notebook(release, source, language)
            _write_if_changed(with_recorded_outputs(solution, solution_path), solution_path, check_only, changed)
    return changed

"""Every notebook runs top to bottom: in interpreter mode on CI (no GPU), in GPU mode under make test-gpu.

- release notebooks run alone in an empty folder with `grader` not importable, and their stubs only ever
  fail with the "TODO n … is not done" message;
- solutions run, and every visible check of the reference part passes;
- sources run with their hidden tests, which grade the source itself (as `nbgrader autograde` would).
On a GPU some of these run elsewhere (each test says where): notebooks that time kernels need the GPU to themselves.
"""
import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from grader.__main__ import release_path
from grader.harness import ROOT, source_path
from tests.conftest import LESSONS, timing_checks


def execute(path, cwd, with_grader, skip_demos=False):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET", "FA_MODE")}
    # keep other entries (a GPU machine may bring jupyter through PYTHONPATH); add the repo only when asked
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    env["PYTHONPATH"] = os.pathsep.join(([str(ROOT)] if with_grader else []) + paths)
    nb = nbformat.read(str(path), as_version=4)
    if skip_demos:  # plots and benchmarks: the solutions notebooks run them
        nb.cells = [c for c in nb.cells if "demo" not in c.get("metadata", {}).get("tags", [])]
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return nb


def outputs(cell):
    """A cell's printed output, whitespace normalised (messages are wrapped to the page)."""
    text = "".join(o.get("text", "") + "".join(o.get("data", {}).get("text/plain", "")) for o in cell.get("outputs", []))
    return " ".join(text.split())


def visible_checks(cells):
    """The outputs of the cells that run a visible check (a `check(...)` call; helper cells define, print nothing)."""
    return [outputs(c) for c in cells if "check" in c.metadata.get("tags", [])
            and any(line.startswith("check(") for line in c.source.split("\n"))]


def errors(nb):
    return [(i, o.ename, o.evalue) for i, c in enumerate(nb.cells) for o in c.get("outputs", []) if o.output_type == "error"]


@pytest.mark.parametrize("lesson", LESSONS)
def test_release_runs_alone_and_stubs_only_say_not_done(lesson, tmp_path, mode):
    shutil.copy(release_path(lesson), tmp_path)  # nothing else: no repo, no grader
    nb = execute(tmp_path / f"{lesson}.ipynb", tmp_path, with_grader=False)
    assert not errors(nb), errors(nb)
    text = "".join(outputs(c) for c in nb.cells)
    assert f"MODE: {mode.upper()}" in text
    assert "is not done" in text
    checks = visible_checks(nb.cells)
    assert checks and all("❌" in o and "is not done" in o for o in checks), checks


# On a GPU the solutions of lessons 03-06 are run by `make solutions` (run_solutions fails on an error or a ❌ below
# the stop marker), and their recorded outputs are checked on every CI run by test_build.py: their benchmarks take
# minutes and must have the GPU to themselves, so the GPU suite does not run them a second time beside other tests.
GPU_SOLUTIONS = ("03_per_query_kernel", "04_tiled_kernel_2d", "05_flash_attention_v2", "06_flash_decoding")


@pytest.mark.parametrize("lesson", LESSONS)
def test_solutions_run_and_reference_passes_its_checks(lesson, tmp_path, mode):
    if mode == "gpu" and lesson in GPU_SOLUTIONS:
        pytest.skip("gpu mode: `make solutions` runs this notebook alone on the GPU and records its outputs; "
                    "tests/test_build.py::test_solutions_show_the_outputs_of_their_current_code checks them")
    shutil.copy(ROOT / "solutions" / f"{lesson}.ipynb", tmp_path)
    nb = execute(tmp_path / f"{lesson}.ipynb", tmp_path, with_grader=False)
    assert not errors(nb), errors(nb)
    stop = next(i for i, c in enumerate(nb.cells) if "STOP HERE" in c.source)
    checks = visible_checks(nb.cells[stop:])
    assert checks and all("✅" in o and "❌" not in o for o in checks), checks


@pytest.mark.parametrize("lesson", LESSONS)
def test_source_runs_and_its_hidden_tests_pass(lesson, tmp_path, mode):
    """The source notebook without its demos (the solutions run those), then its hidden test cells, which grade it."""
    if mode == "gpu" and timing_checks(lesson):
        pytest.skip("gpu mode: the hidden cells would time the speed check beside other tests; "
                    "test_lessons.py grades the same code (test_reference_scores_full_marks, and "
                    "test_reference_is_fast_enough alone on the GPU), and lessons 00-03 run this path here")
    shutil.copy(source_path(lesson), tmp_path)
    nb = execute(tmp_path / f"{lesson}.ipynb", tmp_path, with_grader=True, skip_demos=True)
    assert not errors(nb), errors(nb)
    graded = [outputs(c) for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded and all("✅" in o and f"[mode: {mode}]" in o for o in graded), graded

"""One source per lesson (COURSE_SPEC §2): generated notebooks are current and differ from the source
only inside solution regions and hidden tests (as mojo-gpu-puzzles' check_skeletons does)."""
import re

import pytest

from grader import build, notebook
from grader.__main__ import release_path
from grader.harness import ROOT, source_path
from tests.conftest import LESSONS

STUB = 'raise NotImplementedError("TODO: replace this line with your code")'


def test_generated_notebooks_are_up_to_date():
    stale = build.build(check_only=True)
    assert not stale, f"run `make build` and commit: {stale}"


def expected_release_text(cell):
    """What nbgrader must make of a source cell: solution regions -> stub, hidden tests -> nothing."""
    text = re.sub(r"(?ms)^([ \t]*)### BEGIN SOLUTION\n.*?^[ \t]*### END SOLUTION", lambda m: m.group(1) + STUB, cell.source)
    text = re.sub(r"(?ms)^[ \t]*### BEGIN HIDDEN TESTS\n.*?^[ \t]*### END HIDDEN TESTS\n?", "", text)
    return text.rstrip("\n")


@pytest.mark.parametrize("lesson", LESSONS)
def test_release_equals_source_outside_solution_regions(lesson):
    source = [c for c in notebook.read(source_path(lesson)).cells if "solution-notes" not in notebook.tags(c)]
    release = notebook.read(release_path(lesson)).cells
    assert len(source) == len(release)
    for s, r in zip(source, release):
        assert r.source.rstrip("\n") == expected_release_text(s), f"cell {notebook.grade_id(s)} differs"
        assert "### BEGIN" not in r.source and "### END" not in r.source


@pytest.mark.parametrize("lesson", LESSONS)
def test_release_has_no_solutions_and_no_outputs(lesson):
    for cell in notebook.read(release_path(lesson)).cells:
        assert "solution-notes" not in notebook.tags(cell)
        assert "grader.hidden" not in cell.source
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.parametrize("lesson", LESSONS)
def test_solutions_show_exercise_then_stop_then_reference(lesson):
    cells = notebook.read(ROOT / "solutions" / f"{lesson}.ipynb").cells
    stops = [i for i, c in enumerate(cells) if "🛑 STOP HERE 🛑" in c.source]
    assert len(stops) == 1
    before, after = cells[:stops[0]], cells[stops[0] + 1:]
    assert any(STUB in c.source for c in before), "the exercise part shows the stubs"
    assert not any(STUB in c.source for c in after), "the reference part is complete"
    assert not any("grader.hidden" in c.source for c in cells)


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_todo_is_numbered_and_hinted(lesson):
    numbers = []
    for cell in notebook.read(source_path(lesson)).cells:
        if notebook.is_solution(cell):
            lines = cell.source.split("\n")
            for i, line in enumerate(lines):
                if "### BEGIN SOLUTION" in line:
                    todo = [l for l in lines[:i] if re.match(r"\s*#\s*TODO \d+", l)]
                    assert todo, f"solution region in {notebook.grade_id(cell)} without a TODO line above it"
                    numbers.append(int(re.match(r"\s*#\s*TODO (\d+)", todo[-1]).group(1)))
    assert numbers and sorted(set(numbers)) == list(range(1, max(numbers) + 1)), numbers


SOLUTIONS = sorted((ROOT / "solutions").rglob("*.ipynb"))  # every edition's (solutions/zh/… too)
RUN_ON_A_CPU = ("00_setup", "01_pytorch_attention", "02_tiled_simulator")  # their outputs need no GPU


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.relative_to(ROOT / "solutions").as_posix())
def test_solutions_show_the_outputs_of_their_current_code(path):
    """Issues 15 and 22: a self-learner reads the solutions without running them, so each carries the outputs of one
    run of its current code (`make solutions`; lessons 03-06 on a GPU). The build drops outputs whose code changed;
    this says which are missing, and that the run had no error and every visible check of the reference passed."""
    nb = notebook.read(path)
    run = nb.metadata.get("solution_run")
    where = "" if path.stem in RUN_ON_A_CPU else " on a GPU (benchmarks/run_on_gpu.sh OUT solutions)"
    assert run is not None, f"{path} carries no recorded run: `make solutions LESSON={path.stem}`{where}, then commit it"
    assert run["code_sha256"] == build.code_fingerprint(nb), f"outputs older than the code: `make solutions LESSON={path.stem}`"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any(c.outputs for c in code), "a recorded run with no outputs"
    outputs = [o for c in code for o in c.outputs]
    errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs if o.get("output_type") == "error"]
    assert not errors, f"the recorded run raised: {errors[:3]}"
    from grader.run_solutions import failed_checks
    assert not failed_checks(nb), f"a visible check of the reference failed in the recorded run: {failed_checks(nb)}"
    banner = "".join(o.get("text", "") for o in code[0].outputs) if code else ""
    assert f"MODE: {run['mode'].upper()}" in banner, f"the set-up cell's banner does not say {run['mode']} mode"
    if path.stem not in RUN_ON_A_CPU:
        assert run["mode"] == "gpu", f"{path.stem}'s plots and timings come from a GPU, not from {run['mode']} mode"
        assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.stem} shows no plot"


def test_the_readmes_decode_table_is_made_from_results_json():
    """Lesson 06's table in both READMEs is generated (benchmarks/decode_tables.py) from the decode rows of
    benchmarks/results.json, which hold every point of COURSE_SPEC §7's decode grid."""
    from benchmarks import decode_tables
    rows = decode_tables.decode_rows()
    grid = {(hkv, b, n) for hkv in (8, 32) for b in (1, 8, 32) for n in (4096, 16384, 65536, 131072) if b * n <= 2 << 20}
    for impl in ("lesson06", "sdpa-flash", "sdpa-cudnn"):
        assert {(r["Hkv"], r["B"], r["N"]) for r in rows if r["impl"] == impl} == grid, impl
    for page in (16, 256):
        assert {(r["Hkv"], r["B"], r["N"]) for r in rows if r["impl"] == "lesson06-paged" and r["page_size"] == page} == grid
    assert sum(r["impl"] == "read-probe" for r in rows) == 1
    new_table = decode_tables.table(rows)
    for path in decode_tables.READMES:
        text = path.read_text(encoding="utf-8")
        assert decode_tables.rewrite(text, new_table) == text, f"{path.name}: run `python -m benchmarks.decode_tables`"

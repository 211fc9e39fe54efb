"""Hints that teach (issue 23): a TODO's comment names the idea and how much code it takes, never the code; the code
sits one deliberate click away, in a folded hint under the cell, after the idea as equations and shapes.

The folded hint of TODO n is a markdown `<details>` block whose summary names "TODO n", in a markdown cell between
the code cell of TODO n and the next code cell. It holds the idea first and then a nested `<details>` with the code,
which must be the reference solution of TODO n (comments and spacing aside), so that a revealed hint runs as typed.
Outside folded hints no line of a solution appears in a released notebook (prose, or comments of code cells), and
prose quotes no measured speed: those are the outputs of the executed solutions or the committed benchmark tables.
"""
import io
import re
import textwrap
import tokenize

import pytest

from grader import editions, notebook
from grader.__main__ import release_path
from grader.harness import source_path
from tests.conftest import LESSONS

EDITIONS = ["en", *editions.LANGUAGES]
TODO_LINE = re.compile(r"^\s*#\s*TODO (\d+)\b(.*)$")
SIZE = re.compile(r"^ \((about )?\d+ lines?\): \S")  # "TODO 3 (about 2 lines): which keys may query i see?"
FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.S)
SUMMARY = re.compile(r"<summary>(.*?)</summary>", re.S)
SHORTEST_LEAK = 12  # characters of code without spaces: `m_i = m_new` is a word, `acc = acc / l_i[:, None]` a line
# Figures of a datasheet, not measurements: prose may state them.
DATASHEET = {"4.8 TB/s": "H200 HBM3e bandwidth", "990 TFLOP/s": "H100/H200 dense fp16 tensor cores",
             "67 TFLOP/s": "H100/H200 fp32 without tensor cores"}
MEASURED = re.compile(r"\d[\d.,]*\s?(?:TB/s|GB/s|TFLOP/s|µs|ms)\b|\d+\.\d+(?:[–-]\d+\.\d+)?\s?(?:×|倍)")


def code_of(text):
    """The code of `text` without comments and whitespace, one string per non-empty line."""
    text = textwrap.dedent(text)
    kept = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        comments = {(t.start[0], t.start[1]) for t in tokens if t.type == tokenize.COMMENT}
    except (tokenize.TokenError, IndentationError, SyntaxError):
        comments = set()
    for number, line in enumerate(text.split("\n"), 1):
        cut = [col for row, col in comments if row == number]
        line = line[:min(cut)] if cut else line
        squeezed = re.sub(r"\s+", "", line)
        if squeezed:
            kept.append(squeezed)
    return kept


def solutions_by_todo(lesson):
    """{n: code lines of TODO n's solution region} and the cell index of each, from the source notebook."""
    regions, cells = {}, {}
    for index, cell in enumerate(notebook.read(source_path(lesson)).cells):
        if cell.cell_type != "code":
            continue
        lines, number = cell.source.split("\n"), None
        for i, line in enumerate(lines):
            todo = TODO_LINE.match(line)
            if todo:
                number = int(todo.group(1))
            if "### BEGIN SOLUTION" in line:
                end = next(j for j in range(i, len(lines)) if "### END SOLUTION" in lines[j])
                regions.setdefault(number, []).extend(code_of("\n".join(lines[i + 1:end])))
                cells[number] = index
    return regions, cells


def given_code(lesson):
    """Every code line of the source outside solution regions: the code a learner is given."""
    given = set()
    for cell in notebook.read(source_path(lesson)).cells:
        if cell.cell_type == "code":
            text = re.sub(r"(?ms)^[ \t]*### BEGIN (SOLUTION|HIDDEN TESTS)\n.*?^[ \t]*### END \1", "", cell.source)
            given.update(code_of(text))
    return given


def folds(markdown):
    """[(start, end)] of the outermost <details> blocks of a markdown text."""
    blocks, depth, start = [], 0, 0
    for tag in re.finditer(r"<(/?)details>", markdown):
        if not tag.group(1):
            depth, start = depth + 1, tag.start() if depth == 0 else start
        elif depth:
            depth -= 1
            if depth == 0:
                blocks.append((start, tag.end()))
    return blocks


def folded_hints(cells):
    """{n: (cell index, idea text, code lines)} of the folded hints of a notebook."""
    found = {}
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        for start, end in folds(cell.source):
            block = cell.source[start:end]
            summary = SUMMARY.search(block)
            todo = re.search(r"TODO (\d+)", summary.group(1)) if summary else None
            if not todo:
                continue
            inner = block[summary.end():]
            nested = inner.find("<details>")
            idea = inner[:nested] if nested >= 0 else ""
            code = [line for fence in FENCE.findall(inner[nested:]) for line in code_of(fence)] if nested >= 0 else []
            found.setdefault(int(todo.group(1)), []).append((index, idea, code))
    return found


def outside_folds(cells):
    """[(cell index, text)]: prose outside folded hints, and the comments of code cells."""
    texts = []
    for index, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            text, cut = cell.source, 0
            for start, end in folds(text):
                texts.append((index, text[cut:start]))
                cut = end
            texts.append((index, text[cut:]))
        else:
            texts.append((index, "\n".join(line.split("#", 1)[1] for line in cell.source.split("\n") if "#" in line)))
    return texts


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_todo_names_its_idea_and_size(lesson):
    """`# TODO 3 (about 2 lines): which keys may query i see?` in the source (the editions translate the words)."""
    bad = [line.strip() for cell in notebook.read(source_path(lesson)).cells if cell.cell_type == "code"
           for line in cell.source.split("\n") if TODO_LINE.match(line) and not SIZE.match(TODO_LINE.match(line).group(2))]
    assert not bad, f"a TODO line should read `# TODO n (about k lines): the idea`: {bad[:3]}"


@pytest.mark.parametrize("language", EDITIONS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_every_todo_has_a_folded_hint_under_its_cell_with_the_solution(lesson, language):
    regions, cells_of = solutions_by_todo(lesson)
    cells = notebook.read(release_path(lesson, language)).cells
    hints = folded_hints(cells)
    code_cells = [i for i, c in enumerate(cells) if c.cell_type == "code"]
    for number, solution in sorted(regions.items()):
        assert number in hints, f"{lesson} ({language}): TODO {number} has no folded hint (<details>, summary 'TODO {number}')"
        assert len(hints[number]) == 1, f"{lesson} ({language}): TODO {number} has {len(hints[number])} folded hints"
        index, idea, code = hints[number][0]
        # the release drops solution-notes cells: find the TODO's cell in the release itself
        cells_of[number] = next(i for i in code_cells if re.search(rf"#\s*TODO {number}\b", cells[i].source))
        following = [i for i in code_cells if i > cells_of[number]]
        assert cells_of[number] < index < (following[0] if following else len(cells)), \
            f"{lesson} ({language}): the hint of TODO {number} is not under the cell of TODO {number}"
        assert len(re.sub(r"\s+", "", idea)) > 20, \
            f"{lesson} ({language}): the hint of TODO {number} should give the idea (equations, shapes) before the code"
        assert code == solution, f"{lesson} ({language}): the code in the hint of TODO {number} is not its solution:\n" \
                                 f"hint:     {code}\nsolution: {solution}"
    extra = set(hints) - set(regions)
    assert not extra, f"{lesson} ({language}): folded hints for TODOs that do not exist: {sorted(extra)}"


@pytest.mark.parametrize("language", EDITIONS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_no_solution_line_outside_a_folded_hint(lesson, language):
    regions, _ = solutions_by_todo(lesson)
    given = given_code(lesson)
    lines = {line for code in regions.values() for line in code if len(line) >= SHORTEST_LEAK and line not in given}
    leaks = []
    for index, text in outside_folds(notebook.read(release_path(lesson, language)).cells):
        squeezed = re.sub(r"\s+|`", "", text)
        leaks += [f"cell {index}: {line}" for line in sorted(lines) if line in squeezed]
    assert not leaks, f"{lesson} ({language}): solution lines given outside a folded hint: {leaks[:5]}"


@pytest.mark.parametrize("language", EDITIONS)
@pytest.mark.parametrize("lesson", LESSONS)
def test_prose_quotes_no_measured_speed(lesson, language):
    """Measured times, bandwidths and speed-ups are outputs of the executed solutions (naming the GPU and versions) or
    rows of benchmarks/*.json, never words that outlive the code that measured them."""
    found = []
    for index, cell in enumerate(notebook.read(release_path(lesson, language)).cells):
        if cell.cell_type == "markdown":
            found += [f"cell {index}: {m.group(0)}" for m in MEASURED.finditer(cell.source) if m.group(0) not in DATASHEET]
    assert not found, f"{lesson} ({language}): measured figures in prose: {found[:6]}"

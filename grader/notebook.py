"""Reading notebooks: the roles of cells, the program a worker runs, and filled-in submissions.

Cell roles come from nbgrader's metadata and our tags:
  - test cells (nbgrader grade, not solution): the graded checks; never part of the student's program;
  - locked cells (set-up, check helpers): ours; the grader uses the source notebook's copy, as nbgrader does;
  - cells tagged `demo`, `check` or `install`: plots, benchmarks, visible checks, pip; never run by the grader;
  - every other code cell (the TODO cells and any cell a student adds): only its definitions are run
    (imports, functions, classes, constant assignments), so a stray top-level call can't hang grading.
"""
import ast
import json
import re
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
SKIPPED_TAGS = {"demo", "install", "check"}


def read(path):
    return nbformat.read(str(path), as_version=4)


def write(nb, path):
    """Write with stable formatting, so that a rebuild of unchanged sources changes no byte."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    Path(path).write_text(text, encoding="utf-8")


def nbgrader_meta(cell):
    return cell.get("metadata", {}).get("nbgrader", {})


def tags(cell):
    return set(cell.get("metadata", {}).get("tags", []))


def grade_id(cell):
    return nbgrader_meta(cell).get("grade_id")


def is_test(cell):
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def is_solution(cell):
    return bool(nbgrader_meta(cell).get("solution"))


def is_locked(cell):
    return bool(nbgrader_meta(cell).get("locked")) and not is_test(cell)


def strip_solution_delimiters(text):
    return "\n".join(line for line in text.split("\n") if BEGIN not in line and END not in line)


def without_magics(text):
    # IPython magics (%timeit, !pip) are not Python; the grader never needs them.
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in text.split("\n"))


_ALLOWED_CALL_ROOTS = {"triton", "tl", "math", "torch"}


def _call_root(call):
    node = call.func
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_definition(node):
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        # constants and light expressions (tl.constexpr(64), torch.float16); no arbitrary calls
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
        return all(_call_root(c) in _ALLOWED_CALL_ROOTS for c in calls)
    if isinstance(node, ast.Try):
        return all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in node.body)
    return False


def definitions_only(code):
    """The top-level definitions of `code`, each at its original line; raises SyntaxError as Python does."""
    tree = ast.parse(code)
    lines = code.split("\n")
    kept = [""] * len(lines)
    for node in tree.body:
        if _is_definition(node):
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            for i in range(start - 1, node.end_lineno):
                kept[i] = lines[i]
    return "\n".join(kept)


def student_program(nb, source_nb=None):
    """(program_text, problems): the Python a worker runs for this submission, one block per cell.

    Lines keep their cell-relative positions after a '# cell N' header so messages can point at cells.
    """
    source_cells = {grade_id(c): c for c in (source_nb.cells if source_nb else []) if grade_id(c)}
    blocks, problems = [], []
    for number, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code" or is_test(cell) or tags(cell) & SKIPPED_TAGS:
            continue
        trusted = source_cells.get(grade_id(cell)) if is_locked(cell) else None
        code = without_magics((trusted or cell).source)
        if trusted is None:
            try:
                code = definitions_only(code)
            except SyntaxError as error:
                which = f"the `{grade_id(cell)}` cell" if is_solution(cell) and grade_id(cell) else \
                    f"cell {number} (counting from the top, markdown cells included)"
                problems.append(f"{which} has a SyntaxError at its line {error.lineno}: {error.msg}; "
                                "nothing in that cell could be graded")
                continue
        # the graded name, where the cell has one, is how messages name it: Jupyter shows no cell numbers
        name = f"`{grade_id(cell)}` " if is_solution(cell) and grade_id(cell) else ""
        header = f"# ── cell {number}" + (", locked " if trusted is not None else " ") + name
        blocks.append(header + "─" * 40 + "\n" + code)
    return "\n\n".join(blocks) + "\n", problems


def student_code(program):
    """The program with the course's locked cells blanked out (same line numbers): what the learner wrote."""
    lines, locked = program.split("\n"), False
    for i, line in enumerate(lines):
        if line.startswith("# ── cell "):
            locked = line.startswith("# ── cell ") and ", locked " in line
        elif locked:
            lines[i] = ""
    return "\n".join(lines)


def filled(release_nb, source_nb):
    """The release notebook with every solution cell replaced by the reference solution."""
    source_cells = {grade_id(c): c for c in source_nb.cells if grade_id(c)}
    nb = nbformat.from_dict(json.loads(json.dumps(release_nb)))
    for cell in nb.cells:
        if is_solution(cell) and grade_id(cell) in source_cells:
            cell.source = strip_solution_delimiters(source_cells[grade_id(cell)].source)
    return nb


def reference_program(source_nb):
    """The program of the reference solution, straight from the source notebook."""
    nb = nbformat.from_dict(json.loads(json.dumps(source_nb)))
    for cell in nb.cells:
        cell.source = strip_solution_delimiters(cell.source)
    return student_program(nb, source_nb)[0]


def import_reference(lesson_id, source_path):
    """The reference solution of a lesson, imported as a module from a real file (Triton reads kernel source
    from files). The mode comes from FA_MODE / TRITON_INTERPRET, which the caller sets first."""
    import importlib.util
    import os
    import tempfile
    path = Path(tempfile.gettempdir()) / f"reference_{lesson_id}_{os.getpid()}.py"
    path.write_text(reference_program(read(source_path)), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"reference_{lesson_id}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def function_sources(program):
    """{name: source} of every top-level function in a program (for TODO and structure checks)."""
    from .structure import parse
    try:
        tree = parse(program)
    except SyntaxError:
        return {}
    return {node.name: ast.get_source_segment(program, node) or ""
            for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


_TODO_HEADER = re.compile(r"#\s*TODO\s+\d+")


def todo_count(text):
    return len(_TODO_HEADER.findall(text))

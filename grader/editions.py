"""Editions of the course in other languages, made from the same source notebooks (COURSE_SPEC §2, issue 14).

An edition swaps the words and keeps the code. Its translations live in `grader/translations/LANG/NN_name.json`:
    {"markdown": [{"en": "<a prose cell>", "zh": "<its translation>"}, …],
     "code":     [{"en": "<a comment block or a string literal, as written>", "zh": "<the same in LANG>"}, …]}
A prose cell is translated whole. In code cells, comment blocks (consecutive `#` lines at one indentation: a TODO
and its hint, a graded check's heading) and string literals (a check's title, a printed sentence) are translated
as written, quotes and `{…}` fields included; everything else stays byte for byte. `translate` makes the edition of
a source notebook and lists what has no translation; `same_code` says whether two cells differ only in comments and
string literals. tests/test_editions.py holds every edition to both.

What must be translated (`required`): every prose cell, every comment block that holds a TODO or a graded check's
heading, and the title of every visible check (`check("…", …)`). Everything else is translated where the catalog
has it: a catalog may hold more, never less.
"""
import ast
import json
import re
from pathlib import Path

import nbformat

from . import notebook

TRANSLATIONS = Path(__file__).resolve().parent / "translations"
LANGUAGES = {"zh": "中文"}
# The build's own words in each edition (grader/build.py writes them into the solutions notebooks).
SOLUTIONS_NOTE = {"zh": "> **参考答案笔记本。** 停止标记（🛑）之上是学生拿到的练习原样：其中的检查会显示学员动手之前看到的内容（哪个 TODO "
                        "还没有完成）。标记之下是参考实现，以及它的说明、检查、图和计时，都是这个笔记本完整运行一遍时的输出（开头的"
                        "横幅写着是在哪台机器上运行的）。"}
STOP = {"zh": "---\n# 🛑 STOP HERE 🛑（到此为止）\n\n上面是学生拿到的练习原样。下面是参考实现：每个 TODO 单元格的代码、解释它的说明，"
              "以及针对它运行的检查和图。请先自己完成练习。"}
SETUP_TAIL = "MODE, DEVICE = course_setup()"
CJK = re.compile(r"[\u4e00-\u9fff]")


def catalog_path(language, lesson_id):
    return TRANSLATIONS / language / f"{lesson_id}.json"


def load_catalog(language, lesson_id):
    """{"markdown": {en: translation}, "code": {en: translation}}; empty when the lesson has no catalog yet."""
    path = catalog_path(language, lesson_id)
    if not path.exists():
        return {"markdown": {}, "code": {}}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {kind: {item["en"]: item[language] for item in data.get(kind, []) if item.get(language)}
            for kind in ("markdown", "code")}


def language_of(nb):
    """The language a notebook is written in: its `course_language` metadata, else Chinese when its prose is."""
    declared = nb.metadata.get("course_language")
    if declared in LANGUAGES or declared == "en":
        return declared
    prose = "".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return "zh" if prose and len(CJK.findall(prose)) > 0.1 * len(prose.replace(" ", "")) else "en"


# ── what a code cell offers for translation ─────────────────────────────────────────────────────────────
def comment_blocks(code):
    """[(text, required)]: each run of whole-line comments at one indentation, joined with newlines, indentation
    removed (so a block reads the same wherever it stands); required when it holds a TODO or a check's heading.
    nbgrader's `### BEGIN …` markers are not comments to translate."""
    blocks, current, indent = [], [], None

    def finish():
        text = "\n".join(current)
        blocks.append((text, bool(re.match(r"#\s*(TODO\s+\d+|Graded check)", text))))

    for line in code.split("\n"):
        stripped = line.lstrip()
        this_indent = line[:len(line) - len(stripped)]
        is_comment = stripped.startswith("#") and not stripped.startswith("###")
        if is_comment and current and this_indent == indent:
            current.append(stripped)
            continue
        if current:
            finish()
        current, indent = ([stripped], this_indent) if is_comment else ([], None)
    if current:
        finish()
    return blocks


def inline_comments(code):
    """[(comment, False)]: comments after code on a line (`x = 0  # why`), each translated on its own."""
    import io
    import tokenize
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return [(t.string, False) for t in tokens
            if t.type == tokenize.COMMENT and t.line[:t.start[1]].strip() and re.search(r"[A-Za-z]{2,} [A-Za-z]", t.string)]


def setup_tail(language):
    """The last line of the set-up cell in an edition: it tells the checks which language to speak."""
    return SETUP_TAIL if language == "en" else f'MODE, DEVICE = course_setup(language="{language}")'


def string_literals(code):
    """[(literal as written, required)]: string literals that hold words (at least two letters and a space),
    docstrings included; a visible check's title (the first argument of `check(…)`) is required."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    titles = {id(node.args[0]) for node in ast.walk(tree) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Name) and node.func.id == "check" and node.args}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            text = ast.get_source_segment(code, node)
            words = "".join(v.value for v in node.values if isinstance(v, ast.Constant)) \
                if isinstance(node, ast.JoinedStr) else node.value
            if text and re.search(r"[A-Za-z]{2,}\W+[A-Za-z]{2,}", words):
                found.append((text, id(node) in titles))
    # f-strings nested in f-strings are reported once, as the outer literal
    return [(t, r) for t, r in found if not any(t != o and t in o for o, _ in found)]


def translatable(nb):
    """[(kind, English text, required)] of a source notebook, in order."""
    items = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            items.append(("markdown", cell.source, True))
        elif cell.cell_type == "code" and not notebook.tags(cell) & {"setup", "check-helpers"}:
            code = cell.source
            items += [("code", text, required) for text, required in comment_blocks(code)]
            items += [("code", text, required) for text, required in inline_comments(code)]
            items += [("code", text, required) for text, required in string_literals(code)]
    return items


# ── making an edition ───────────────────────────────────────────────────────────────────────────────────
def _translate_code(code, catalog):
    """The code with each comment block and string literal the catalog knows replaced; the rest unchanged."""
    out = code
    for text, _ in comment_blocks(code):
        if text in catalog:
            lines = text.split("\n")
            pattern = r"(?m)^([ \t]*)" + r"\n[ \t]*".join(re.escape(line) for line in lines) + r"$"
            out = re.sub(pattern, lambda m: "\n".join(m.group(1) + line for line in catalog[text].split("\n")), out)
    for text, _ in inline_comments(code):
        if text in catalog:  # only where it ends a line of code
            out = re.sub(r"(?m)(\S[^\n]*?)" + re.escape(text) + "$", lambda m: m.group(1) + catalog[text], out)
    for text, _ in sorted(string_literals(code), key=lambda item: -len(item[0])):
        if text in catalog:
            out = out.replace(text, catalog[text])
    return out


def translate(source_nb, lesson_id, language):
    """(edition notebook, [missing required English texts]) for one source notebook."""
    catalog = load_catalog(language, lesson_id)
    nb = nbformat.from_dict(json.loads(json.dumps(source_nb)))
    missing = [text for kind, text, required in translatable(source_nb) if required and text not in catalog[kind]]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = catalog["markdown"].get(cell.source, cell.source)
        elif "setup" in notebook.tags(cell):
            cell.source = cell.source.replace(SETUP_TAIL, setup_tail(language))
        elif cell.cell_type == "code" and "check-helpers" not in notebook.tags(cell):
            cell.source = _translate_code(cell.source, catalog["code"])
    nb.metadata["course_language"] = language
    return nb, missing


def stale_entries(source_nb, lesson_id, language):
    """Catalog entries whose English text no longer occurs in the source (kept by mistake after an edit)."""
    catalog = load_catalog(language, lesson_id)
    offered = {(kind, text) for kind, text, _ in translatable(source_nb)}
    return [text for kind in ("markdown", "code") for text in catalog[kind] if (kind, text) not in offered]


# ── the code of two editions is the same ────────────────────────────────────────────────────────────────
class _Words(ast.NodeTransformer):
    """Blanks the words of string literals (f-string fields stay): what may differ between editions."""

    def visit_Constant(self, node):
        return ast.Constant("") if isinstance(node.value, str) else node

    def visit_JoinedStr(self, node):
        return ast.JoinedStr([self.visit(v) for v in node.values if not isinstance(v, ast.Constant)])


def code_shape(code):
    """The code with comments gone and string literals blanked, as a string that two editions must share."""
    try:
        return ast.dump(_Words().visit(ast.parse(code)))
    except SyntaxError as error:
        return f"SyntaxError: {error}"


def same_code(a, b):
    return code_shape(notebook.without_magics(a)) == code_shape(notebook.without_magics(b))


def skeleton(source_nb, lesson_id, language):
    """The catalog with every entry the source offers, translations kept where they exist ("" where not), the ones
    that may stay English marked `"optional": true`: what a translator fills in (`python -m grader translations`)."""
    catalog = load_catalog(language, lesson_id)
    data = {"markdown": [], "code": []}
    seen = set()
    for kind, text, required in translatable(source_nb):
        if (kind, text) in seen:
            continue
        seen.add((kind, text))
        entry = {"en": text, language: catalog[kind].get(text, "")}
        if not required:
            entry["optional"] = True
        data[kind].append(entry)
    return data


def write_catalog(data, language, lesson_id):
    path = catalog_path(language, lesson_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path

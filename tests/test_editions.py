"""The Chinese edition (COURSE_SPEC §2, issue 14): made from the same sources, complete, and with the same code."""
import pytest

from grader import editions, notebook
from grader.__main__ import release_path
from grader.harness import ROOT, source_path
from tests.conftest import LESSONS

EDITIONS = [(language, lesson) for language in editions.LANGUAGES for lesson in LESSONS]


@pytest.mark.parametrize("language,lesson", EDITIONS)
def test_every_prose_cell_hint_and_check_title_is_translated(language, lesson):
    assert editions.catalog_path(language, lesson).exists(), f"run `python -m grader translations {lesson}` and fill it"
    _, missing = editions.translate(notebook.read(source_path(lesson)), lesson, language)
    assert not missing, f"{len(missing)} texts of {lesson} have no {language} translation, the first: {missing[0]!r}"
    stale = editions.stale_entries(notebook.read(source_path(lesson)), lesson, language)
    assert not stale, f"{len(stale)} entries of {editions.catalog_path(language, lesson)} translate text that is no " \
                      f"longer in the source (run `python -m grader translations {lesson}`): {stale[0][:100]!r}"


@pytest.mark.parametrize("language,lesson", EDITIONS)
def test_the_editions_share_cells_grade_ids_and_code(language, lesson):
    english, edition = (notebook.read(release_path(lesson, lang)).cells for lang in ("en", language))
    assert len(english) == len(edition)
    for a, b in zip(english, edition):
        assert a.cell_type == b.cell_type and notebook.grade_id(a) == notebook.grade_id(b)
        assert notebook.tags(a) == notebook.tags(b)
        if "setup" in notebook.tags(a):  # its one difference: the language the checks speak
            assert b.source == a.source.replace(editions.SETUP_TAIL, editions.setup_tail(language))
        elif a.cell_type == "code":
            assert editions.same_code(a.source, b.source), f"{lesson}: the code of cell {notebook.grade_id(a)} differs " \
                                                           f"beyond comments and words:\n{b.source[:500]}"
    solutions = [ROOT / "solutions" / f"{lesson}.ipynb", ROOT / "solutions" / language / f"{lesson}.ipynb"]
    english, edition = (notebook.read(path).cells for path in solutions)
    assert [c.cell_type for c in english] == [c.cell_type for c in edition]
    for a, b in zip(english, edition):
        if a.cell_type == "code" and "setup" not in notebook.tags(a):
            assert editions.same_code(a.source, b.source)


@pytest.mark.parametrize("language,lesson", EDITIONS)
def test_the_edition_reads_in_its_language(language, lesson):
    nb = notebook.read(release_path(lesson, language))
    assert nb.metadata.get("course_language") == language and editions.language_of(nb) == language
    prose = [c.source for c in nb.cells if c.cell_type == "markdown"]
    assert all(editions.CJK.search(p) for p in prose if len(p) > 40), "a prose cell of the edition has no Chinese"


def untranslated_messages(path):
    """[(line, text)] of the English sentences in a lesson's checks that have no Chinese twin: every string literal
    with words must be an argument of `ctx.t(english, chinese)`, a docstring, or part of the lesson's declaration
    (`Lesson(...)`, `@lesson.check(title, …, zh=…)`, whose titles the next test holds to)."""
    import ast
    import re
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exempt = set()
    for node in ast.walk(tree):
        inside = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "t":
            inside = node  # ctx.t(english, chinese)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Lesson":
            inside = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                exempt.update(id(n) for n in ast.walk(decorator))
            if ast.get_docstring(node) is not None:
                exempt.add(id(node.body[0].value))
        elif isinstance(node, ast.Module) and ast.get_docstring(node) is not None:
            exempt.add(id(node.body[0].value))
        if inside is not None:
            exempt.update(id(n) for n in ast.walk(inside))
    found = []
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.JoinedStr):
            words = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            exempt.update(id(v) for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            words = node.value
        else:
            continue
        if re.search(r"[A-Za-z]{2,} [A-Za-z]{2,}", words):
            found.append((node.lineno, words[:80]))
    return found


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_message_of_a_lesson_s_checks_speaks_chinese_too(lesson):
    from grader import lessons
    module = lessons.get(lesson)
    untitled = [c.id for c in module.checks if not c.zh]
    assert not untitled, f"checks of {lesson} without a Chinese title (@lesson.check(..., zh=...)): {untitled}"
    path = ROOT / "grader" / "lessons" / f"{lessons.LESSONS[lesson]}.py"
    found = untranslated_messages(path)
    assert not found, f"{path.name}: {len(found)} English messages without ctx.t(english, chinese), the first at " \
                      f"line {found[0][0]}: {found[0][1]!r}"

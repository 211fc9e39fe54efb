"""The feedback page that `nbgrader generate_feedback` writes is one an instructor can send
(grader/nbgrader_feedback.py): its contents list names every check with ✅/❌ and its score, the course's set-up and
check-helper cells are folded, the student's TODO cells and every graded message stay visible, and the header says
which mode graded it.

The same assertions are first run on nbgrader's default page of the same course, and must fail there."""
import re
from html.parser import HTMLParser
from pathlib import Path

from grader import classroom, lessons, notebook
from grader.__main__ import reference_notebook
from grader.harness import source_path
from grader.nbgrader_feedback import check_summary

LESSON = "00_setup"
CONFIG_LINES = ("from grader.nbgrader_feedback import configure as configure_feedback  # noqa: E402\n"
                "configure_feedback(c)\n")
FOLDED_TAGS = {"setup", "check-helpers"}


def squash(text):
    return " ".join(text.split())


class Page(HTMLParser):
    """The text of a feedback page, split into what a reader sees at once and what lies inside a <details>; the
    contents list's entries; the anchors."""
    SKIP = {"style", "script", "title"}
    VOID = {"br", "img", "hr", "meta", "link", "input", "wbr", "col", "area", "base", "source"}

    def __init__(self, html):
        super().__init__(convert_charrefs=True)
        self.visible, self.folded, self.toc, self.anchors, self.folds = [], [], [], set(), []
        self.stack, self.details_open, self.skip, self.toc_depth, self.li = [], 0, 0, None, None
        self.header = None  # the visible text before the notebook's cells
        self.feed(html)
        self.visible, self.folded = squash("".join(self.visible)), squash("".join(self.folded))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in self.VOID:
            return
        self.stack.append(tag)
        if tag in self.SKIP:
            self.skip += 1
        if tag == "details":
            self.details_open += 1
            self.folds.append("open" in attrs)
        if tag == "a" and attrs.get("name"):
            self.anchors.add(attrs["name"])
        if attrs.get("id") == "toc":
            self.toc_depth = len(self.stack)
        if attrs.get("id") == "notebook" and self.header is None:
            self.header = squash("".join(self.visible))
        if self.toc_depth and tag == "li":
            self.li = {"text": [], "href": None}
        if self.li is not None and tag == "a" and attrs.get("href"):
            self.li["href"] = attrs["href"]

    def handle_endtag(self, tag):
        if tag in self.VOID or tag not in self.stack:
            return
        while self.stack:
            top = self.stack.pop()
            if top in self.SKIP:
                self.skip -= 1
            if top == "details":
                self.details_open -= 1
            if top == "li" and self.li is not None:
                self.toc.append((self.li["href"], squash("".join(self.li["text"]))))
                self.li = None
            if self.toc_depth and len(self.stack) < self.toc_depth:
                self.toc_depth = None
            if top == tag:
                break

    def handle_data(self, data):
        if self.skip:
            return
        (self.folded if self.details_open else self.visible).append(data)
        if self.li is not None:
            self.li["text"].append(data)


def course_definitions(source):
    """The names of the functions the course's own set-up and check-helper cells define."""
    cells = [c for c in source.cells if c.cell_type == "code" and notebook.tags(c) & FOLDED_TAGS]
    assert len(cells) == 2, "lesson 00 has one set-up and one check-helpers cell"
    return sorted({name for c in cells for name in re.findall(r"^def (\w+)\(", c.source, re.M)})


def naming_problems(page, graded, titles):
    """What is wrong with the contents list: each check named, with ✅/❌ and its score."""
    problems = [f"a bare entry {text!r}" for _, text in page.toc if text.startswith("Test cell")]
    for cell in (c for c in graded.cells if notebook.is_test(c)):
        grade_id = notebook.grade_id(cell)
        check_id = grade_id.removeprefix("test_")
        points = notebook.nbgrader_meta(cell)["points"]
        printed = "".join("".join(o.get("text", "")) for o in cell.outputs if o.get("name") == "stdout")
        passed = "❌" not in printed
        score = points if passed else 0.0
        entries = [text for href, text in page.toc if href == f"#{grade_id}"]
        if not entries:
            problems.append(f"no entry for {grade_id}")
            continue
        expected = f"{'✅' if passed else '❌'} {titles[check_id]} (Score: {float(score)} / {float(points)})"
        if entries[0] != expected:
            problems.append(f"{grade_id}: {entries[0]!r}, not {expected!r}")
        if grade_id not in page.anchors:
            problems.append(f"no anchor {grade_id} for the entry to go to")
    return problems


def folding_problems(page, names):
    shown = [name for name in names if f"def {name}(" in page.visible]
    kept = [name for name in names if f"def {name}(" in page.folded]
    problems = [f"`def {name}(` is visible outside a <details>" for name in shown]
    if not kept:
        problems.append("the course's own cells are not on the page, folded, at all")
    if any(page.folds):
        problems.append("a fold is open")
    return problems


def mode_problems(page, mode):
    wanted = f"Graded in {mode} mode"
    return [] if page.header and wanted in page.header else [f"no {wanted!r} in the header"]


def content_problems(page, graded):
    """The student's TODO cells and each graded message must be fully visible."""
    problems = []
    for cell in graded.cells:
        if notebook.is_solution(cell) and cell.cell_type == "code" and squash(cell.source) not in page.visible:
            problems.append(f"the TODO cell {notebook.grade_id(cell)} is not fully visible")
        if notebook.is_test(cell):
            for output in cell.outputs:
                text = squash("".join(output.get("text", "")) or output.get("evalue", ""))
                if text and text not in page.visible:
                    problems.append(f"the message of {notebook.grade_id(cell)} is not visible: {text[:80]}")
    return problems


def all_problems(course, student, mode, language="en"):
    html = Path(course) / "feedback" / student / LESSON / f"{LESSON}.html"
    page = Page(html.read_text(encoding="utf-8"))
    graded = notebook.read(Path(course) / "autograded" / student / LESSON / f"{LESSON}.ipynb")
    titles = {c.id: c.title_in(language) for c in lessons.get(LESSON).checks}
    return {"naming": naming_problems(page, graded, titles),
            "folding": folding_problems(page, course_definitions(notebook.read(source_path(LESSON)))),
            "mode": mode_problems(page, mode),
            "content": content_problems(page, graded)}, page


def test_feedback_page_names_checks_folds_the_course_code_and_says_the_mode(tmp_path, mode):
    course = classroom.new_course(tmp_path / "course", [LESSON])
    config = course / "nbgrader_config.py"
    # nbgrader's own page first: the course's config without the feedback lines (should it already have them)
    plain = "".join(line for line in config.read_text().splitlines(keepends=True)
                    if "nbgrader_feedback" not in line and "configure_feedback(" not in line)
    config.write_text(plain)
    release = classroom.release(course, LESSON)
    classroom.submit(course, "alice", LESSON, notebook.filled(release, notebook.read(source_path(LESSON))))
    classroom.submit(course, "bob", LESSON, release)  # untouched: every check fails on an unfinished TODO
    classroom.submit(course, "chen", LESSON, reference_notebook(LESSON, "zh"))  # the Chinese edition
    classroom.autograde(course, LESSON, extra_env={"FA_GRADING_MODE": mode})
    classroom.feedback(course, LESSON)
    default, _ = all_problems(course, "bob", mode)
    for what in ("naming", "folding", "mode"):
        assert default[what], f"the {what} assertions pass on nbgrader's default page: they test nothing"
    assert not default["content"], default["content"]

    config.write_text(plain + "\n" + CONFIG_LINES)
    pages = classroom.feedback(course, LESSON)
    assert sorted(p.parts[-3] for p in pages) == ["alice", "bob", "chen"]
    for student, language in (("alice", "en"), ("bob", "en"), ("chen", "zh")):
        problems, page = all_problems(course, student, mode, language)
        assert problems == {"naming": [], "folding": [], "mode": [], "content": []}, (student, problems)
        marks = [text[0] for _, text in page.toc if text[:1] in "✅❌"]
        assert marks == (["❌"] * 6 if student == "bob" else ["✅"] * 6), (student, page.toc)
        assert "BEGIN HIDDEN TESTS" not in page.visible and "grader.hidden" not in page.visible, student
    _, chen = all_problems(course, "chen", mode, "zh")
    assert "设置单元格" in chen.visible and "评分模式" in chen.header


def test_a_check_is_named_by_its_output_else_its_comment_else_its_id():
    import nbformat
    cell = nbformat.v4.new_code_cell("# Graded check (2 points): rows of any length\n### BEGIN HIDDEN TESTS\n")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "test_softmax_ragged",
                                 "points": 2.0, "score": 0.0}
    assert check_summary(cell) == {"title": "rows of any length", "mark": "❌", "mode": None}
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="✅ softmax of rows [mode: gpu]: ok\n")]
    cell.metadata["nbgrader"]["score"] = 2.0
    assert check_summary(cell) == {"title": "softmax of rows", "mark": "✅", "mode": "gpu"}
    # a busy kernel sends one print in chunks: the chunks are one line
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=part)
                    for part in ("✅", " softmax of rows [mode: gpu]", ": ok\n")]
    assert check_summary(cell) == {"title": "softmax of rows", "mark": "✅", "mode": "gpu"}
    cell.outputs, cell.source = [], "### BEGIN HIDDEN TESTS\n"
    del cell.metadata["nbgrader"]["score"]
    assert check_summary(cell) == {"title": "softmax_ragged", "mark": "", "mode": None}


def test_configure_reaches_only_the_feedback_exporter():
    """The template settings sit under GenerateFeedback: the formgrader's HTMLExporter (template `formgrade`) and
    any other keep theirs. configure twice is configure once."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.converters.generate_feedback import GenerateFeedback
    from traitlets.config import Config
    from grader.nbgrader_feedback import CourseFeedback, configure
    c = configure(configure(Config()))
    assert "HTMLExporter" not in c
    assert HTMLExporter(config=c).template_file == "index.html.j2"  # nbconvert's default, not ours
    steps = c.GenerateFeedback.preprocessors
    assert steps[-1] is CourseFeedback and steps.count(CourseFeedback) == 1
    assert steps[:-1] == list(GenerateFeedback.class_traits()["preprocessors"].default())  # GetGrades first
    feedback = HTMLExporter(parent=GenerateFeedback(config=c), config=c)
    assert feedback.template_file == "course_feedback.html.j2" and feedback.template_name == "course_feedback"
    assert (Path(feedback.extra_template_basedirs[0]) / "course_feedback" / feedback.template_file).is_file()
    assert feedback.get_template_names() == ["course_feedback", "feedback", "classic", "base"]


def test_course_config_sets_up_the_feedback_page():
    """grader/nbgrader_config.py calls grader.nbgrader_feedback.configure (its two lines at the end)."""
    from traitlets.config import Config
    from grader.harness import ROOT
    from grader.nbgrader_feedback import CourseFeedback
    config = Config()
    path = ROOT / "grader" / "nbgrader_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: config, "__file__": str(path)})
    assert "preprocessors" in config.GenerateFeedback and CourseFeedback in config.GenerateFeedback.preprocessors, \
        "grader/nbgrader_config.py lacks: from grader.nbgrader_feedback import configure as configure_feedback; " \
        "configure_feedback(c)"

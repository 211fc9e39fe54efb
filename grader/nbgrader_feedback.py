"""The feedback page of `nbgrader generate_feedback`: one that an instructor can send to a student.

nbgrader's own page (its template `feedback`) names every graded cell "Test cell" in its contents list and shows the
course's long set-up and check-helper cells in full. This module keeps nbgrader's page and changes three things:

  - the contents list and the heading of each graded cell name the check (✅ or ❌, its title, its score);
  - the set-up, check-helper and install cells are folded into a closed <details> element;
  - the header says which mode (gpu / interpreter / structure) graded the notebook;
  - a graded cell shows its heading comment, not the hidden test's call into the grader.

How: `configure(c)` (called from nbgrader_config.py) appends the preprocessor `CourseFeedback` to nbgrader's own
feedback preprocessors (GetGrades first, so the scores are known), and points the HTMLExporter of GenerateFeedback
(only that one: the formgrader's keeps its own template) at the nbconvert template
grader/feedback_templates/course_feedback/, whose base template is nbgrader's `feedback`: its file
course_feedback.html.j2 extends nbgrader's index.html.j2 and overrides only the blocks that it changes. The
preprocessor does the reading (titles, marks, mode, labels in the notebook's language); the template only shows
what it found.
"""
import re
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from .nbgrader_plugins import HIDDEN_TESTS

# Not grader/feedback/: that is nbgrader's output folder (the pages it writes) when the course folder is grader/,
# git-ignored and removed by `make clean`.
TEMPLATES = Path(__file__).resolve().parent / "feedback_templates"
TEMPLATE_NAME = "course_feedback"  # TEMPLATES/course_feedback/: its conf.json names nbgrader's `feedback` as its base
TEMPLATE_FILE = "course_feedback.html.j2"  # extends nbgrader's feedback/index.html.j2 (so it cannot be index.html.j2)

FOLDED_TAGS = ("setup", "check-helpers", "install")  # the first one a cell has names its fold

WORDS = {
    "en": {
        "setup": "Set-up cell (the course's own code, not graded)",
        "check-helpers": "Check helpers (the course's own code, not graded)",
        "install": "Install cell (the course's own code, not graded)",
        "graded_in": "Graded in {mode} mode",
        "graded_in_note": "{graded_in} — {note}",
        "gpu": "your kernels were compiled and run on a CUDA GPU",
        "interpreter": "no GPU was used: your kernels ran in Triton's CPU interpreter",
        "structure": "your kernels could not run here: only the structure of your code was checked",
    },
    "zh": {
        "setup": "设置单元格（课程自带的代码，不计分） · Set-up cell",
        "check-helpers": "检查辅助函数单元格（课程自带的代码，不计分） · Check helpers",
        "install": "安装单元格（课程自带的代码，不计分） · Install cell",
        "graded_in": "评分模式：{mode}（Graded in {mode} mode）",
        "graded_in_note": "{graded_in}。{note}",
        "gpu": "你的 kernel 在 CUDA GPU 上编译并运行",
        "interpreter": "没有使用 GPU：你的 kernel 在 Triton 的 CPU 解释器里运行",
        "structure": "这里无法运行 kernel：只检查了你代码的结构",
    },
}

# The first line a graded cell prints (grader/hidden.py): "✅ <title> [mode: <mode>]: ok" or
# "❌ <title> [mode: <mode>]: <what is wrong>"
RESULT_LINE = re.compile(r"^\s*(✅|❌)\s*(.*?)\s*\[mode:\s*(\w+)\]")
MODE_TAG = re.compile(r"\[mode:\s*(\w+)\]")
# The comment that opens a graded cell: "# Graded check (2 points): <what it checks>"
# (the Chinese edition: "# 评分检查（2 分）：…")
CHECK_COMMENT = re.compile(r"^(?:Graded check|评分检查)\s*[(（][^)）]*[)）]\s*[:：]\s*")


def _words(language):
    return WORDS.get(language, WORDS["en"])


def _language(nb):
    try:
        from .editions import language_of
        return language_of(nb)
    except Exception:  # the page must come out even if the editions module cannot tell
        return nb.metadata.get("course_language", "en")


def _nbgrader(cell):
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _is_test(cell):
    meta = _nbgrader(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def _output_text(cell):
    parts, stream = [], None  # stream: the name of the stream that the last part came from
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            text = output.get("text", "")
            text = "".join(text) if isinstance(text, list) else text
            if output.get("name") == stream:  # one stream that the kernel sent in chunks: the chunks join up
                parts[-1] += text
            else:
                parts.append(text)
            stream = output.get("name")
            continue
        stream = None
        if output.get("output_type") == "error":
            parts.append(output.get("evalue", ""))
        elif output.get("output_type") in ("execute_result", "display_data"):
            text = output.get("data", {}).get("text/plain", "")
            parts.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(parts)


def _comment_title(source):
    """The name the cell's opening comment gives the check, without its "Graded check (n points):" prefix."""
    for line in source.split("\n"):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#") and not line.startswith("###"):
            return CHECK_COMMENT.sub("", line.lstrip("#").strip()) or None
        return None
    return None


def check_summary(cell):
    """{title, mark, mode} of one graded cell, from its output (else its comment, else its grade_id) and its score."""
    meta = _nbgrader(cell)
    grade_id = meta.get("grade_id") or ""
    text = _output_text(cell)
    first = next((line for line in text.split("\n") if line.strip()), "")
    found = RESULT_LINE.match(first)
    title = found.group(2).strip() if found and found.group(2).strip() else None
    title = title or _comment_title(cell.get("source", "")) or re.sub(r"^test_", "", grade_id) or grade_id
    mode = found.group(3) if found else next(iter(MODE_TAG.findall(text)), None)
    score, points = meta.get("score"), meta.get("points")
    if score is not None and points is not None:
        mark = "✅" if float(score) >= float(points) else "❌"
    else:  # not graded yet (needs a manual grade): say what the check printed
        mark = found.group(1) if found else ""
    return {"title": title, "mark": mark, "mode": mode}


class CourseFeedback(Preprocessor):
    """Runs after nbgrader's GetGrades: labels each graded cell with its check's title and ✅/❌, marks the course's
    own cells to fold, and puts the grading mode and the page's words into resources["course_feedback"]."""

    enabled = Bool(True, help="nbconvert runs a preprocessor only when it is enabled").tag(config=True)

    def preprocess(self, nb, resources):
        language = _language(nb)
        words = _words(language)
        modes = []
        for cell in nb.cells:
            meta = _nbgrader(cell)
            if _is_test(cell):
                summary = check_summary(cell)
                cell.metadata["course_feedback"] = summary
                # the page shows the check's heading comment, not the hidden test's call into the grader
                cell.source = HIDDEN_TESTS.sub("", cell.source).rstrip()
                if summary["mode"] and summary["mode"] not in modes:
                    modes.append(summary["mode"])
            elif cell.cell_type == "code" and not meta.get("solution") and not meta.get("grade"):
                tag = next((t for t in FOLDED_TAGS if t in cell.metadata.get("tags", [])), None)
                if tag:
                    cell.metadata["course_feedback"] = {"fold": words[tag]}
        graded_in = words["graded_in"].format(mode=", ".join(modes)) if modes else ""
        note = "; ".join(words[m] for m in modes if m in words)
        if graded_in and note:
            graded_in = words["graded_in_note"].format(graded_in=graded_in, note=note)
        resources["course_feedback"] = {"language": language, "modes": modes, "graded_in": graded_in}
        return nb, resources


def nbgrader_templates():
    """nbgrader's own template folders (feedback/ among them)."""
    import nbgrader
    return str(Path(nbgrader.__file__).resolve().parent / "server_extensions" / "formgrader" / "templates")


def configure(c):
    """Set up `nbgrader generate_feedback` in the nbgrader config `c` (see the module's docstring)."""
    from nbgrader.converters.generate_feedback import GenerateFeedback
    if "preprocessors" in c.GenerateFeedback:
        steps = list(c.GenerateFeedback.preprocessors)
    else:
        steps = list(GenerateFeedback.class_traits()["preprocessors"].default())
    if CourseFeedback not in steps:
        steps.append(CourseFeedback)
    c.GenerateFeedback.preprocessors = steps
    # The exporter's settings go in the section GenerateFeedback.HTMLExporter: traitlets applies them only to the
    # HTMLExporter that GenerateFeedback makes (its parent), and they win over nbgrader's own HTMLExporter settings.
    # A plain c.HTMLExporter would also reach the formgrader's exporter (its template `formgrade`). nbgrader names
    # its own template folders only when these are unset, so ours come with nbgrader's: ours first, then nbgrader's
    # (its feedback/ holds index.html.j2, which extends nbconvert's classic). nbgrader still adds, at the top level,
    # the folder of its bootstrap.min.css (HTMLExporter.extra_template_paths), which the page inlines.
    exporter = c.GenerateFeedback.HTMLExporter
    exporter.template_name = TEMPLATE_NAME
    exporter.extra_template_basedirs = [str(TEMPLATES), nbgrader_templates()]
    exporter.template_file = TEMPLATE_FILE
    return c

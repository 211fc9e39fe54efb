"""Makes docs/feedback.png (and docs/feedback_zh.png): the nbgrader feedback page of one wrong submission.

    .venv/bin/python docs/feedback_screenshot.py [--lesson 03_per_query_kernel --mutant missing_rescale]

Releases the lesson with real nbgrader in a scratch course, submits a realistic wrong submission from
tests/mutants/ (in the English and the Chinese edition), autogrades it, runs `nbgrader generate_feedback`, and
photographs the first failing checks with headless Chromium (apt: chromium, fonts-noto-color-emoji for ✅ ❌,
fonts-noto-cjk for Chinese).
"""
import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader import classroom, editions, notebook  # noqa: E402
from tests import mutants  # noqa: E402


def browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    sys.exit("needs a headless Chromium: apt-get install chromium fonts-noto-color-emoji fonts-noto-cjk")


def first_failure_anchor(html):
    """The id of the first failing graded cell, from the page's table of contents (nbgrader links each test cell)."""
    found = re.search(r'<a href="#([^"]+)">[^<]*</a> \(Score: 0\.0 /', html.read_text(encoding="utf-8"))
    return found.group(1) if found else ""


# Headless Chromium paints from the top of the page, so instead of scrolling, the copy that is photographed drops the
# notebook cells above the first failing check: the page's score summary, then that check and the ones after it.
KEEP_FROM = """<script>
const anchor = document.querySelector('a[name="ANCHOR"]');
const first = anchor && anchor.closest("div.cell");
for (let cell = first && first.previousElementSibling; cell; ) {
  const before = cell.previousElementSibling;
  if (cell.classList.contains("cell")) cell.remove();
  cell = before;
}
</script></body>"""


def shoot(html, png, width=1000, height=1100):
    anchor = first_failure_anchor(html)
    shown = html.with_name("screenshot.html")
    shown.write_text(html.read_text(encoding="utf-8").replace("</body>", KEEP_FROM.replace("ANCHOR", anchor)),
                     encoding="utf-8")
    subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--virtual-time-budget=3000", f"--window-size={width},{height}", f"--screenshot={png}",
                    shown.resolve().as_uri()], check=True, capture_output=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lesson", default="03_per_query_kernel")
    parser.add_argument("--mutant", default="missing_rescale")
    parser.add_argument("--languages", nargs="+", default=["en", "zh"])
    args = parser.parse_args()
    mutant = next(m for m in mutants.load(args.lesson) if m.name == args.mutant)
    for language, png in (("en", ROOT / "docs" / "feedback.png"), ("zh", ROOT / "docs" / "feedback_zh.png")):
        if language not in args.languages or (language != "en" and
                                              not editions.catalog_path(language, args.lesson).exists()):
            continue
        course = Path(tempfile.mkdtemp(prefix="feedback-")) / "course"
        classroom.new_course(course, [args.lesson], language=language)
        wrong = mutants.write(args.lesson, mutant, course / "wrong.ipynb")
        nb = notebook.read(wrong)
        if language != "en":
            nb = editions.translate(nb, args.lesson, language)[0]
        classroom.submit(course, "student", args.lesson, nb)
        classroom.autograde(course, args.lesson)
        pages = classroom.feedback(course, args.lesson)
        shoot(pages[0], png)
        print(f"{png}: {pages[0]}")


if __name__ == "__main__":
    main()

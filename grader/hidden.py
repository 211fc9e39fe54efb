"""Entry point of the hidden test cells: `grade(LESSON, CHECK)` inside `nbgrader autograde`.

The check runs in its own process against the notebook file on disk (the submission), never against
the objects in this kernel, so what a submission did to this kernel (patched torch, a crashed CUDA
context) cannot change its grade. A failure raises AssertionError with the check's message, which
nbgrader shows in the feedback; either way the message names the grading mode.
"""
import os
import textwrap
from pathlib import Path

from . import notebook_setup
from .harness import run_lesson


def _mode():
    requested = os.environ.get("FA_GRADING_MODE", "auto")
    return notebook_setup.detect_mode(requested)[0]


def grade(lesson_id, check_id, notebook_path=None):
    path = Path(notebook_path or f"{lesson_id}.ipynb")
    if not path.exists():
        raise AssertionError(f"cannot find the submission {path.resolve()} to grade")
    report = run_lesson(lesson_id, path, _mode(), only={check_id})
    result = report.tests[0]
    # wrapped, so the feedback page shows the whole message without scrolling
    text = "\n   ".join(textwrap.fill(part, 110, subsequent_indent="   ") for part in result.message.split("\n"))
    if not result.passed:
        print("❌", text)
        raise AssertionError(f"check {check_id} failed: see the message above")
    print("✅", text)

"""Entry point of the hidden test cells: `grade(LESSON, CHECK)` inside `nbgrader autograde`.

The check runs in its own process against the notebook file on disk (the submission), never against
the objects in this kernel, so what a submission did to this kernel (patched torch, a crashed CUDA
context) cannot change its grade. The first graded cell grades every check of the lesson (a check that cannot
run in this mode counts only when the others pass: harness.unrunnable_verdict); each cell then prints its own
result. A failure raises CheckFailed with the check's message and nothing else: the feedback page shows the
message, not a traceback through the grader's files.
"""
import hashlib
import os
import re
import sys
import textwrap
from pathlib import Path

from . import notebook_setup
from .harness import run_lesson
from .messages import text

_REPORTS = {}  # (lesson, notebook, its bytes, mode) -> Report: one grading per submission in this grading kernel


class CheckFailed(AssertionError):
    """A graded check that failed. IPython (and so nbgrader's feedback) shows `_render_traceback_` instead of
    a traceback: the message above says what is wrong and where in the learner's code."""

    def _render_traceback_(self):
        return [f"CheckFailed: {self}"]


def _mode():
    requested = os.environ.get("FA_GRADING_MODE", "auto")
    return notebook_setup.detect_mode(requested)[0]


def grade(lesson_id, check_id, notebook_path=None):
    path = Path(notebook_path or f"{lesson_id}.ipynb")
    if not path.exists():
        raise CheckFailed(f"cannot find the submission {path.resolve()} to grade")
    mode = _mode()
    key = (lesson_id, str(path.resolve()), hashlib.sha256(path.read_bytes()).hexdigest(), mode)
    if key not in _REPORTS:
        _REPORTS[key] = run_lesson(lesson_id, path, mode)
    result = next(t for t in _REPORTS[key].tests if t.id == check_id)
    # wrapped, so the feedback page shows the whole message without scrolling; but the first line keeps the whole
    # "<title> [mode: …]:", which the feedback page reads to name the check (grader/nbgrader_feedback.py)
    head = re.match(r"[^\n]*?\[mode: \w+\]:?", result.message)
    first_width = max(90, len(head.group(0)) + 2) if head else 90
    wrapped = "\n   ".join(textwrap.fill(part, first_width if i == 0 else 90, subsequent_indent="   ")
                           for i, part in enumerate(result.message.split("\n")))
    # one write per result: the kernel sends its stdout in chunks on a timer, and print("✅", wrapped) is four writes,
    # which a busy machine can split into stream outputs of their own (a "✅" alone, then the message)
    sys.stdout.write(f"{'✅' if result.passed else '❌'} {wrapped}\n")
    sys.stdout.flush()
    if not result.passed:
        raise CheckFailed(text("check_failed", _REPORTS[key].language, check=check_id, points=f"{result.max_points:g}"))

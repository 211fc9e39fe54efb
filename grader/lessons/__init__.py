"""The checks of each lesson, one module per lesson (COURSE_SPEC §3)."""
import importlib

LESSONS = {
    "00_setup": "lesson00_setup",
    "01_pytorch_attention": "lesson01_pytorch_attention",
}


def get(lesson_id):
    if lesson_id not in LESSONS:
        raise SystemExit(f"unknown lesson {lesson_id!r}; the lessons are: {', '.join(LESSONS)}")
    return importlib.import_module(f"{__name__}.{LESSONS[lesson_id]}").lesson

"""The checks of each lesson, one module per lesson (COURSE_SPEC §3)."""
import importlib

LESSONS = {
    "00_setup": "lesson00_setup",
    "01_pytorch_attention": "lesson01_pytorch_attention",
    "02_tiled_simulator": "lesson02_tiled_simulator",
    "03_per_query_kernel": "lesson03_per_query_kernel",
    "04_tiled_kernel_2d": "lesson04_tiled_kernel_2d",
    "05_flash_attention_v2": "lesson05_flash_attention_v2",
    "06_flash_decoding": "lesson06_flash_decoding",
}


def get(lesson_id):
    if lesson_id not in LESSONS:
        raise SystemExit(f"unknown lesson {lesson_id!r}; the lessons are: {', '.join(LESSONS)}")
    return importlib.import_module(f"{__name__}.{LESSONS[lesson_id]}").lesson

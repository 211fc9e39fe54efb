import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LESSONS = sorted(p.name for p in (ROOT / "grader" / "source").iterdir() if p.is_dir())


def timing_checks(lesson):
    """The checks that time kernels on a GPU (speed): judged alone on the GPU, never beside other tests."""
    from grader import lessons
    return {c.id for c in lessons.get(lesson).checks if c.id.startswith("speed")}


def pytest_addoption(parser):
    parser.addoption("--mode", default=os.environ.get("FA_TEST_MODE", "interpreter"),
                     help="grading mode for the lesson tests: interpreter (CPU, default) or gpu")
    parser.addoption("--part", default=None, metavar="I/N",
                     help="run only part I of N of the collected tests (every N-th, from the I-th): make test-gpu "
                          "runs the GPU suite in parts that each fit one session on a GPU machine")


@pytest.fixture(scope="session")
def mode(request):
    return request.config.getoption("--mode")


def part_of(spec):
    """(i, n) of a --part I/N, 0-based i."""
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--part takes I/N with 1 <= I <= N, e.g. 2/3; got {spec!r}")
    if not 1 <= index <= count:
        raise pytest.UsageError(f"--part {spec}: I must be between 1 and N")
    return index - 1, count


@pytest.hookimpl(tryfirst=True)  # before -m deselects: a part is the same set of tests whatever -m then keeps
def pytest_collection_modifyitems(config, items):
    gpu = config.getoption("--mode") == "gpu"
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="GPU-only: run `make test-gpu` on a machine with a GPU"))
    if config.getoption("--part"):
        # every N-th test of the collection (ordered by node id, so every run of a part gets the same tests; the
        # parametrised cases of a slow test spread over the parts instead of filling one)
        index, count = part_of(config.getoption("--part"))
        ordered = sorted(items, key=lambda item: item.nodeid)
        keep = {item.nodeid for i, item in enumerate(ordered) if i % count == index}
        deselected = [item for item in items if item.nodeid not in keep]
        items[:] = [item for item in items if item.nodeid in keep]
        config.hook.pytest_deselected(items=deselected)

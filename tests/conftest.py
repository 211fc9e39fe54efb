import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LESSONS = sorted(p.name for p in (ROOT / "grader" / "source").iterdir() if p.is_dir())


def pytest_addoption(parser):
    parser.addoption("--mode", default=os.environ.get("FA_TEST_MODE", "interpreter"),
                     help="grading mode for the lesson tests: interpreter (CPU, default) or gpu")


@pytest.fixture(scope="session")
def mode(request):
    return request.config.getoption("--mode")


def pytest_collection_modifyitems(config, items):
    gpu = config.getoption("--mode") == "gpu"
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="GPU-only: run `make test-gpu` on a machine with a GPU"))

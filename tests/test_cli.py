"""The command line of COURSE_SPEC §6 is a contract that checks outside this repo use: keep its output exact."""
import json
import subprocess
import sys

from grader.__main__ import release_path
from grader.harness import ROOT


def grader(*args, stderr=False):
    done = subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return (done.stdout, done.stderr) if stderr else done.stdout


def test_check_json_has_exactly_the_specified_keys(mode):
    report = json.loads(grader("check", "00_setup", str(release_path("00_setup")), "--mode", mode, "--json"))
    assert set(report) == {"lesson", "mode", "score", "max_score", "tests"}
    assert report["lesson"] == "00_setup" and report["mode"] == mode and report["score"] == 0
    for test in report["tests"]:
        assert set(test) == {"id", "points", "max_points", "passed", "message"}, test
        assert test["passed"] is False and "is not done" in test["message"]


def test_check_repeat_runs_each_check_with_fresh_seeds(tmp_path, mode):
    path = tmp_path / "filled.ipynb"
    grader("fill", "00_setup", "--out", str(path))
    out, progress = grader("check", "00_setup", str(path), "--mode", mode, "--only", "softmax_ragged",
                           "--repeat", "3", stderr=True)
    assert "✅ softmax_ragged" in out and "3 runs, fresh seeds" in out, out
    # a long --repeat shows progress, on stderr (stdout stays the report)
    assert [line.split(":")[1].strip() for line in progress.splitlines() if "softmax_ragged: run" in line] == \
        [f"run {i} of 3 done, 0 failed" for i in (1, 2, 3)], progress

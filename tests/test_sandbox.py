"""Containment (COURSE_SPEC §5, issues "A submission must not reach the answers" and "The judge must never run what
a submission returns"): a worker runs hostile code here directly, without the judge's static guard in front, so
these tests show what the operating-system boundary and the plain-data channel hold on their own."""
import hashlib
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from grader import sandbox, wire
from grader.harness import ROOT, source_path
from grader.processes import Worker, Zygote

HOSTILE = textwrap.dedent('''
    import os, socket, sys, pathlib, subprocess

    def read(path):
        try:
            with open(path, "rb") as f:
                return "read %d bytes" % len(f.read())
        except Exception as error:
            return type(error).__name__

    def listing(path):
        try:
            return sorted(os.listdir(path))
        except Exception as error:
            return type(error).__name__

    def write(path):
        try:
            pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w") as f:
                f.write("written by a submission")
            return "wrote"
        except Exception as error:
            return type(error).__name__

    def find(name):
        """Every path under / whose name contains `name` (what a submission that walks the disk finds)."""
        found = []
        for top, dirs, files in os.walk("/"):
            dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
            found += [os.path.join(top, f) for f in files + dirs if name in f]
        return found

    def import_grader():
        try:
            import grader.lessons.lesson03_per_query_kernel
            return "imported"
        except Exception as error:
            return type(error).__name__

    def network():
        try:
            s = socket.create_connection(("1.1.1.1", 53), timeout=3)
            return "connected"
        except Exception as error:
            return type(error).__name__

    def processes():
        return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())

    def environment():
        return sorted(os.environ)

    class Payload:
        """If the judge unpickled this, it would write the marker file (in the judge's process)."""
        def __init__(self, marker):
            self.marker = marker
        def __reduce__(self):
            return (pathlib.Path.write_text, (pathlib.Path(self.marker), "the judge ran a submission's payload"))

    class Sneaky(type(__import__("torch").zeros(1))):
        pass

    def payloads(marker):
        import torch
        return [Payload(marker), {"$tensor": 1}, torch.zeros(2).as_subclass(Sneaky), [[[[0]]]] * 3, "ok"]

    def deep():
        x = []
        for _ in range(10000):
            x = [x]
        return x
''')


@pytest.fixture(scope="module", params=["new process", "forked"])
def worker(tmp_path_factory, mode, request):
    """A worker as the judge starts it: a new process, or forked by a zygote in the same sandbox."""
    contained, why = sandbox.status()
    assert contained, f"the sandbox must work on this machine (CI installs bubblewrap): {why}"
    folder = tmp_path_factory.mktemp("hostile")
    course = tmp_path_factory.mktemp("course")  # an nbgrader course: gradebook and other students' submissions
    (course / "gradebook.db").write_text("grades")
    (course / "submitted" / "bob").mkdir(parents=True)
    (course / "submitted" / "bob" / "notebook.ipynb").write_text("bob's answers")
    zygote = (Zygote(mode, HOSTILE, folder / "scratch", folder / "logs", hidden=(course,))
              if request.param == "forked" else None)
    w = Worker(mode, HOSTILE, folder / "scratch", folder / "logs", hidden=(course,), zygote=zygote)  # gpu: with the GPU
    assert type(w.process).__name__ == ("Forked" if zygote else "Popen")
    assert "ok" in w.request("load", {"key": "student", "path": w.program_path}, timeout=60)
    yield w, course
    w.close()
    if zygote:
        zygote.close()


def call(worker, name, *args):
    reply = worker.request("call", {"name": name, "args": list(args), "kwargs": {}, "backward": None}, timeout=120)
    assert "ok" in reply, reply
    return reply["ok"][0]


def digest(paths):
    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


ANSWERS = [source_path("03_per_query_kernel"), ROOT / "solutions" / "03_per_query_kernel.ipynb",
           ROOT / "grader" / "lessons" / "lesson03_per_query_kernel.py", ROOT / "grader" / "harness.py"]


@pytest.mark.parametrize("path", ANSWERS, ids=lambda p: p.name)
def test_the_answers_cannot_be_read(worker, path):
    assert Path(path).exists()
    assert call(worker[0], "read", str(path)) in ("FileNotFoundError", "PermissionError")


def test_the_course_gradebook_and_other_submissions_cannot_be_read(worker):
    w, course = worker
    for path in (course / "gradebook.db", course / "submitted" / "bob" / "notebook.ipynb"):
        assert call(w, "read", str(path)) == "FileNotFoundError"


def installed_libraries():
    """Where Python finds installed distributions: site-packages, and a `pip install --target` folder on PYTHONPATH
    (the GPU machine's /tmp/site). What is there is public: nbgrader ships test files named gradebook.db."""
    return [str(Path(p).resolve()) for p in sys.path if p and Path(p).is_dir() and Path(p).resolve() != ROOT
            and any(Path(p).glob("*.dist-info"))]


def test_walking_the_disk_finds_no_course_file(worker):
    public = ("site-packages", "dist-packages", *installed_libraries())
    for name in ("03_per_query_kernel", "gradebook.db", "lesson03", "nbgrader_config.py", "flash_attention_v2", "notebook_checks"):
        found = [p for p in call(worker[0], "find", name) if not any(d in p for d in public)]
        assert found == [], (name, found)
    assert call(worker[0], "listing", str(ROOT)) in ([], ["grader"], "FileNotFoundError") or \
        set(call(worker[0], "listing", str(ROOT))) <= {".venv"}


def test_the_grader_cannot_be_imported(worker):
    assert call(worker[0], "import_grader") == "ModuleNotFoundError"


def test_nothing_outside_the_scratch_folder_can_be_written(worker, tmp_path):
    w, course = worker
    before = digest(ANSWERS + [course / "gradebook.db", course / "submitted" / "bob" / "notebook.ipynb"])
    other_submission = tmp_path / "grade-other" / "submission" / "home" / ".triton" / "cache"  # its compiled kernels
    other_submission.mkdir(parents=True)
    for target in [ROOT / "course" / "planted.py", course / "submitted" / "bob" / "notebook.ipynb",
                   course / "gradebook.db", tmp_path / "planted", Path.home() / "planted",
                   sandbox.reference_cache_dir() / "planted", other_submission / "planted"]:
        call(w, "write", str(target))
        assert not (target.exists() and target.read_text() == "written by a submission"), target
    assert digest(before) == before
    # what a later check of its own runs as trusted code: the worker's files and the program are read-only
    for inside in ("/sandbox/worker/worker.py", "/sandbox/worker/triton_cache.py", "/sandbox/submission.py"):
        assert call(w, "write", inside) in ("OSError", "PermissionError"), inside
    assert call(w, "write", "/sandbox/home/notes.txt") == "wrote"  # its own scratch home is writable
    assert call(w, "write", "/tmp/notes.txt") == "wrote"            # and a private /tmp


def test_no_network_no_other_processes_no_judge_environment(worker, monkeypatch):
    w, _ = worker
    assert call(w, "network") != "connected"
    assert len(call(w, "processes")) <= 3  # its own PID namespace: bwrap's init, python, nothing of the judge's
    names = call(w, "environment")
    assert "PYTHONPATH" in names and not any(n.startswith(("NBGRADER", "FA_GRADING", "PYTEST")) for n in names)


def test_the_worker_environment_keeps_the_judges_gpu_wait_choice_and_nothing_else_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("FA_CUDA_SYNC", "spin")
    monkeypatch.setenv("FA_ANSWERS_DIR", "/judge/answers")
    env = sandbox.environment("gpu", tmp_path)
    assert env["FA_CUDA_SYNC"] == "spin" and "FA_ANSWERS_DIR" not in env


def test_returned_objects_are_plain_data_and_never_run_in_the_judge(worker, tmp_path):
    marker = tmp_path / "marker"
    payload, fake, subclass, nested, text = call(worker[0], "payloads", str(marker))
    assert isinstance(payload, wire.Foreign) and "Payload" in payload.what
    assert fake == {"$tensor": 1}                      # a dict that looks like a tensor header stays a dict
    assert isinstance(subclass, wire.Foreign) and "subclass" in subclass.what
    assert nested == [[[[0]]]] * 3 and text == "ok"
    assert not marker.exists()


def test_a_too_deeply_nested_reply_is_refused_not_followed(worker):
    out, depth = call(worker[0], "deep"), 0
    while isinstance(out, list):
        out, depth = out[0], depth + 1
    assert depth <= wire.MAX_DEPTH and isinstance(out, wire.Foreign) and "nested" in out.what


@pytest.mark.parametrize("message", [
    b"", b"\x05\x00\x00\x00\x00\x00\x00\x00{}", wire.encode([1])[:-1],
    b"\x02\x00\x00\x00\x00\x00\x00\x00[]",
    b"\x2a\x00\x00\x00\x00\x00\x00\x00" + b'{"value": {"$pickle": "x"}, "blobs": [    ]}',
    wire.encode(torch.zeros(3)).replace(b'"float32"', b'"object" '),
    wire.encode(torch.zeros(3)).replace(b'"shape": [3]', b'"shape": [9]'),
])
def test_malformed_messages_are_refused(message):
    with pytest.raises(wire.WireError):
        wire.decode(message)


def test_views_travel_with_their_strides_and_shared_storage():
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    a, b = x[:, :3], x[:, 3:]
    got_a, got_b = wire.decode(wire.encode([a, b], keep_storage=True))
    assert got_a.stride() == (6, 1) and torch.equal(got_a, a) and torch.equal(got_b, b)
    assert got_a.untyped_storage().data_ptr() == got_b.untyped_storage().data_ptr()

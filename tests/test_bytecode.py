"""Python bytecode for an environment installed without it (grader/bytecode.py, issue 25): the judge compiles what a
zygote imports once; a worker reads it and can never write it; the repository's own modules never go where a sandbox
can read them. CI's environment has its bytecode, so FA_BYTECODE=1 turns the folders on here, as an environment
without bytecode (the H200 image) turns them on by itself."""
import importlib.util
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from grader import bytecode, notebook, sandbox
from grader.__main__ import reference_notebook
from grader.harness import ROOT, run_lesson
from grader.processes import Worker, Zygote

PROBE = textwrap.dedent('''
    import importlib.util, os, sys

    def bytecode_seen(source):
        return [sys.pycache_prefix, os.path.exists(importlib.util.cache_from_source(source))]

    def write(path):
        try:
            with open(path, "wb") as f:
                f.write(b"bytecode a submission wrote")
            return "wrote"
        except Exception as error:
            return type(error).__name__

    def exists(path):
        return os.path.exists(path)
''')


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bytecode")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FA_BYTECODE", "1")
        patch.setenv("FA_BYTECODE_CACHE", str(folder))
        bytecode.warm.cache_clear()
        began = time.monotonic()
        assert bytecode.warm("interpreter") is True
        yield folder, time.monotonic() - began
        bytecode.warm.cache_clear()


def in_folder(folder, source):
    """Where Python keeps the bytecode of `source` under the prefix `folder`."""
    previous, sys.pycache_prefix = sys.pycache_prefix, str(folder)
    try:
        return Path(importlib.util.cache_from_source(str(source)))
    finally:
        sys.pycache_prefix = previous


def test_the_judge_compiles_what_a_worker_imports_and_none_of_the_repository(cache):
    folder, _ = cache
    assert in_folder(folder / "sandbox", torch.__file__).exists()
    assert in_folder(folder / "sandbox", torch._dynamo.__file__ if hasattr(torch, "_dynamo") else
                     importlib.util.find_spec("torch._dynamo").origin).exists()
    environment = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix}]
    ours = [p for p in (folder / "sandbox").rglob("*.pyc")
            if str(Path("/", *p.relative_to(folder / "sandbox").parts)).startswith(str(ROOT))
            and not any(str(Path("/", *p.relative_to(folder / "sandbox").parts)).startswith(str(e)) for e in environment)]
    assert ours == [], ours[:5]  # the grader, its lessons' checks: never readable from a sandbox
    assert in_folder(folder / "judge", ROOT / "grader" / "harness.py").exists()  # the judge's own: in judge/


def test_a_second_warm_finds_the_stamp_and_returns_at_once(cache):
    bytecode.warm.cache_clear()
    began = time.monotonic()
    assert bytecode.warm("interpreter") is True
    assert time.monotonic() - began < 1.0


@pytest.mark.parametrize("how", ["new process", "forked"])
def test_a_worker_reads_the_bytecode_and_cannot_write_it(cache, tmp_path, how):
    folder, _ = cache
    contained, why = sandbox.status("interpreter")
    assert contained, f"the sandbox must work on this machine (CI installs bubblewrap): {why}"
    zygote = Zygote("interpreter", PROBE, tmp_path / "scratch", tmp_path / "logs") if how == "forked" else None
    worker = Worker("interpreter", PROBE, tmp_path / "scratch", tmp_path / "logs", zygote=zygote)
    try:
        assert "ok" in worker.request("load", {"key": "student", "path": worker.program_path}, timeout=60)

        def call(name, *args):
            reply = worker.request("call", {"name": name, "args": list(args), "kwargs": {}, "backward": None},
                                   timeout=60)
            assert "ok" in reply, reply
            return reply["ok"][0]

        assert call("bytecode_seen", torch.__file__) == [str(bytecode.INSIDE), True]
        planted = str(in_folder(bytecode.INSIDE, torch.__file__))
        assert call("write", planted) in ("OSError", "PermissionError")  # read-only: Errno 30
        assert call("write", str(bytecode.INSIDE / "planted.pyc")) in ("OSError", "PermissionError")
        assert not call("exists", str(folder / "judge")) and not call("exists", str(folder))
    finally:
        worker.close()
        if zygote:
            zygote.close()


def test_a_reference_graded_with_it_gets_full_marks(cache, tmp_path):
    path = tmp_path / "00_setup.ipynb"
    notebook.write(reference_notebook("00_setup"), path)
    report = run_lesson("00_setup", path, "interpreter")
    assert report.score == report.max_score, [t.message for t in report.tests if not t.passed]


def test_the_judge_starts_without_the_iri_grammar_and_still_validates_notebooks():
    """grader/__init__.py keeps jsonschema from building rfc3987-syntax's IRI grammar (1.3 s of a judge's start on the
    H200); nbformat still validates a notebook, and a broken one still fails."""
    import subprocess
    code = ("import sys, grader, nbformat; nb = nbformat.v4.new_notebook(); nbformat.validate(nb); "
            "nb.cells.append({'cell_type': 'code'})\n"
            "try:\n    nbformat.validate(nb); print('accepted')\nexcept nbformat.ValidationError:\n    print('refused')\n"
            "print(sys.modules.get('rfc3987_syntax', 'absent'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "None"]

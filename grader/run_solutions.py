"""`python -m grader run-solutions` (make solutions): run each solutions notebook top to bottom and commit its outputs.

Self-learners read solutions/NN_name.ipynb on GitHub without running it (COURSE_SPEC §1): the plots, timing tables
and check results must be there, and true to the code. Each notebook runs alone in an empty folder (as a learner's
would: nothing from this repository importable), in the mode this machine gives (a GPU when there is one); then its
outputs are written back with a record of the run in its metadata (`solution_run`: a fingerprint of its code cells,
the mode, the device, the versions, the date). `grader build` keeps the outputs only while the code's fingerprint
matches, and tests/test_build.py fails when a solution's outputs are missing or older than its code.
"""
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from . import build, editions, notebook, notebook_setup
from .harness import ROOT

MAX_BYTES = 4_000_000  # GitHub renders notebooks of a few MB quickly; larger ones time out


def describe_machine(mode):
    import torch
    device = torch.cuda.get_device_name() if mode == "gpu" else f"CPU ({platform.processor() or platform.machine()})"
    return {"mode": mode, "device": device, "torch": torch.__version__,
            "triton": notebook_setup.installed_version("triton"), "python": platform.python_version()}


class KernelDiedAtStart(RuntimeError):
    """The notebook's Jupyter kernel was gone before its first cell ran (seen once on the H200: zmq's "Socket
    operation on non-socket", then nbclient's `assert self.kc is not None`): nothing of the notebook was tried."""


def ran_any_cell(nb):
    return any(c.get("execution_count") is not None or c.get("outputs") for c in nb.cells if c.cell_type == "code")


def run_with_retry(path, timeout=1800, log=print):
    """`run`, once more if the kernel died before the first cell ran (and saying so)."""
    try:
        return run(path, timeout)
    except KernelDiedAtStart as error:
        log(f"  {path.name}: the Jupyter kernel died before the first cell ran ({error}); trying once more")
        return run(path, timeout)


def failed_checks(nb):
    """The visible checks below the stop marker (the reference's) that did not print ✅: each one's first line."""
    stop = next((i for i, c in enumerate(nb.cells) if "STOP HERE" in c.source), len(nb.cells))
    found = []
    for cell in nb.cells[stop:]:
        if "check" in notebook.tags(cell) and any(line.startswith("check(") for line in cell.source.split("\n")):
            text = "".join(o.get("text", "") for o in cell.get("outputs", []))
            if "✅" not in text or "❌" in text:
                found.append(text.strip().split("\n")[0][:300] or "(no output)")
    return found


def run(path, timeout=1800):
    """Execute one solutions notebook in an empty folder; returns the executed notebook (raises on a cell error)."""
    from nbclient import NotebookClient
    nb = notebook.read(path)
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(path, folder)
        env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "FA_MODE", "FA_QUIET")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                            if p and Path(p).resolve() != ROOT)
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)  # the kernel inherits this process's environment
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": folder}}).execute()
        except Exception as error:
            if not ran_any_cell(nb):
                raise KernelDiedAtStart(f"{type(error).__name__}: {str(error)[-300:]}") from error
            raise
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return nb


def record(nb, machine, seconds):
    """The executed notebook in its committed form: outputs kept, run recorded, nothing else that changes per run."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.pop("id", None)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["solution_run"] = dict(machine, code_sha256=build.code_fingerprint(nb), seconds=round(seconds),
                                       date=datetime.now(timezone.utc).strftime("%Y-%m-%d"))
    nb.nbformat, nb.nbformat_minor = 4, 4
    return nb


def main(lessons=None, out_dir=None, timeout=1800, languages=None):
    """Run the solutions of `lessons` (default: all) in the editions `languages` (default: every one); exits non-zero
    when a notebook fails (a cell raised, or a visible check of the reference did not pass), keeping its old copy."""
    mode, reason = notebook_setup.detect_mode(os.environ.get("FA_GRADING_MODE", "auto"))
    machine = describe_machine(mode)
    print(f"running solutions in {mode} mode on {machine['device']} ({reason})", flush=True)
    failed = []
    languages = languages or ("en",) + tuple(editions.LANGUAGES)
    paths = [ROOT / "solutions" / f"{lesson}.ipynb" for lesson in lessons or build.lesson_ids()]
    paths = [p for p in paths if "en" in languages] + \
        [p.parent / language / p.name for language in editions.LANGUAGES if language in languages for p in paths
         if (p.parent / language / p.name).exists()]  # the editions too (grader/editions.py)
    for path in paths:
        lesson = path.relative_to(ROOT / "solutions").with_suffix("").as_posix()
        started = time.time()
        try:
            nb = run_with_retry(path, timeout, log=lambda text: print(text, flush=True))
            problems = failed_checks(nb)
            if problems:
                raise RuntimeError("a visible check of the reference solution did not pass: " + "; ".join(problems))
        except Exception as error:  # a cell raised or timed out: keep the committed notebook as it was
            failed.append(lesson)
            print(f"  {lesson}: FAILED after {time.time() - started:.0f} s: {str(error)[-1500:]}", flush=True)
            continue
        nb = record(nb, machine, time.time() - started)
        target = Path(out_dir) / path.relative_to(ROOT / "solutions") if out_dir else path
        notebook.write(nb, target)
        size = target.stat().st_size
        print(f"  {lesson}: {time.time() - started:.0f} s, {size / 1e6:.1f} MB -> {target}"
              + ("  (over the size GitHub renders quickly)" if size > MAX_BYTES else ""), flush=True)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")

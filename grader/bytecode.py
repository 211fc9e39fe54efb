"""Python bytecode for grading, where the Python environment was installed without it.

An environment without bytecode (a container image built with PYTHONDONTWRITEBYTECODE or `pip --no-compile`, as the
course's H200 image is) makes every new Python compile torch, torch._dynamo, sympy and Triton from their sources:
on the H200 a zygote spent 10 s of its start on that, and every judge, nbgrader and grading kernel seconds more.
Python can keep bytecode outside the packages (PYTHONPYCACHEPREFIX), and the course keeps it in two folders under
FA_BYTECODE_CACHE (else ~/.cache/flash-attention-course/bytecode):

  sandbox/  the environment's modules that a worker imports (torch, Triton, numpy, ...): bound read-only into every
            sandbox, written only by `warm` (a process of the judge's that runs no student code), and never the
            repository's own modules (grader/lessons/ stays unreadable to a submission, as its sources are)
  judge/    what the judge's own processes import (the grader, nbformat, nbgrader, the grading kernel); never shown
            to a sandbox

So a submission can read the bytecode its worker runs, never write it: no check loads bytecode that a submission
wrote. Python checks each file against its source's time and size, and compiles anew where they differ.

FA_BYTECODE=auto (default: used when torch's own bytecode is missing), 1 (always), 0 (never).
"""
import fcntl
import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSIDE = Path("/bytecode")  # where a worker sees the sandbox folder


@functools.lru_cache(maxsize=None)
def _environment_has_bytecode():
    """Whether torch was installed with its bytecode (then nothing here is needed)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return True
    origin = Path(spec.origin)
    return (origin.parent / "__pycache__" / f"{origin.stem}.{sys.implementation.cache_tag}.pyc").exists()


def in_use():
    setting = os.environ.get("FA_BYTECODE", "auto")
    if setting not in ("auto", "1", "0"):
        raise ValueError(f"FA_BYTECODE={setting!r}: use auto, 1 or 0")
    return setting == "1" or (setting == "auto" and not _environment_has_bytecode())


def cache_dir():
    from .sandbox import course_cache_dir  # (sandbox imports this module at its top)
    folder = os.environ.get("FA_BYTECODE_CACHE") or course_cache_dir() / "bytecode"
    return Path(folder).resolve()


def sandbox_dir():
    return cache_dir() / "sandbox"


def judge_dir():
    return cache_dir() / "judge"


def use():
    """In a judge's process (grader/__init__.py): read and keep its bytecode in judge/, and so do the processes it
    starts (nbgrader, its grading kernels: the variable passes on)."""
    if in_use() and not os.environ.get("PYTHONPYCACHEPREFIX"):
        judge_dir().mkdir(parents=True, exist_ok=True)
        sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"] = str(judge_dir())


# Run by `warm` in a new Python (PYTHONPYCACHEPREFIX=judge/): import what a zygote imports (worker.prepare_imports)
# and what the judge's processes import, then compile every imported module: the environment's into sandbox/, all
# of them into judge/. Compiled explicitly (py_compile), because an environment without bytecode often forbids
# writing it (PYTHONDONTWRITEBYTECODE).
_WARM = r"""
import importlib, importlib.util, os, py_compile, sys
mode, grader_dir, root, sandbox_dir = sys.argv[1:5]
sys.path.insert(0, grader_dir)
import worker
worker.prepare_imports(mode)
for name in ("grader.harness", "grader.hidden", "grader.classroom", "nbgrader.apps", "ipykernel.kernelapp"):
    try:
        importlib.import_module(name)
    except Exception:
        pass
judge_prefix = sys.pycache_prefix
environment = [os.path.realpath(p) + os.sep for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py") or not os.path.isfile(path):
        continue
    real = os.path.realpath(path)  # `path` as imported: the sandbox imports it by the same name
    # the repository's own modules (grader/, its lessons' checks) never go where a sandbox can read them; a virtual
    # environment inside the repository is the environment's
    ours = real.startswith(root + os.sep) and not any(real.startswith(p) for p in environment)
    for prefix in ([judge_prefix] if ours else [judge_prefix, sandbox_dir]):
        sys.pycache_prefix = prefix
        target = importlib.util.cache_from_source(path)
        if not os.path.exists(target):
            py_compile.compile(path, cfile=target, quiet=2)
"""


@functools.lru_cache(maxsize=None)
def warm(mode):
    """Fill the bytecode folders for grading in `mode` ("interpreter" or "gpu"), once per environment: later runs find
    a stamp (named after Python, torch and Triton's versions) and return at once; shards that start together wait for
    the one that compiles. Never initialises CUDA. Returns whether bytecode is in use."""
    if not in_use():
        return False
    from importlib import metadata
    versions = []
    for package in ("torch", "triton"):
        try:
            versions.append(metadata.version(package))
        except metadata.PackageNotFoundError:
            versions.append("none")
    mode = "gpu" if mode == "gpu" else "interpreter"
    folder = cache_dir()
    for d in (sandbox_dir(), judge_dir()):
        d.mkdir(parents=True, exist_ok=True)
    stamp = folder / f"warm-{sys.implementation.cache_tag}-{'-'.join(versions)}-{mode}.done"
    with open(folder / "warm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            import tempfile
            with tempfile.TemporaryDirectory() as triton_cache:
                env = dict(os.environ, PYTHONPYCACHEPREFIX=str(judge_dir()), TRITON_CACHE_DIR=triton_cache,
                           PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "")
                                                                      .split(os.pathsep) if p]))
                env.pop("TRITON_INTERPRET", None)
                done = subprocess.run([sys.executable, "-c", _WARM, mode, str(ROOT / "grader"), str(ROOT),
                                       str(sandbox_dir())], env=env, cwd=ROOT, capture_output=True, text=True,
                                      timeout=600)
            if done.returncode == 0:
                stamp.write_text("")
            else:  # grading goes on as before (sources compiled in each process), only slower
                print(f"grader: could not prepare Python bytecode in {folder}: {done.stderr.strip()[-500:]}",
                      file=sys.stderr)
    return True

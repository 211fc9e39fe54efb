"""The operating-system boundary around student code (COURSE_SPEC §5, grader/README.md "What a submission can do").

Every worker (grader/worker.py) runs inside bubblewrap (`bwrap`): its own user, mount, PID, network and IPC
namespaces, no capabilities, no network, a fresh /tmp, and a filesystem view that holds only
  - the system's programs and libraries (/usr, /bin, /lib*, /etc) and the Python environment (its prefixes and
    the folders on sys.path), read-only; this repository is not in it, but for its virtual environment;
  - /sandbox: the submission's program and the two worker files (read-only) and a scratch home (writable);
  - /dev (minimal, plus the NVIDIA device nodes on a GPU machine), /proc of its own, /sys read-only.
So the process that runs a submission cannot read the source notebooks, solutions/, grader/lessons/, the gradebook
or other submissions, and cannot write anywhere but its scratch home and /tmp. bwrap needs no root: it uses
unprivileged user namespaces (on by default in current Linux distributions).

FA_SANDBOX=auto (default) uses bwrap when it works here and otherwise grades uncontained, saying so in every
check's message; FA_SANDBOX=require refuses to grade without it (CI); FA_SANDBOX=off never uses it.
FA_BWRAP names the bwrap binary (default: the one on PATH).
"""
import functools
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import bytecode

ROOT = Path(__file__).resolve().parent.parent
WORKER_FILES = [Path(__file__).resolve().parent / name for name in ("worker.py", "wire.py", "triton_cache.py")]
INSIDE = Path("/sandbox")                        # where the scratch folder appears inside the sandbox
REFERENCE_CACHE_INSIDE = Path("/reference-cache")  # where a reference worker sees the reference solutions' cache
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
PASSED_ENV = ("LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "LANG", "LC_ALL", "TZ",
              "FA_CUDA_SYNC")  # the judge's choice of how GPU workers wait (worker._blocking_sync)
PASSED_PREFIXES = ("CUDA_", "NVIDIA_", "TRITON_", "PYTORCH_", "TORCH_")
class Unavailable(RuntimeError):
    pass


def _bwrap():
    return os.environ.get("FA_BWRAP") or shutil.which("bwrap")


@functools.lru_cache(maxsize=None)
def _probe(bwrap):
    """None when bwrap can make a sandbox here, else why not."""
    if not bwrap:
        return "bubblewrap (bwrap) is not installed (Debian/Ubuntu: `apt-get install bubblewrap`)"
    try:
        done = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap could not run ({error})"
    if done.returncode != 0:
        return (f"bwrap cannot make a sandbox here ({done.stderr.strip()[:300]}); unprivileged user namespaces "
                "may be switched off (sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces)")
    return None


@functools.lru_cache(maxsize=None)
def _gpu_probe(bwrap):
    """None when a process in the sandbox can use the GPU (its device nodes bound), else why not. On a machine where
    it cannot (a device layout this sandbox does not know), GPU grading must not fail every check: status() then
    grades uncontained, and says so. The probe (a sandboxed Python that imports torch and makes a CUDA context: seconds)
    runs once per boot, driver and environment: a success is remembered in the judge's cache (_gpu_probe_stamp)."""
    stamp = _gpu_probe_stamp(bwrap)
    if stamp is not None and stamp.exists():
        return None
    with tempfile.TemporaryDirectory() as folder:
        argv = [sys.executable, "-c", "import torch; torch.zeros(1, device='cuda').add_(1); torch.cuda.synchronize()"]
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", **{k: v for k, v in os.environ.items()
                                                          if k in PASSED_ENV or k.startswith(PASSED_PREFIXES)}}
        env.update({k: v for k, v in environment("gpu", "/tmp").items() if k in ("PYTHONPATH", "PYTHONPYCACHEPREFIX")})
        try:
            done = subprocess.run(command(argv, folder, env, gpu=True), capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"the GPU cannot be used inside bwrap here ({error})"
    if done.returncode != 0:
        return f"the GPU cannot be used inside bwrap here ({done.stderr.strip().splitlines()[-1:] or done.returncode})"
    if stamp is not None:
        try:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text("the GPU worked inside bwrap\n")
        except OSError:
            pass
    return None


def _gpu_probe_stamp(bwrap):
    """The file that says the GPU probe passed, named after what its answer depends on: this boot, the NVIDIA driver,
    the device nodes, bwrap and the Python environment. Written by the judge only (no sandbox shows this folder);
    None where the boot or the driver cannot be read (the probe then runs every time)."""
    import hashlib
    try:
        facts = [Path("/proc/sys/kernel/random/boot_id").read_text(), Path("/proc/driver/nvidia/version").read_text()]
    except OSError:
        return None
    facts += sorted(glob.glob("/dev/nvidia*")) + [str(bwrap), sys.executable, sys.prefix]
    key = hashlib.sha256("\n".join(facts).encode()).hexdigest()[:24]
    return course_cache_dir() / f"gpu-sandbox-ok-{key}"


def status(mode=None):
    """(contained, why): whether workers of this grading `mode` run in the sandbox, and if not, why."""
    setting = os.environ.get("FA_SANDBOX", "auto")
    if setting not in ("auto", "require", "off"):
        raise Unavailable(f"FA_SANDBOX={setting!r}: use auto, require or off")
    if setting == "off":
        return False, "FA_SANDBOX=off"
    problem = _probe(_bwrap())
    if problem is None and mode == "gpu":
        problem = _gpu_probe(_bwrap())
    if problem and setting == "require":
        raise Unavailable(f"FA_SANDBOX=require, but {problem}")
    return problem is None, problem or "bubblewrap"


def course_cache_dir():
    """The judge's cache folder (~/.cache/flash-attention-course, under XDG_CACHE_HOME where that is set)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flash-attention-course"


def reference_cache_dir():
    """The Triton cache of the reference solutions' workers (FA_REFERENCE_CACHE, else ~/.cache/flash-attention-course/
    reference-triton): kept between grading runs, so a class compiles the reference's kernels once. Only reference
    workers, which never run student code, see it (read and write); a worker that runs student code never does, not
    even where it lies inside a folder that sandbox shows (command() hides it), since it holds the reference's
    kernels compiled."""
    folder = os.environ.get("FA_REFERENCE_CACHE") or course_cache_dir() / "reference-triton"
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def warning(language="en", mode=None):
    """The sentence every check's message carries when grading is not contained (None when it is)."""
    from .messages import text
    contained, why = status(mode)
    return None if contained else text("not_contained", language, why=why)


def _python_dirs():
    """The folders the Python interpreter and its packages live in (existing ones, outermost first)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    dirs.update(p for p in sys.path if p)
    dirs.update(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    dirs.update(p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p)
    found = set()
    for d in dirs:
        path = Path(d).resolve()
        if path.is_file():  # a zip on sys.path
            path = path.parent
        if not path.is_dir() or path == Path("/"):
            continue
        if path == ROOT or (ROOT in path.parents and not _inside_prefix(path)):
            continue  # the repository itself (on sys.path so the judge can import grader) stays out
        found.add(path)
    # the interpreter binary may be a link out of the prefix (a venv): bind where it really lives
    found.add(Path(os.path.realpath(sys.executable)).parent.parent)
    return sorted(found, key=lambda p: len(p.parts))


def _inside_prefix(path):
    return any(Path(p).resolve() in (path, *path.parents) for p in (sys.prefix, sys.exec_prefix))


def command(argv, scratch, env, gpu, hidden=(), reference_cache=None):
    """The bwrap command line that runs `argv` (paths inside the sandbox) in a sandbox whose /sandbox is the folder
    `scratch`; `env` is the whole environment inside. The repository, the reference solutions' Triton cache and the
    folders in `hidden` (the course being graded, the submission's folder) never show, even when they lie inside a
    folder the sandbox needs; `reference_cache` (a reference worker's only) is bound writable at
    REFERENCE_CACHE_INSIDE."""
    args = [_bwrap(), "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--dev", "/dev", "--proc", "/proc", "--ro-bind-try", "/sys", "/sys", "--tmpfs", "/tmp"]
    if gpu:
        for node in sorted(glob.glob("/dev/nvidia*")):
            args += ["--dev-bind", node, node]
    bound = []
    for d in SYSTEM_DIRS:
        if os.path.lexists(d):
            args += ["--ro-bind", d, d] if not os.path.islink(d) else ["--symlink", os.readlink(d), d]
            bound.append(Path(d))
    python_dirs = _python_dirs()  # outermost first; /tmp is an empty tmpfs by now, so a venv under /tmp works too
    for d in python_dirs:
        if not any(b == d or b in d.parents for b in bound):
            args += ["--ro-bind", str(d), str(d)]
            bound.append(d)
    # A secret folder that shows through a folder bound above (a repository under /usr or under a Python prefix, a
    # course folder beside a virtual environment) is hidden under an empty tmpfs; then the Python folders inside it
    # are bound again.
    masked = []
    for secret in sorted({Path(p).resolve() for p in (ROOT, reference_cache_dir(), *hidden)}, key=lambda p: len(p.parts)):
        if secret == Path("/") or any(secret == Path(d) or secret in Path(d).parents for d in SYSTEM_DIRS):
            continue
        if any(m == secret or m in secret.parents for m in masked):
            continue
        if any(b == secret or b in secret.parents or secret in b.parents for b in bound):
            args += ["--tmpfs", str(secret)]
            masked.append(secret)
    for d in python_dirs:
        if any(m == d or m in d.parents for m in masked):
            args += ["--ro-bind", str(d), str(d)]
    args += ["--bind", str(scratch), str(INSIDE), "--chdir", str(INSIDE)]
    if bytecode.in_use():  # the environment's bytecode, which only the judge writes (grader/bytecode.py)
        bytecode.sandbox_dir().mkdir(parents=True, exist_ok=True)
        args += ["--ro-bind", str(bytecode.sandbox_dir()), str(bytecode.INSIDE)]
    if reference_cache is not None:
        args += ["--bind", str(reference_cache), str(REFERENCE_CACHE_INSIDE)]
    for name in ("submission.py", "worker"):  # read-only inside: the worker's code, the program it runs
        if (Path(scratch) / name).exists():
            args += ["--ro-bind", str(Path(scratch) / name), str(INSIDE / name)]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args + ["--"] + list(argv)


def prepare(scratch, program_text):
    """Lay out a scratch folder: the program, the worker's two files, a writable home. Returns the worker's argv
    and the program's path, both as seen from inside (or from outside, when not contained)."""
    scratch = Path(scratch)
    (scratch / "worker").mkdir(parents=True, exist_ok=True)
    (scratch / "home").mkdir(exist_ok=True)
    for path in WORKER_FILES:
        shutil.copy(path, scratch / "worker" / path.name)
    (scratch / "submission.py").write_text(program_text, encoding="utf-8")


def environment(mode, home, reference_cache=None, contained=True):
    """The worker's whole environment: a short allow-list of the judge's, and the grading mode's variables. Triton's
    cache is the scratch home's, managed by triton_cache.SubmissionCache; a reference worker's is `reference_cache`
    (its path as the worker sees it), where autotuning results are kept too. Python reads the environment's bytecode
    from grader/bytecode.py's folder where the environment has none (read-only in the sandbox: command())."""
    env = {k: v for k, v in os.environ.items() if k in PASSED_ENV or k.startswith(PASSED_PREFIXES)}
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                  if p and Path(p).resolve() != ROOT and ROOT not in Path(p).resolve().parents]
    env.update({"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
                "HOME": str(home), "TMPDIR": "/tmp", "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1",
                "TRITON_CACHE_DIR": str(Path(home) / ".triton" / "cache"),
                "TRITON_CACHE_MANAGER": "triton_cache:SubmissionCache",
                "FA_QUIET": "1", "PYTHONPATH": os.pathsep.join(pythonpath)})
    if bytecode.in_use():
        env["PYTHONPYCACHEPREFIX"] = str(bytecode.INSIDE if contained else bytecode.sandbox_dir())
    if reference_cache is not None:
        env.update(TRITON_CACHE_DIR=str(reference_cache), TRITON_CACHE_AUTOTUNING="1")
        env.pop("TRITON_CACHE_MANAGER")
    for key, value in mode_variables(mode).items():
        env.pop(key, None)
        if value is not None:
            env[key] = value
    return env


def mode_variables(mode):
    """The variables that make a worker one of `mode` (None: unset); a worker forked by a zygote of another mode sets
    them itself, before it loads the program (worker.zygote)."""
    return {"FA_MODE": "structure" if mode == "compile" else mode,
            # read when a kernel is defined: set before any kernel in the student's program is
            "TRITON_INTERPRET": "1" if mode == "interpreter" else None}

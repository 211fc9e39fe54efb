# Course set-up: installs what is missing, picks the mode, prints the banner.
# This file is the single source of every notebook's set-up cell (`make build` copies it in),
# and the grader imports it too, so the notebooks and the grader always agree on the mode.
import importlib.metadata
import importlib.util
import os
import subprocess
import sys

SUPPORTED_TRITON = ((3, 0), (3, 6))  # tested on 3.6; 3.9 removed block pointers (we don't use them)
MODES = ("gpu", "interpreter", "structure")


def _version(text):
    return tuple(int(p) for p in text.split("+")[0].split(".")[:2] if p.isdigit())


def installed_version(package):
    """Version of an installed package without importing it (importing Triton before TRITON_INTERPRET is
    set makes its built-in @jit helpers, tl.max among them, unusable in the interpreter)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def install_missing():
    """Colab/ModelScope bring torch; install Triton and the plotting/progress helpers if absent."""
    wanted = {"triton": "triton", "matplotlib": "matplotlib", "tqdm": "tqdm"}
    missing = [pkg for mod, pkg in wanted.items() if importlib.util.find_spec(mod) is None]
    if importlib.util.find_spec("torch") is None:
        raise RuntimeError(
            "PyTorch is not installed. On a laptop without a GPU run `pip install torch==2.13.0` "
            "(the CPU build) and restart the kernel; Colab and ModelScope already have it.")
    if missing:
        print("Installing", ", ".join(missing), "…")
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *missing])


def usable_gpu():
    """(True, description) when Triton can compile for the local GPU, else (False, reason)."""
    import torch
    if not torch.cuda.is_available():
        return False, "no CUDA GPU is visible to PyTorch"
    name = torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (7, 5):
        return False, f"{name} is sm_{major}{minor}; Triton needs sm_75 or newer"
    return True, f"{name} (sm_{major}{minor})"


def interpreter_problem():
    """None when Triton's CPU interpreter can run here, else what stops it and how to fix it."""
    triton_version = installed_version("triton")
    if triton_version is None:
        return "Triton is not installed: run `pip install triton==3.6.0`"
    numpy_version = installed_version("numpy") or "0"
    if _version(numpy_version) >= (2, 4) and _version(triton_version) <= (3, 6):
        return (f"numpy {numpy_version} breaks the interpreter of Triton {triton_version} "
                "(range() over a kernel argument fails): run `pip install 'numpy<2.4'` and restart the kernel")
    return None


def detect_mode(requested="auto"):
    """Pick gpu / interpreter / structure; returns (mode, reason). Call before defining any kernel."""
    if requested not in ("auto",) + MODES:
        raise ValueError(f"unknown mode {requested!r}: use auto, gpu, interpreter or structure")
    if requested == "structure":
        return "structure", "structure checks were asked for"
    gpu_ok, gpu_why = usable_gpu()
    if requested == "gpu" and not gpu_ok:
        raise RuntimeError(f"GPU mode was asked for, but {gpu_why}")
    if gpu_ok and requested in ("auto", "gpu"):
        return "gpu", gpu_why
    problem = interpreter_problem()
    if problem:
        if requested == "interpreter":
            raise RuntimeError(f"interpreter mode was asked for, but {problem}")
        return "structure", problem
    return "interpreter", f"{gpu_why}: kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1)"


def version_warnings(mode):
    import torch
    notes = []
    triton_version = installed_version("triton")
    if triton_version:
        if not SUPPORTED_TRITON[0] <= _version(triton_version) <= SUPPORTED_TRITON[1]:
            notes.append(f"Triton {triton_version} is untested here (the course is tested on 3.6); "
                         "if a kernel fails to compile, try `pip install triton==3.6.0`.")
    if mode == "gpu":
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) < (8, 0):
            notes.append(f"This GPU is sm_{major}{minor}. Triton officially supports sm_80+: it has no bf16 "
                         "tensor cores and 64 KB of shared memory, so the lessons use fp16 and small blocks "
                         "here, and bf16 checks are skipped.")
    return notes


def course_setup():
    """Run once at the top of a notebook: returns (MODE, DEVICE)."""
    quiet = os.environ.get("FA_QUIET") == "1"  # set by the grader's worker processes
    if not quiet and os.environ.get("NBGRADER_EXECUTION") is None:
        install_missing()
    mode, reason = detect_mode(os.environ.get("FA_MODE", "auto"))
    if mode == "interpreter":
        # Must be set before `import triton`: Triton's own @jit helpers (tl.max, tl.sum, …) are made at import.
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("Triton was imported before the mode was chosen, so its interpreter cannot work: "
                               "restart the kernel and run this cell first")
        os.environ["TRITON_INTERPRET"] = "1"
    if not quiet:
        import torch
        versions = f"torch {torch.__version__}"
        if installed_version("triton"):
            versions += f", triton {installed_version('triton')}"
        print(f"══ MODE: {mode.upper()} ══  {reason}\n   {versions}, python {sys.version.split()[0]}")
        for note in version_warnings(mode):
            print("   ⚠", note)
        if mode == "structure":
            print("   Kernels cannot run here; only the structure of your code can be checked.")
    return mode, ("cuda" if mode == "gpu" else "cpu")

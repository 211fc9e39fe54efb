# Course set-up: installs what is missing, picks the mode, prints the banner.
# This file is the single source of every notebook's set-up cell (`make build` copies it in),
# and the grader imports it too, so the notebooks and the grader always agree on the mode.
import importlib.util
import os
import subprocess
import sys

SUPPORTED_TRITON = ((3, 0), (3, 6))  # tested on 3.6; 3.9 removed block pointers (we don't use them)
MODES = ("gpu", "interpreter", "structure")


def _version(text):
    return tuple(int(p) for p in text.split("+")[0].split(".")[:2] if p.isdigit())


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
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed: run `pip install triton==3.6.0`"
    import numpy
    import triton
    if _version(numpy.__version__) >= (2, 4) and _version(triton.__version__) <= (3, 6):
        return (f"numpy {numpy.__version__} breaks the interpreter of Triton {triton.__version__} "
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
    if importlib.util.find_spec("triton") is not None:
        import triton
        v = _version(triton.__version__)
        if not SUPPORTED_TRITON[0] <= v <= SUPPORTED_TRITON[1]:
            notes.append(f"Triton {triton.__version__} is untested here (the course is tested on 3.6); "
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
        os.environ["TRITON_INTERPRET"] = "1"  # read when @triton.jit runs, so before any kernel is defined
    if not quiet:
        import torch
        versions = f"torch {torch.__version__}"
        if importlib.util.find_spec("triton") is not None:
            import triton
            versions += f", triton {triton.__version__}"
        print(f"══ MODE: {mode.upper()} ══  {reason}\n   {versions}, python {sys.version.split()[0]}")
        for note in version_warnings(mode):
            print("   ⚠", note)
        if mode == "structure":
            print("   Kernels cannot run here; only the structure of your code can be checked.")
    return mode, ("cuda" if mode == "gpu" else "cpu")

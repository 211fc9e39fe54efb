# Course set-up: installs what is missing, picks the mode, prints the banner.
# This file is the single source of every notebook's set-up cell (`make build` copies it in),
# and the grader imports it too, so the notebooks and the grader always agree on the mode.
import importlib.metadata
import importlib.util
import os
import subprocess
import sys

# The Triton versions the course was run on, by mode: in the interpreter every notebook and every reference solution
# at full marks, every kernel compiled for sm_80 and sm_90 (`make compat`: tests/reports/compat.txt); on a GPU, the
# H200's 3.6. And the one the set-up cell installs where Triton is missing (Colab's CPU runtime).
TESTED_TRITON = {"interpreter": ((3, 4), (3, 9)), "structure": ((3, 4), (3, 9)), "gpu": ((3, 6), (3, 6))}
INSTALL_TRITON = "3.6.0"
MODES = ("gpu", "interpreter", "structure")
LANGUAGE = "en"  # the edition's language; course_setup(language=...) sets it for the checks of the notebook

SETUP_MESSAGES = {
    "no_torch": {"en": "PyTorch is not installed. On a laptop without a GPU run `pip install torch==2.13.0` (the CPU "
                       "build) and restart the kernel; Colab and ModelScope already have it.",
                 "zh": "没有安装 PyTorch。在没有 GPU 的笔记本电脑上运行 `pip install torch==2.13.0`（CPU 版本），然后重启内核；"
                       "Colab 和 ModelScope 已经自带。"},
    "installing": {"en": "Installing {packages} …", "zh": "正在安装 {packages} …"},
    "no_cuda": {"en": "no CUDA GPU is visible to PyTorch", "zh": "PyTorch 看不到 CUDA GPU"},
    "old_gpu": {"en": "{name} is sm_{cc}; Triton needs sm_75 or newer", "zh": "{name} 是 sm_{cc}；Triton 需要 sm_75 或更新"},
    "no_triton": {"en": "Triton is not installed: run `pip install triton=={version}`",
                  "zh": "没有安装 Triton：运行 `pip install triton=={version}`"},
    "numpy": {"en": "numpy {numpy} breaks the interpreter of Triton {triton} (range() over a kernel argument fails): run "
                    "`pip install 'numpy<2.4'` and restart the kernel",
              "zh": "numpy {numpy} 会让 Triton {triton} 的解释器出错（对 kernel 参数做 range() 会失败）：运行 "
                    "`pip install 'numpy<2.4'` 并重启内核"},
    "asked_structure": {"en": "structure checks were asked for", "zh": "要求只做结构检查"},
    "asked_gpu": {"en": "GPU mode was asked for, but {why}", "zh": "要求 GPU 模式，但是{why}"},
    "asked_interpreter": {"en": "interpreter mode was asked for, but {why}", "zh": "要求解释器模式，但是{why}"},
    "interpreter": {"en": "{why}: kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1)",
                    "zh": "{why}：kernel 在 Triton 的 CPU 解释器里运行（TRITON_INTERPRET=1）"},
    "untested": {"en": "Triton {version} is untested in {mode} mode (the course was run on {tested} there); if a "
                       "kernel fails to compile, try `pip install triton=={install}`.",
                 "zh": "Triton {version} 没有在 {mode} 模式下测试过（测试过的是 {tested}）；如果 kernel 编译失败，试试 "
                       "`pip install triton=={install}`。"},
    "old_sm": {"en": "This GPU is sm_{cc}. Triton officially supports sm_80+: it has no bf16 tensor cores and 64 KB of "
                     "shared memory, so the lessons use fp16 and small blocks here, and bf16 checks are skipped.",
               "zh": "这块 GPU 是 sm_{cc}。Triton 官方支持 sm_80 及以上：它没有 bf16 张量核心，共享内存只有 64 KB，所以这里的课程"
                     "使用 fp16 和小分块，bf16 的检查会跳过。"},
    "imported_early": {"en": "Triton was imported before the mode was chosen, so its interpreter cannot work: restart "
                             "the kernel and run this cell first",
                       "zh": "在选定模式之前就导入了 Triton，它的解释器因此无法工作：请重启内核，先运行这个单元格"},
    "structure_only": {"en": "Kernels cannot run here; only the structure of your code can be checked.",
                       "zh": "这里无法运行 kernel，只能检查代码的结构。"},
}


def _say(key, language=None, **fields):
    texts = SETUP_MESSAGES[key]
    return texts.get(language or LANGUAGE, texts["en"]).format(**fields)


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
    """Colab/ModelScope bring torch; install Triton (a tested version, with a numpy its interpreter works with) and
    the plotting/progress helpers if absent. A Triton that the runtime already brings with its torch is left alone."""
    if importlib.util.find_spec("torch") is None:
        raise RuntimeError(_say("no_torch"))
    missing = [pkg for mod, pkg in {"matplotlib": "matplotlib", "tqdm": "tqdm"}.items()
               if importlib.util.find_spec(mod) is None]
    if importlib.util.find_spec("triton") is None:
        missing.append(f"triton=={INSTALL_TRITON}")
        if _version(installed_version("numpy") or "0") >= (2, 4):
            missing.append("numpy<2.4")  # Triton 3.6's interpreter breaks with numpy >= 2.4
    if missing:
        print(_say("installing", packages=", ".join(missing)))
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", *missing])


def usable_gpu(language=None):
    """(True, description) when Triton can compile for the local GPU, else (False, reason)."""
    import torch
    if not torch.cuda.is_available():
        return False, _say("no_cuda", language)
    name = torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (7, 5):
        return False, _say("old_gpu", language, name=name, cc=f"{major}{minor}")
    return True, f"{name} (sm_{major}{minor})"


def interpreter_problem(language=None):
    """None when Triton's CPU interpreter can run here, else what stops it and how to fix it."""
    triton_version = installed_version("triton")
    if triton_version is None:
        return _say("no_triton", language, version=INSTALL_TRITON)
    numpy_version = installed_version("numpy") or "0"
    if _version(numpy_version) >= (2, 4) and _version(triton_version) <= (3, 6):
        return _say("numpy", language, numpy=numpy_version, triton=triton_version)
    return None


def detect_mode(requested="auto", language=None):
    """Pick gpu / interpreter / structure; returns (mode, reason). Call before defining any kernel."""
    if requested not in ("auto",) + MODES:
        raise ValueError(f"unknown mode {requested!r}: use auto, gpu, interpreter or structure")
    if requested == "structure":
        return "structure", _say("asked_structure", language)
    gpu_ok, gpu_why = usable_gpu(language)
    if requested == "gpu" and not gpu_ok:
        raise RuntimeError(_say("asked_gpu", language, why=gpu_why))
    if gpu_ok and requested in ("auto", "gpu"):
        return "gpu", gpu_why
    problem = interpreter_problem(language)
    if problem:
        if requested == "interpreter":
            raise RuntimeError(_say("asked_interpreter", language, why=problem))
        return "structure", problem
    return "interpreter", _say("interpreter", language, why=gpu_why)


def version_warnings(mode, language=None):
    import torch
    notes = []
    triton_version = installed_version("triton")
    tested = TESTED_TRITON[mode]
    if triton_version and not tested[0] <= _version(triton_version) <= tested[1]:
        low, high = (".".join(map(str, v)) for v in tested)
        notes.append(_say("untested", language, version=triton_version, install=INSTALL_TRITON, mode=mode,
                          tested=low if low == high else f"{low}–{high}"))
    if mode == "gpu":
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) < (8, 0):
            notes.append(_say("old_sm", language, cc=f"{major}{minor}"))
    return notes


def course_setup(language="en"):
    """Run once at the top of a notebook: returns (MODE, DEVICE). `language` is the edition's (en, zh): the checks of
    this notebook speak it."""
    global LANGUAGE
    LANGUAGE = language
    quiet = os.environ.get("FA_QUIET") == "1"  # set by the grader's worker processes
    if not quiet and os.environ.get("NBGRADER_EXECUTION") is None:
        install_missing()
    mode, reason = detect_mode(os.environ.get("FA_MODE", "auto"))
    if mode == "interpreter":
        # Must be set before `import triton`: Triton's own @jit helpers (tl.max, tl.sum, …) are made at import.
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(_say("imported_early"))
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
            print("   " + _say("structure_only"))
    return mode, ("cuda" if mode == "gpu" else "cpu")

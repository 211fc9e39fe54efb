# Check helpers: what every visible check uses to report in plain words.
# Single source of every notebook's "check helpers" cell (`make build` copies it in); the grader
# imports the same functions, so a learner sees the same message at home and in the feedback.
import inspect
import re
import traceback

import torch

# The line that `make build` (nbgrader) puts where a solution goes.
STUB_MARKER = "TODO: replace this line with your code"
_TODO_LINE = re.compile(r"^\s*#\s*TODO\s+(\d+)\b[^:]*:?\s*(.*)$")
_HINT_LINE = re.compile(r"^\s*#\s+(\S.*)$")


def unfinished_todos(source):
    """[(number, hint)] for each TODO of `source` whose stub line is still there; a hint may run over several
    comment lines."""
    found, current, hint_open = [], None, False
    for line in source.splitlines():
        match = _TODO_LINE.match(line)
        if match:
            current, hint_open = [int(match.group(1)), match.group(2).strip()], True
        elif hint_open and current and _HINT_LINE.match(line):
            current[1] += " " + _HINT_LINE.match(line).group(1).strip()
        else:
            hint_open = False
            if STUB_MARKER in line and current and tuple(current) not in found:
                found.append(tuple(current))
    return found


def source_of(fn):
    """Python source of a function or of a Triton kernel (jit, interpreted or autotuned)."""
    while hasattr(fn, "fn"):  # Autotuner -> JITFunction -> python function
        fn = fn.fn
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def todo_messages(*functions):
    """One line per unfinished TODO in the given functions, e.g. 'TODO 2 in `softmax_kernel` is not done'."""
    lines = []
    for fn in functions:
        name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "?")
        for number, hint in unfinished_todos(source_of(fn)):
            lines.append(f"TODO {number} in `{name}` is not done" + (f" ({hint})" if hint else ""))
    return lines


def nan_framed(x):
    """A copy of tensor x at the same shape and strides inside a NaN-filled allocation: NaN before its first element,
    after its last, and in the gaps of a view such as x[:, :d]. A kernel that reads past a row or past the end of a
    tensor without a mask then gets NaN, which shows in its output even where the value read would have been
    multiplied by zero (0·NaN = NaN). The checks (visible and graded) pass every floating-point input this way."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0 \
            or any(step == 0 and n > 1 for n, step in zip(x.shape, x.stride())):
        return x
    extent = 1 + sum((n - 1) * step for n, step in zip(x.shape, x.stride()))
    margin = min(extent, 1 << 20)
    storage = torch.full((extent + 2 * margin,), float("nan"), dtype=x.dtype, device=x.device)
    framed = storage.as_strided(x.shape, x.stride(), margin)
    framed.copy_(x.detach())
    return framed


def mismatch(got, expected, atol, rtol, rule=None, what="output"):
    """None when `got` matches `expected` within atol + rtol·|expected|, else a message that says where. `rule` says
    in words why that much error is allowed (e.g. "4× PyTorch's own error in fp16")."""
    if not isinstance(got, torch.Tensor):
        kind = getattr(got, "what", None) or f"a {type(got).__name__}"
        return f"{what}: expected a torch.Tensor, got {kind}"
    if tuple(got.shape) != tuple(expected.shape):
        return f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
    if got.dtype != expected.dtype:
        return f"{what}: expected dtype {expected.dtype}, got {got.dtype}"
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    bad_nan = torch.isnan(g) & ~torch.isnan(e)
    if bad_nan.any():
        idx = tuple(int(i) for i in bad_nan.nonzero()[0])
        return (f"{what}: {int(bad_nan.sum())} NaN value(s), first at index {idx} (shape {tuple(got.shape)}, "
                f"{got.dtype}). NaN comes from an element never written, a 0/0 or exp(-inf - (-inf)), or a load past "
                "the end of a row or of a tensor without a mask (the checks put NaN around every input)")
    err = (g - e).abs().nan_to_num(0.0)
    excess = err - (atol + rtol * e.abs().nan_to_num(0.0))
    if got.numel() == 0 or excess.max() <= 0:
        return None
    idx = tuple(int(i) for i in (excess == excess.max()).nonzero()[0])
    bad = int((excess > 0).sum())
    allowed = rule or f"{atol:.1g} + {rtol:.1g}·|expected|"
    return (f"{what}: {bad} of {got.numel()} values are off (shape {tuple(got.shape)}, {got.dtype}); "
            f"max error {err.max().item():.3g} (allowed: {allowed}); worst at index {idx}: "
            f"expected {e[idx].item():.6g}, got {g[idx].item():.6g}")


def tolerance(dtype):
    """(atol, rtol, rule) for the visible checks: a loose bound in the input's precision (a GPU may run fp32 products
    on TF32 tensor cores). The graded checks are tighter: a few times the error PyTorch itself makes in that
    precision."""
    atol, rtol = {torch.float16: (2e-2, 2e-2), torch.bfloat16: (6e-2, 6e-2)}.get(dtype, (2e-3, 2e-3))
    name = str(dtype).replace("torch.", "")
    return atol, rtol, f"{atol:g} + {rtol:g}·|expected|, a quick bound for {name}"


def _your_lines(error):
    """The lines of a traceback that are in the notebook's cells but not in this helpers cell (so: the learner's code
    and the check that called it), following the cause of an error raised inside a kernel by Triton's interpreter."""
    chain = [error]
    while chain[-1].__cause__ is not None and len(chain) < 5:
        chain.append(chain[-1].__cause__)
    helpers = _your_lines.__code__.co_filename
    frames = [f for link in chain for f in traceback.extract_tb(link.__traceback__)
              if f.filename != helpers and ("ipykernel" in f.filename or f.filename.startswith("<ipython-input"))]
    return "".join(f"\n   in a cell, line {f.lineno}: {(f.line or '').strip()}" for f in frames[-3:])


def check(title, test, *functions):
    """Run one visible check: prints ✅, or ❌ with what is wrong (unfinished TODOs first). Never raises."""
    todos = todo_messages(*functions)
    if todos:
        print(f"❌ {title}\n   " + "\n   ".join(todos))
        return
    try:
        problem = test()
    except NotImplementedError as error:
        problem = f"a TODO is not done yet ({error})"
    except Exception as error:  # the learner's code raised: show what and where, not a wall of traceback
        inner = error.__cause__ if type(error).__name__ == "InterpreterError" and error.__cause__ else error
        text = str(inner).strip()
        problem = f"{type(inner).__name__}: {text[:800] + (' …' if len(text) > 800 else '')}" + _your_lines(error)
    print(f"❌ {title}\n   {problem}" if problem else f"✅ {title}")

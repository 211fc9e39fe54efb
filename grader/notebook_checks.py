# Check helpers: what every visible check uses to report in plain words.
# Single source of every notebook's "check helpers" cell (`make build` copies it in); the grader
# imports the same functions, so a learner sees the same message at home and in the feedback.
import inspect
import re

import torch

# The line that `make build` (nbgrader) puts where a solution goes.
STUB_MARKER = "TODO: replace this line with your code"
_TODO_LINE = re.compile(r"^\s*#\s*TODO\s+(\d+)\b[^:]*:?\s*(.*)$")


def unfinished_todos(source):
    """[(number, hint)] for each TODO of `source` whose stub line is still there."""
    found, current = [], None
    for line in source.splitlines():
        match = _TODO_LINE.match(line)
        if match:
            current = (int(match.group(1)), match.group(2).strip())
        elif STUB_MARKER in line and current and current not in found:
            found.append(current)
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


def mismatch(got, expected, atol, rtol, what="output"):
    """None when `got` matches `expected` within atol + rtol·|expected|, else a message that says where."""
    if not isinstance(got, torch.Tensor):
        return f"{what}: expected a torch.Tensor, got {type(got).__name__}"
    if tuple(got.shape) != tuple(expected.shape):
        return f"{what}: expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
    if got.dtype != expected.dtype:
        return f"{what}: expected dtype {expected.dtype}, got {got.dtype}"
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    bad_nan = torch.isnan(g) & ~torch.isnan(e)
    if bad_nan.any():
        idx = tuple(int(i) for i in bad_nan.nonzero()[0])
        return (f"{what}: {int(bad_nan.sum())} NaN value(s), first at index {idx} "
                f"(shape {tuple(got.shape)}, {got.dtype}); unwritten elements or a 0/0 show up like this")
    err = (g - e).abs().nan_to_num(0.0)
    excess = err - (atol + rtol * e.abs().nan_to_num(0.0))
    if got.numel() == 0 or excess.max() <= 0:
        return None
    idx = tuple(int(i) for i in (excess == excess.max()).nonzero()[0])
    bad = int((excess > 0).sum())
    return (f"{what}: {bad} of {got.numel()} values are off (shape {tuple(got.shape)}, {got.dtype}); "
            f"max error {err.max().item():.3g} (allowed {atol:.1g} + {rtol:.1g}·|expected|); worst at index {idx}: "
            f"expected {e[idx].item():.6g}, got {g[idx].item():.6g}")


def tolerance(dtype):
    """(atol, rtol) for the visible checks; fp32 allows TF32 tensor cores on a GPU."""
    return {torch.float16: (2e-2, 2e-2), torch.bfloat16: (6e-2, 6e-2)}.get(dtype, (2e-3, 2e-3))


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
    except Exception as error:  # the learner's code raised: show what, not a wall of traceback
        problem = f"{type(error).__name__}: {str(error).strip()[:800]}"
    print(f"❌ {title}\n   {problem}" if problem else f"✅ {title}")

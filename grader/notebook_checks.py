# Check helpers: what every visible check uses to report in plain words.
# Single source of every notebook's "check helpers" cell (`make build` copies it in); the grader
# imports the same functions, so a learner sees the same message at home and in the feedback.
import inspect
import re
import traceback

import torch

# The line that `make build` (nbgrader) puts where a solution goes.
STUB_MARKER = "TODO: replace this line with your code"
_TODO_LINE = re.compile(r"^\s*#\s*TODO\s+(\d+)\b[^:：]*[:：]?\s*(.*)$")

# What the checks say, in each edition's language (the set-up cell sets LANGUAGE; the grader passes `language`).
MESSAGES = {
    "todo": {"en": "TODO {number} in `{name}` is not done", "zh": "`{name}` 中的 TODO {number} 还没有完成"},
    "not_tensor": {"en": "{what}: expected a torch.Tensor, got {kind}", "zh": "{what}：应当返回 torch.Tensor，实际得到 {kind}"},
    "shape": {"en": "{what}: expected shape {expected}, got {got}", "zh": "{what}：形状应为 {expected}，实际为 {got}"},
    "dtype": {"en": "{what}: expected dtype {expected}, got {got}", "zh": "{what}：dtype 应为 {expected}，实际为 {got}"},
    "nan": {"en": "{what}: {count} NaN value(s), first at index {index} (shape {shape}, {dtype}). NaN comes from an "
                  "element never written, a 0/0, inf/inf (an exp that overflowed: subtract the row's max first) or "
                  "exp(-inf - (-inf)), or a load past the end of a row or of a tensor without a mask, or with a wrong one (the checks put "
                  "NaN around every input)",
            "zh": "{what}：有 {count} 个 NaN，第一个在下标 {index}（形状 {shape}，{dtype}）。NaN 来自从未写入的元素、0/0、inf/inf（exp 溢出了："
                  "先减去这一行的最大值）或 exp(-inf - (-inf))，或者没有掩码（或掩码不对）、越过一行末尾或张量末尾的读取（检查会在每个输入周围放上 NaN）"},
    "off": {"en": "{what}: {bad} of {numel} values are off (shape {shape}, {dtype}); max error {error} (allowed: "
                  "{allowed}); worst at index {index}: expected {expected}, got {got}",
            "zh": "{what}：{numel} 个值中有 {bad} 个不对（形状 {shape}，{dtype}）；最大误差 {error}（允许：{allowed}）；"
                  "最差的在下标 {index}：应为 {expected}，实际为 {got}"},
    "quick_bound": {"en": "{atol:g} + {rtol:g}·|expected|, a quick bound for {dtype}",
                    "zh": "{atol:g} + {rtol:g}·|期望值|，{dtype} 的一个粗略界"},
    "hint": {"en": " ({hint})", "zh": "（{hint}）"},
    "todo_numbers": {"en": "TODO {numbers} in `{name}`", "zh": "`{name}` 中的 TODO {numbers}"},
    "also_unfinished": {"en": "; also unfinished: {todos}", "zh": "；还没完成的还有：{todos}"},
    "todo_raised": {"en": "a TODO is not done yet ({error})", "zh": "还有 TODO 没有完成（{error}）"},
    "your_line": {"en": "in `{name}`, line {line} of its cell: {code}", "zh": "在 `{name}` 中（所在单元格第 {line} 行）：{code}"},
    "cell_line": {"en": "in a cell, line {line}: {code}", "zh": "某个单元格第 {line} 行：{code}"},
    "in_kernel": {"en": " (raised inside a kernel run by Triton's interpreter)", "zh": "（在 Triton 解释器运行的 kernel 里抛出）"},
}


def say(key, language=None, **fields):
    """A message in the notebook's language: `language`, else the LANGUAGE the set-up cell chose, else English."""
    language = language or globals().get("LANGUAGE") or "en"
    texts = MESSAGES[key]
    return texts.get(language, texts["en"]).format(**fields)
_HINT_LINE = re.compile(r"^\s*#\s+(\S.*)$")


def _joins_without_space(last, first):
    """Chinese lines join without a space (one after "；" reads as a stray gap), but keep it before a Latin word."""
    punctuation, ideograph = r"[\u3000-\u303f\uff00-\uffef]", r"[\u4e00-\u9fff]"
    return bool(re.match(punctuation, last) or re.match(punctuation, first)
                or (re.match(ideograph, last) and re.match(ideograph, first)))


def unfinished_todos(source):
    """[(number, hint)] for each TODO of `source` whose stub line is still there; a hint may run over several
    comment lines."""
    found, current, hint_open = [], None, False
    for line in source.splitlines():
        match = _TODO_LINE.match(line)
        if match:
            current, hint_open = [int(match.group(1)), match.group(2).strip()], True
        elif hint_open and current and _HINT_LINE.match(line):
            more = _HINT_LINE.match(line).group(1).strip()
            current[1] += ("" if _joins_without_space(current[1][-1:], more[:1]) else " ") + more
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


def todo_message(number, name, hint, language=None):
    """'TODO 2 in `softmax_kernel` is not done (the hint)'."""
    return say("todo", language, number=number, name=name) + (say("hint", language, hint=hint) if hint else "")


def todo_messages(*functions, language=None):
    """One line per unfinished TODO in the given functions, e.g. 'TODO 2 in `softmax_kernel` is not done'."""
    lines = []
    for fn in functions:
        name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "?")
        for number, hint in unfinished_todos(source_of(fn)):
            lines.append(todo_message(number, name, hint, language))
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


def mismatch(got, expected, atol, rtol, rule=None, what="output", language=None):
    """None when `got` matches `expected` within atol + rtol·|expected|, else a message that says where. `rule` says
    in words why that much error is allowed (e.g. "4× PyTorch's own error in fp16")."""
    if not isinstance(got, torch.Tensor):
        kind = getattr(got, "what", None) or f"a {type(got).__name__}"
        return say("not_tensor", language, what=what, kind=kind)
    if tuple(got.shape) != tuple(expected.shape):
        return say("shape", language, what=what, expected=tuple(expected.shape), got=tuple(got.shape))
    if got.dtype != expected.dtype:
        return say("dtype", language, what=what, expected=expected.dtype, got=got.dtype)
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    bad_nan = torch.isnan(g) & ~torch.isnan(e)
    if bad_nan.any():
        idx = tuple(int(i) for i in bad_nan.nonzero()[0])
        return say("nan", language, what=what, count=int(bad_nan.sum()), index=idx, shape=tuple(got.shape),
                   dtype=got.dtype)
    err = (g - e).abs().nan_to_num(0.0)
    excess = err - (atol + rtol * e.abs().nan_to_num(0.0))
    if got.numel() == 0 or excess.max() <= 0:
        return None
    idx = tuple(int(i) for i in (excess == excess.max()).nonzero()[0])
    return say("off", language, what=what, bad=int((excess > 0).sum()), numel=got.numel(), shape=tuple(got.shape),
               dtype=got.dtype, error=f"{err.max().item():.3g}", allowed=rule or f"{atol:.1g} + {rtol:.1g}·|expected|",
               index=idx, expected=f"{e[idx].item():.6g}", got=f"{g[idx].item():.6g}")


def tolerance(dtype):
    """(atol, rtol, rule) for the visible checks: a loose bound in the input's precision (a GPU may run fp32 products
    on TF32 tensor cores). The graded checks are tighter: a few times the error PyTorch itself makes in that
    precision."""
    atol, rtol = {torch.float16: (2e-2, 2e-2), torch.bfloat16: (6e-2, 6e-2)}.get(dtype, (2e-3, 2e-3))
    return atol, rtol, say("quick_bound", atol=atol, rtol=rtol, dtype=str(dtype).replace("torch.", ""))


def _your_lines(error):
    """The lines of a traceback that are in the notebook's cells but not in this helpers cell (so: the learner's code
    and the check that called it), following the cause of an error raised inside a kernel by Triton's interpreter."""
    chain = [error]
    while chain[-1].__cause__ is not None and len(chain) < 5:
        chain.append(chain[-1].__cause__)
    helpers = _your_lines.__code__.co_filename
    frames = [f for link in chain for f in traceback.extract_tb(link.__traceback__)
              if f.filename != helpers and ("ipykernel" in f.filename or f.filename.startswith("<ipython-input"))]
    return "".join("\n   " + (say("your_line", name=f.name, line=f.lineno, code=(f.line or "").strip())
                              if f.name != "<module>" else say("cell_line", line=f.lineno, code=(f.line or "").strip()))
                   for f in frames[-3:])


def check(title, test, *functions):
    """Run one visible check: prints ✅, or ❌ with what is wrong (unfinished TODOs first). Never raises."""
    todos = [(getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "?"),
              unfinished_todos(source_of(fn))) for fn in functions]
    todos = [(name, found) for name, found in todos if found]
    if todos:  # the first unfinished TODO with its hint; the others by number (their hints are in their cells)
        (name, found), rest = todos[0], [(n, f) for n, f in todos]
        others = ", ".join(say("todo_numbers", numbers=", ".join(str(k) for k, _ in f if (n, k) != (name, found[0][0])),
                               name=n) for n, f in rest if any((n, k) != (name, found[0][0]) for k, _ in f))
        print(f"❌ {title}\n   " + todo_message(found[0][0], name, found[0][1])
              + (say("also_unfinished", todos=others) if others else ""))
        return
    try:
        problem = test()
    except NotImplementedError as error:
        problem = say("todo_raised", error=error)
    except Exception as error:  # the learner's code raised: show what and where, not a wall of traceback
        inner = error.__cause__ if type(error).__name__ == "InterpreterError" and error.__cause__ else error
        text = str(inner).strip()
        problem = (f"{type(inner).__name__}: {text[:800] + (' …' if len(text) > 800 else '')}"
                   + (say("in_kernel") if inner is not error else "") + _your_lines(error))
    print(f"❌ {title}\n   {problem}" if problem else f"✅ {title}")

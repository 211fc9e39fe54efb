"""Checks of lesson 05: `flash_attention(q, k, v, causal=False, sm_scale=None)`, FlashAttention-2 forward and
backward in Triton, backed by the `torch.autograd.Function` `FlashAttention`.

The contract is `flash_attention`; the checks also name the kernels it must launch (`_attn_fwd`,
`_attn_bwd_preprocess`, `_attn_bwd_dkdv`, `_attn_bwd_dq`) and compile them for real GPUs.
References are computed here, in the judge, in float64 with PyTorch autograd.
"""
import ast
import math

import torch

from ..harness import TORCH_DOES_THE_WORK, CheckFailed, Lesson
from ..notebook_checks import unfinished_todos

KERNELS = ("_attn_fwd_inner", "_attn_fwd", "_attn_bwd_preprocess", "_attn_bwd_dkdv_inner", "_attn_bwd_dkdv",
           "_attn_bwd_dq_inner", "_attn_bwd_dq")
lesson = Lesson(
    "05_flash_attention_v2",
    graded=("flash_attention", "FlashAttention") + KERNELS,
    kernels=KERNELS,
    forbidden=TORCH_DOES_THE_WORK,
    structure_needs={"_attn_fwd_inner": ["tl.dot"], "_attn_fwd": ["tl.store"], "_attn_bwd_preprocess": ["tl.store"],
                     "_attn_bwd_dkdv_inner": ["tl.dot"], "_attn_bwd_dq_inner": ["tl.dot"]},
)
FWD_NEEDS = ("_attn_fwd_inner", "_attn_fwd", "attention_forward", "flash_attention")
BWD_NEEDS = FWD_NEEDS + ("_attn_bwd_preprocess", "_attn_bwd_dkdv_inner", "_attn_bwd_dkdv", "_attn_bwd_dq_inner",
                         "_attn_bwd_dq", "attention_backward")
FWD_KERNELS = ("_attn_fwd",)
BWD_KERNELS = ("_attn_fwd", "_attn_bwd_preprocess", "_attn_bwd_dkdv", "_attn_bwd_dq")
LOG2E = 1.4426950408889634
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


# ── helpers ──────────────────────────────────────────────────────────────────────────────────────────
def _program(ctx):
    """The submission's program text, as the judge made it."""
    return ctx.program


def _glue_done(ctx, backward):
    """The autograd glue lives in a class (TODO 13, 14), which the harness's TODO finder doesn't read."""
    try:
        tree = ast.parse(_program(ctx))
    except SyntaxError:
        return
    program = _program(ctx)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FlashAttention"]
    if not classes:
        ctx.fail("`FlashAttention` (the torch.autograd.Function behind flash_attention) is not defined")
    methods = {n.name: n for n in classes[-1].body if isinstance(n, ast.FunctionDef)}
    for name in ("forward", "backward") if backward else ("forward",):
        if name not in methods:
            ctx.fail(f"`FlashAttention` has no `{name}` method")
        found = unfinished_todos(ast.get_source_segment(program, methods[name]) or "")
        if found:
            number, hint = found[0]
            ctx.fail(f"TODO {number} in `FlashAttention.{name}` is not done ({hint})")


def _qkv(ctx, B, H, N, D, dtype, layout="bhnd"):
    """Fresh random q, k, v; layout "bnhd" gives (B, H, N, d) views of (B, N, H, d) tensors (strided)."""
    if layout == "bnhd":
        return [ctx.randn(B, N, H, D, dtype=dtype).transpose(1, 2) for _ in range(3)]
    return [ctx.randn(B, H, N, D, dtype=dtype) for _ in range(3)]


def _attention(q, k, v, causal, sm_scale, dtype, dout=None):
    """Attention with PyTorch ops in `dtype` (float64 = exact); (out, [dq, dk, dv] or None)."""
    q, k, v = (x.detach().to(dtype).requires_grad_(dout is not None) for x in (q, k, v))
    scores = (q @ k.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    if dout is None:
        return out.detach(), None
    grads = torch.autograd.grad(out, (q, k, v), dout.to(dtype))
    return out.detach(), list(grads)


def _floor(ctx, dtype, exact):
    """Smallest allowed error: a small multiple of the dtype's resolution, relative to the result's size.
    fp32 on a GPU allows TF32 tensor cores (10-bit mantissa)."""
    scale = max(1.0, exact.abs().max().item())
    base = {F16: 2e-3, BF16: 1.6e-2}.get(dtype, 1e-2 if ctx.gpu else 1e-5)
    return base * scale


def _bits(t):
    """The raw bits of a tensor (NaN == NaN here, unlike torch.equal on values)."""
    t = t.contiguous()
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _run(ctx, q, k, v, causal, sm_scale=None, dout=None):
    """flash_attention in the worker; checks the glue, the kernels launched and (via ctx.call) no torch attention."""
    _glue_done(ctx, dout is not None)
    kwargs = {"causal": causal} if sm_scale is None else {"causal": causal, "sm_scale": sm_scale}
    result = ctx.call("flash_attention", q, k, v, backward=dout, **kwargs)
    ctx.kernels_launched_from_submission("flash_attention", ctx.last_info,
                                         BWD_KERNELS if dout is not None else FWD_KERNELS)
    return result


def _expect_forward(ctx, q, k, v, causal, sm_scale=None, label=""):
    B, H, N, D = q.shape
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    out = _run(ctx, q, k, v, causal, sm_scale)
    exact, _ = _attention(q, k, v, causal, scale, torch.float64)
    same, _ = _attention(q, k, v, causal, scale, q.dtype)
    ctx.expect_close(out, exact, same_precision=same, floor=_floor(ctx, q.dtype, exact),
                     what=f"flash_attention(q, k, v, causal={causal}{'' if sm_scale is None else f', sm_scale={sm_scale}'})"
                          f" output for shape {(B, H, N, D)}, {q.dtype}{label}")


def _expect_backward(ctx, q, k, v, causal, sm_scale=None, dout=None, label=""):
    B, H, N, D = q.shape
    scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    dout = ctx.randn(B, H, N, D, dtype=q.dtype) if dout is None else dout
    out, grads = _run(ctx, q, k, v, causal, sm_scale, dout=dout)
    exact_out, exact = _attention(q, k, v, causal, scale, torch.float64, dout)
    _, same = _attention(q, k, v, causal, scale, q.dtype, dout)
    what = f"flash_attention(q, k, v, causal={causal}) for shape {(B, H, N, D)}, {q.dtype}{label}"
    ctx.expect_close(out, exact_out, floor=_floor(ctx, q.dtype, exact_out), what=f"output of {what}")
    if grads is None or len(grads) < 3 or any(g is None for g in grads[:3]):
        ctx.fail(f"{what}: the backward returned no gradient for q, k or v (does FlashAttention.backward return "
                 "dq, dk, dv, None, None?)")
    for name, g, e, s in zip(("dq", "dk", "dv"), grads, exact, same):
        ctx.expect_close(g, e, same_precision=s, floor=_floor(ctx, q.dtype, e), what=f"{name} of {what}")


# ── checks ───────────────────────────────────────────────────────────────────────────────────────────
def _expect_forward_ragged(ctx, causal, long_shape):
    """Ragged N (1, 17, 1000, 333), head dims 32-128 and 80, a strided view, fp32; plus one long fp16 problem."""
    cases = ctx.pick(
        gpu=[((1, 2, 1, 64), F16, "bhnd"), ((2, 3, 17, 32), F16, "bhnd"), ((2, 4, 1000, 64), F16, "bnhd"),
             ((1, 2, 1000, 128), F16, "bhnd"), ((1, 3, 333, 80), F16, "bhnd"), (long_shape, F16, "bhnd"),
             ((1, 2, 300, 32), F32, "bhnd")],
        interpreter=[((1, 2, 1, 16), F32, "bhnd"), ((1, 2, 17, 32), F32, "bhnd"), ((2, 1, 40, 24), F32, "bnhd")])
    for shape, dtype, layout in cases:
        q, k, v = _qkv(ctx, *shape, dtype, layout)
        _expect_forward(ctx, q, k, v, causal, label=", strided view" if layout == "bnhd" else "")


@lesson.check(2, "forward without mask: ragged N, any head dim, strided views", needs=FWD_NEEDS)
def forward(ctx):
    _expect_forward_ragged(ctx, False, long_shape=(2, 2, 2048, 64))
    q, k, v = _qkv(ctx, *ctx.pick(gpu=(1, 2, 129, 64), interpreter=(1, 1, 33, 16)), ctx.pick(gpu=F16, interpreter=F32))
    _expect_forward(ctx, q, k, v, False, sm_scale=0.3)


@lesson.check(2, "causal forward: two stages, ragged N", needs=FWD_NEEDS)
def forward_causal(ctx):
    _expect_forward_ragged(ctx, True, long_shape=(1, 2, 2048, 128))


@lesson.check(1, "output in the input's dtype (fp16, bf16 on a GPU, fp32)", needs=FWD_NEEDS)
def forward_dtypes(ctx):
    cases = ctx.pick(
        gpu=[((2, 2, 1000, 64), BF16, False), ((1, 2, 777, 128), BF16, True), ((1, 2, 500, 64), F32, True),
             ((1, 1, 100, 80), F32, False), ((1, 2, 513, 64), F16, True)],
        interpreter=[((1, 2, 33, 32), F16, False), ((1, 1, 40, 16), F16, True), ((1, 1, 20, 16), F32, True)])
    for shape, dtype, causal in cases:
        q, k, v = _qkv(ctx, *shape, dtype)
        _expect_forward(ctx, q, k, v, causal)


@lesson.check(2, "gradients without mask match PyTorch autograd (float64)", needs=BWD_NEEDS)
def backward(ctx):
    cases = ctx.pick(
        gpu=[((1, 1, 1, 64), F16, "bhnd"), ((2, 3, 17, 32), F16, "bhnd"), ((2, 4, 1000, 64), F16, "bnhd"),
             ((1, 2, 1000, 128), F16, "bhnd"), ((1, 3, 333, 80), F16, "bhnd"), ((1, 2, 300, 64), F32, "bhnd")],
        interpreter=[((1, 2, 17, 32), F32, "bhnd"), ((2, 1, 40, 16), F32, "bnhd"), ((1, 1, 33, 24), F32, "bhnd")])
    for shape, dtype, layout in cases:
        q, k, v = _qkv(ctx, *shape, dtype, layout)
        _expect_backward(ctx, q, k, v, False, label=", strided view" if layout == "bnhd" else "")
    B, H, N, D = ctx.pick(gpu=(2, 2, 500, 64), interpreter=(1, 2, 24, 16))
    q, k, v = _qkv(ctx, B, H, N, D, ctx.pick(gpu=F16, interpreter=F32))
    dout = ctx.randn(B, N, H, D, dtype=q.dtype).transpose(1, 2)  # dO is a strided view too
    _expect_backward(ctx, q, k, v, False, sm_scale=0.3, dout=dout, label=", sm_scale=0.3, strided dO")


@lesson.check(2, "causal gradients match PyTorch autograd (float64)", needs=BWD_NEEDS)
def backward_causal(ctx):
    cases = ctx.pick(
        gpu=[((1, 1, 1, 64), F16, "bhnd"), ((2, 3, 17, 32), F16, "bhnd"), ((2, 4, 1000, 64), F16, "bnhd"),
             ((1, 2, 1000, 128), F16, "bhnd"), ((1, 3, 333, 80), F16, "bhnd"), ((1, 2, 300, 64), F32, "bhnd")],
        interpreter=[((1, 2, 17, 32), F32, "bhnd"), ((2, 1, 40, 16), F32, "bnhd"), ((1, 1, 33, 24), F32, "bhnd")])
    for shape, dtype, layout in cases:
        q, k, v = _qkv(ctx, *shape, dtype, layout)
        _expect_backward(ctx, q, k, v, True, label=", strided view" if layout == "bnhd" else "")


@lesson.check(1, "gradients in fp16 (and bf16 on a GPU)", needs=BWD_NEEDS)
def backward_low_precision(ctx):
    cases = ctx.pick(
        gpu=[((2, 4, 1000, 64), BF16, False), ((1, 2, 777, 128), BF16, True), ((1, 2, 1000, 32), BF16, True),
             ((1, 2, 1500, 128), F16, False)],
        interpreter=[((1, 2, 37, 32), F16, False), ((1, 1, 40, 16), F16, True)])
    for shape, dtype, causal in cases:
        q, k, v = _qkv(ctx, *shape, dtype)
        _expect_backward(ctx, q, k, v, causal)


@lesson.check(1, "two backward runs give bit-identical gradients (no atomics)", needs=BWD_NEEDS)
def deterministic(ctx):
    atomics = [line.strip() for line in _program(ctx).splitlines() if "atomic_" in line and not line.strip().startswith("#")]
    if atomics:
        ctx.fail(f"your kernels use atomics (`{atomics[0][:80]}`): atomic additions land in a different order on every "
                 "run, so gradients differ in their last bits; write each gradient from exactly one program")
    cases = ctx.pick(gpu=[((2, 8, 1000, 64), F16, True), ((1, 4, 2048, 128), BF16, False), ((2, 4, 777, 64), F16, False)],
                     interpreter=[((1, 2, 37, 32), F16, True), ((1, 2, 21, 16), F32, False)])
    for shape, dtype, causal in cases:
        q, k, v = _qkv(ctx, *shape, dtype)
        dout = ctx.randn(*shape, dtype=dtype)
        _, first = _run(ctx, q, k, v, causal, dout=dout)
        _, second = _run(ctx, q, k, v, causal, dout=dout)
        for name, a, b in zip(("dq", "dk", "dv"), first, second):
            if a is None or b is None:
                ctx.fail(f"the backward returned no {name}")
            if a.shape != b.shape or not torch.equal(_bits(a), _bits(b)):
                diff = (a.double() - b.double()).abs()
                ctx.fail(f"{name} differs between two identical backward runs (shape {shape}, {dtype}, causal={causal}):"
                         f" {int((diff > 0).sum())} values, max difference {diff.max().item():.3g}")


@lesson.check(1, "flash_attention runs the four kernels and no PyTorch attention, forward and backward", needs=BWD_NEEDS)
def anti_cheat(ctx):
    B, H, N, D = ctx.pick(gpu=(2, 4, 1024, 64), interpreter=(1, 2, 40, 16))
    dtype = ctx.pick(gpu=F16, interpreter=F32)
    for causal in (False, True):
        q, k, v = _qkv(ctx, B, H, N, D, dtype)
        _run(ctx, q, k, v, causal, dout=ctx.randn(B, H, N, D, dtype=dtype))  # kernels launched, nothing forbidden
        shape = tuple(ctx.last_info["largest_shape"])
        # (the interpreter copies tensors as flat byte arrays, hence the shape test rather than a size limit)
        if len(shape) >= 2 and shape[-2:] == (N, N):
            ctx.fail(f"the forward of flash_attention created a tensor of shape {shape}: an N×N score matrix; "
                     "FlashAttention never materialises one")


SLOWDOWN_ALLOWED = 2.0       # the student's time at most this × the reference's (each of fwd, fwd+bwd, causal)
CAUSAL_SHARE_ALLOWED = 0.75  # the causal forward at most this × the full one (about 0.5 when blocks are skipped)


@lesson.check(1, "speed against the reference solution; causal faster than full", needs=BWD_NEEDS, modes=("gpu",),
              timeout=600)
def speed(ctx):
    ctx.load_reference()
    B, H, N, D = 4, 16, 4096, 64
    q, k, v = _qkv(ctx, B, H, N, D, F16)
    report, problems = [], []
    for causal in (False, True):
        for backward in (False, True):
            student, reference = ctx.bench_against_reference("flash_attention", q, k, v, causal=causal,
                                                              backward=backward, slowdown_allowed=SLOWDOWN_ALLOWED)
            part = f"{'fwd+bwd' if backward else 'fwd'}{' causal' if causal else ''}"
            report.append(f"{part}: {student:.2f} ms vs reference {reference:.2f} ms")
            if student > SLOWDOWN_ALLOWED * reference:
                problems.append(f"{part} takes {student / reference:.1f}× the reference's time "
                                f"(allowed: {SLOWDOWN_ALLOWED:g}×)")
    causal_fwd, full_fwd = ctx.best_times(lambda: ctx.bench("flash_attention", q, k, v, causal=True),
                                          lambda: ctx.bench("flash_attention", q, k, v, causal=False),
                                          within=CAUSAL_SHARE_ALLOWED)
    if causal_fwd > CAUSAL_SHARE_ALLOWED * full_fwd:
        problems.append(f"the causal forward takes {causal_fwd / full_fwd:.2f}× the time of the "
                        "full one: blocks past the diagonal should be skipped (about 0.5×)")
    summary = f"B={B}, H={H}, N={N}, d={D}, fp16: " + "; ".join(report)
    if problems:
        ctx.fail("; ".join(problems) + f" ({summary})")
    return summary


def _aot(ctx, kernel, signature, constexprs, **options):
    """ctx.aot, with a hint when the error sits inside a helper that the kernel calls."""
    try:
        return ctx.aot(kernel, signature, constexprs, **options)
    except CheckFailed as failure:
        ctx.fail(f"`{kernel}` does not compile for a GPU ({constexprs}): {failure}\nIf the caret (^) points at a call "
                 "of a helper such as `_attn_fwd_inner`, the error is inside that helper; a common cause is a tl.dot "
                 "whose operands have different dtypes (convert p or ds to the input dtype first)")


def _signature(kernel, dtype):
    """The argument types of each kernel (the signatures are given in the notebook, outside the TODOs)."""
    tensors = {"_attn_fwd": (("Q", "q", "m"), ("K", "k", "n"), ("V", "v", "n"), ("Out", "o", "m")),
               "_attn_bwd_preprocess": (("O", "o", "m"), ("DO", "do", "m")),
               "_attn_bwd_dkdv": (("Q", "q", "m"), ("K", "k", "n"), ("V", "v", "n"), ("DO", "do", "m"),
                                  ("DK", "dk", "n"), ("DV", "dv", "n")),
               "_attn_bwd_dq": (("Q", "q", "m"), ("K", "k", "n"), ("V", "v", "n"), ("DO", "do", "m"),
                                ("DQ", "dq", "m"))}[kernel]
    signature = {name: f"*{dtype}" for name, _, _ in tensors}
    signature.update({"_attn_fwd": {"LSE": "*fp32", "sm_scale": "fp32"},
                      "_attn_bwd_preprocess": {"Delta": "*fp32"},
                      "_attn_bwd_dkdv": {"LSE": "*fp32", "Delta": "*fp32", "sm_scale": "fp32"},
                      "_attn_bwd_dq": {"LSE": "*fp32", "Delta": "*fp32", "sm_scale": "fp32"}}[kernel])
    for _, short, row in tensors:
        signature.update({f"stride_{short}{axis}": "i32" for axis in ("z", "h", row, "d")})
    signature.update({"H": "i32", "N_CTX": "i32", "HEAD_DIM": "constexpr", "BLOCK_D": "constexpr",
                      "BLOCK_M": "constexpr"})
    if kernel != "_attn_bwd_preprocess":
        signature.update({"BLOCK_N": "constexpr", "CAUSAL": "constexpr", "DOT_PRECISION": "constexpr"})
    return signature


@lesson.check(1, "kernels compile for sm_80 and sm_90 GPUs (fp16, bf16)", needs=BWD_NEEDS,
              modes=("gpu", "interpreter", "structure"), compile_only=True, timeout=400)
def compiles(ctx):
    shared = []
    # (kernel, dtype, head dim, causal, (BLOCK_M, BLOCK_N, num_warps, num_stages)): the Hopper table's configs
    for kernel, dtype, d, causal, config in (("_attn_fwd", "fp16", 64, True, (128, 64, 4, 3)),
                                             ("_attn_fwd", "bf16", 128, False, (128, 128, 8, 3)),
                                             ("_attn_bwd_dkdv", "bf16", 128, True, (32, 128, 8, 3)),
                                             ("_attn_bwd_dq", "fp16", 64, False, (128, 32, 4, 3))):
        constexprs = {"HEAD_DIM": d, "BLOCK_D": d, "BLOCK_M": config[0], "BLOCK_N": config[1], "CAUSAL": causal,
                      "DOT_PRECISION": "ieee"}
        got = _aot(ctx, kernel, _signature(kernel, dtype), constexprs, num_warps=config[2], num_stages=config[3])
        shared.append(f"{kernel} {dtype} d={d}: {got[90] // 1024} KB")
    _aot(ctx, "_attn_bwd_preprocess", _signature("_attn_bwd_preprocess", "bf16"),
         {"HEAD_DIM": 80, "BLOCK_D": 128, "BLOCK_M": 128})
    return "shared memory on sm_90 (without the pipelining buffers): " + ", ".join(shared)

"""Checks of lesson 05: `flash_attention(q, k, v, causal=False, sm_scale=None)`, FlashAttention-2 forward and
backward in Triton, backed by the `torch.autograd.Function` `FlashAttention`.

One part per check (COURSE_SPEC §5: one mistake costs the points of the check named for it):
- the forward checks call `attention_forward` (the launcher of `_attn_fwd`) and judge its output (and, in `forward`,
  its base-2 log-sum-exp); only `forward_ragged` and `forward_causal` use lengths that are not multiples of the blocks;
- the backward checks call `attention_backward` (the three backward kernels) directly, with `o` and the log-sum-exp
  computed here in float64, as a correct forward saves them, so that a wrong forward never costs backward points;
  `backward_dkdv` judges dK and dV, `backward_dq` judges dQ, and every message reports all three; dK and dQ depend on
  the delta pre-pass (TODO 6) and dV does not, so when dV is right and dK or dQ is wrong, a second run with o = 0
  (where delta must be 0) says whether delta is to blame before a message names the kernels' own TODOs;
- `autograd` judges the glue alone: `flash_attention` must give what `attention_forward` and `attention_backward` give
  on the same inputs (sm_scale and causal passed through);
- the causal checks use lengths N whose residues modulo the interpreter's (and the GPU's) BLOCK_M and BLOCK_N cover
  every case the kernels' bounds depend on, against a brute-force mask (`_attention`);
- no dimension hides another (issue 24): in `forward` and in `backward_dkdv`/`backward_dq` one case gives each of B, H,
  N and d a size of its own above 1, different from every block size, in a strided layout, so that an offset, stride
  or block size of one dimension used for another, or a head offset that assumes a contiguous tensor, costs points
  in the check of the kernel that has it;
- every stabilising maximum is exercised: `forward`, `forward_causal` (TODO 1's masked stage), `backward_dkdv`,
  `backward_dq` and `backward_causal` each have a case with scores of ±100 to ±150 whose row max grows along the keys
  (`_qkv(large=True)`), where an online softmax without its running max, or p rebuilt as 2^s / 2^lse, is inf or NaN.
References are computed here, in the judge, in float64 with PyTorch autograd.
"""
import ast
import math
import re

import torch

from .. import structure
from ..harness import TORCH_DOES_THE_WORK, CheckFailed, Lesson
from .memory_safety import AsGiven, add_memory_check
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
FWD_NEEDS = ("_attn_fwd_inner", "_attn_fwd", "attention_forward")
BWD_NEEDS = ("_attn_bwd_preprocess", "_attn_bwd_dkdv_inner", "_attn_bwd_dkdv", "_attn_bwd_dq_inner", "_attn_bwd_dq",
             "attention_backward")
ALL_NEEDS = FWD_NEEDS + BWD_NEEDS + ("flash_attention",)
FWD_KERNELS = ("_attn_fwd",)
BWD_KERNELS = ("_attn_bwd_preprocess", "_attn_bwd_dkdv", "_attn_bwd_dq")
LOG2E = 1.4426950408889634
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16

# Lengths for the causal checks. The bounds of the causal kernels depend on N through N mod BLOCK_M (the rows of the
# last query block, where its diagonal block is clipped to N) and N mod BLOCK_N (the keys of the diagonal's last
# step; in dK/dV the rows of the last query step), each against 0, 1, BLOCK−1 and the smaller block. The
# interpreter's causal tiles are 64×16 (forward, dQ) and 16×64 (dK/dV): N = 1, 63, 79, 104, 113, 128, 145 give
# N mod 64 = 1, 63, 15, 40, 49, 0, 17 and N mod 16 = 1, 15, 15, 8, 1, 0, 1, with one, two and three blocks. On an
# H200 (fp16) the causal tiles are 128×64 (forward, dQ; dQ 128×32 at d = 32), 64×64 and 32×128 (dK/dV at d = 64 and
# d = 128): the GPU lengths give N mod 128 = 1, 63, 1, 63, 64, 97, 0, 104, 0, 77, 17, 0 (mod 64 and mod 32 spread
# likewise). A simulation of the kernels' bounds with off-by-one, clip and block-swap variants found every variant
# that is wrong for some N < 200 (interpreter tiles) or N < 400 (these GPU tiles) wrong for one of these lengths.
CAUSAL_N_INTERPRETER = (1, 63, 79, 104, 113, 128, 145)
CAUSAL_GPU = ((1, 2, 1, 64), (1, 2, 63, 64), (2, 2, 129, 64), (1, 2, 191, 128), (1, 2, 192, 64), (1, 2, 353, 128),
              (1, 2, 384, 64), (2, 2, 1000, 64), (1, 2, 1024, 128), (1, 3, 333, 80), (2, 3, 17, 32), (1, 2, 2048, 128))
# The causal length with large scores (_qkv): two query blocks, the second with a whole key block before its diagonal,
# so that the running max rises through both stages (the masked one is TODO 1's).
CAUSAL_LARGE_INTERPRETER, CAUSAL_LARGE_GPU = (1, 1, 79, 32), (1, 2, 353, 128)


def _causal_shapes(ctx):
    return ctx.pick(gpu=CAUSAL_GPU,
                    interpreter=[(1, 2 if n < 64 else 1, n, 16 if n > 100 else 32) for n in CAUSAL_N_INTERPRETER])


# ── helpers ──────────────────────────────────────────────────────────────────────────────────────────
def _glue_done(ctx, backward):
    """The autograd glue lives in a class (TODO 13, 14), which the harness's TODO finder doesn't read."""
    program = ctx.program
    try:
        tree = structure.parse(program)  # never ast.parse in a check: checks run in threads (structure.parse)
    except SyntaxError:
        return
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FlashAttention"]
    if not classes:
        ctx.fail(ctx.t("`FlashAttention` (the torch.autograd.Function behind flash_attention) is not defined",
                       "没有定义 `FlashAttention`（flash_attention 背后的 torch.autograd.Function）"))
    methods = {n.name: n for n in classes[-1].body if isinstance(n, ast.FunctionDef)}
    for name in ("forward", "backward") if backward else ("forward",):
        if name not in methods:
            ctx.fail(ctx.t(f"`FlashAttention` has no `{name}` method", f"`FlashAttention` 没有 `{name}` 方法"))
        found = unfinished_todos(ast.get_source_segment(program, methods[name]) or "")
        if found:
            number, hint = found[0]
            ctx.fail(ctx.t(f"TODO {number} in `FlashAttention.{name}` is not done ({hint})",
                           f"`FlashAttention.{name}` 中的 TODO {number} 还没有完成（{hint}）"))


def _qkv(ctx, B, H, N, D, dtype, layout="bhnd", large=False, sm_scale=None):
    """Fresh random q, k, v; layout "bnhd" gives (B, H, N, d) views of (B, N, H, d) tensors (strided).

    large=True: scores of ±100 to ±150 whose maximum jumps along the keys. Column 0 of q is ±100 / sm_scale (a random
    sign per query) and column 0 of k grows from 1 to 1.5 along the sequence; the other columns are ordinary, so each
    score is ±(100 … 150) plus a random part of about ±1, and the softmax stays spread over several keys. exp of such
    a score overflows fp32 (e^88.7 = 2^128) and exp of its negative underflows to 0: a softmax that does not subtract
    its running max, or subtracts it with the wrong sign, gives inf or NaN. A query of sign + meets larger and larger
    scores tile after tile (its running max rises by about 50 over the keys: acc and l_i must be rescaled each time);
    one of sign − has its largest scores in the first tile. The large column is q's, not k's: dQ = sm_scale·dS·K sums
    dS over a row, where it cancels, and a large column of K would magnify fp32's rounding of P there. The judge's
    reference is float64, where all of this is finite."""
    if layout == "bnhd":
        q, k, v = [ctx.randn(B, N, H, D, dtype=dtype).transpose(1, 2) for _ in range(3)]
    else:
        q, k, v = [ctx.randn(B, H, N, D, dtype=dtype) for _ in range(3)]
    if large:
        sign = torch.where(ctx.randn(B, H, N, dtype=torch.float64) >= 0, 1.0, -1.0)
        q[..., 0] = (100.0 / _scale(D, sm_scale) * sign).to(dtype)
        k[..., 0] = (1 + 0.5 * torch.arange(N, dtype=torch.float64) / max(N - 1, 1)).to(dtype)
    return [q, k, v]


# The label of a case with large scores: what the inputs are, and why they break what they break (no TODO named: the
# same words serve the forward, which subtracts its running max, and the backward, which subtracts the saved lse).
def large_label(ctx):
    return ctx.t(", scores of ±100 to ±150 whose row max grows along the keys (2^s overflows fp32 there: only "
                 "2^(s − max) and 2^(s − lse) are safe)",
                 "，分数在 ±100 到 ±150 之间，且每行的最大值沿着键不断变大（这时 2^s 会超出 fp32 的范围：只有 2^(s − max) "
                 "和 2^(s − lse) 是安全的）")


def _attention(q, k, v, causal, sm_scale, dtype, dout=None):
    """Attention with PyTorch ops in `dtype` (float64 = exact), causal by a brute-force N×N mask:
    (out, base-2 log-sum-exp, [dq, dk, dv] or None)."""
    q, k, v = (x.detach().to(dtype).requires_grad_(dout is not None) for x in (q, k, v))
    scores = (q @ k.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    lse = (torch.logsumexp(scores, dim=-1) * LOG2E).detach()
    if dout is None:
        return out.detach(), lse, None
    grads = torch.autograd.grad(out, (q, k, v), dout.to(dtype))
    return out.detach(), lse, list(grads)


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


def _scale(D, sm_scale):
    return 1.0 / math.sqrt(D) if sm_scale is None else sm_scale


def _tensors(ctx, value, count, what):
    """`value` as a list of `count` tensors, or a failure that says what came back instead."""
    if not isinstance(value, (list, tuple)) or len(value) != count or \
            not all(isinstance(t, torch.Tensor) for t in value):
        kind = type(value).__name__ + (ctx.t(f" of {len(value)}", f"（{len(value)} 个元素）")
                                       if isinstance(value, (list, tuple)) else "")
        ctx.fail(ctx.t(f"{what} must return {count} tensors, got a {kind}",
                       f"{what} 必须返回 {count} 个张量，实际得到的是 {kind}"))
    return list(value)


# ── the forward, through attention_forward ──────────────────────────────────────────────────────────
def _forward(ctx, q, k, v, causal, sm_scale=None, label="", check_lse=False):
    """attention_forward (TODOs 1–5) against float64: its output, and with check_lse its base-2 log-sum-exp."""
    B, H, N, D = q.shape
    scale = _scale(D, sm_scale)
    o, lse = _tensors(ctx, ctx.call("attention_forward", q, k, v, causal, scale), 2, "attention_forward")
    exact, exact_lse, _ = _attention(q, k, v, causal, scale, torch.float64)
    same, _, _ = _attention(q, k, v, causal, scale, q.dtype)
    what = ctx.t(f"attention_forward(q, k, v, causal={causal}, sm_scale={scale:.4g}) for shape {(B, H, N, D)}, "
                 f"{q.dtype}{label}",
                 f"attention_forward(q, k, v, causal={causal}, sm_scale={scale:.4g})，形状 {(B, H, N, D)}，"
                 f"{q.dtype}{label}")
    ctx.expect_close(o, exact, same_precision=same, floor=_floor(ctx, q.dtype, exact),
                     what=ctx.t(f"output of {what}", f"{what} 的输出"))
    if check_lse:
        floor = (1e-4 if q.dtype == F32 else 1e-3) * max(1.0, exact_lse.abs().max().item())
        ctx.expect_close(lse, exact_lse.float(), floor=floor,
                         what=ctx.t(f"log-sum-exp of {what} (TODO 5: base 2, m_i + log2(l_i), float32)",
                                    f"{what} 的 log-sum-exp（TODO 5：以 2 为底，m_i + log2(l_i)，float32）"))


@lesson.check(2, "forward: online softmax in base 2 and the saved log-sum-exp (lengths that fill the blocks)",
              needs=FWD_NEEDS, kernels=FWD_KERNELS,
              zh="前向：以 2 为底的在线 softmax 和保存的 log-sum-exp（长度恰好填满各个块）")
def forward(ctx):
    # (shape, dtype, layout, sm_scale, large scores). The first case gives each of B, H, N, d a size of its own above
    # 1 and unlike the forward's blocks (interpreter: BLOCK_M = 32, BLOCK_N = 16, and d = 40 padded to BLOCK_D = 64;
    # on an H200 at d = 32: 128, 64 and 32), in the strided layout (head stride d, row stride H·d): an offset or a
    # stride of one dimension used for another, a head offset that assumes a contiguous tensor, or one block size
    # for another gives a wrong result there. The large case (_qkv) makes a missing or misplaced max overflow.
    cases = ctx.pick(
        gpu=[((2, 3, 384, 32), F16, "bnhd", None, False), ((2, 3, 128, 32), F16, "bhnd", None, False),
             ((2, 4, 1024, 64), F16, "bnhd", None, False), ((1, 2, 1024, 128), F16, "bhnd", None, False),
             ((1, 3, 256, 80), F16, "bhnd", None, False), ((2, 2, 2048, 64), F16, "bhnd", None, False),
             ((1, 2, 256, 64), F16, "bhnd", 0.3, False), ((1, 2, 512, 64), F16, "bhnd", None, True)],
        interpreter=[((2, 3, 96, 40), F32, "bnhd", None, False), ((1, 2, 64, 32), F32, "bhnd", None, True),
                     ((1, 1, 96, 16), F32, "bhnd", 0.3, False)])
    for shape, dtype, layout, sm_scale, large in cases:
        q, k, v = _qkv(ctx, *shape, dtype, layout, large=large, sm_scale=sm_scale)
        label = ctx.t(", strided view", "，带 stride 的视图") if layout == "bnhd" else ""
        label += large_label(ctx) if large else ""
        _forward(ctx, q, k, v, False, sm_scale, label=label, check_lse=True)


@lesson.check(1, "forward with lengths that are not multiples of the blocks (N = 1, 17, …)", needs=FWD_NEEDS,
              kernels=FWD_KERNELS,
              zh="长度不是块大小整数倍时的前向（N = 1、17、……）")
def forward_ragged(ctx):
    shapes = ctx.pick(gpu=[(1, 2, 1, 64), (2, 3, 17, 32), (2, 4, 1000, 64), (1, 2, 1000, 128), (1, 3, 333, 80),
                           (1, 2, 191, 64), (2, 2, 2047, 64)],
                      interpreter=[(1, 2, 1, 16), (1, 2, 17, 32), (1, 1, 40, 16), (2, 1, 63, 32)])
    for shape in shapes:
        q, k, v = _qkv(ctx, *shape, ctx.pick(gpu=F16, interpreter=F32))
        _forward(ctx, q, k, v, False)


@lesson.check(2, "causal forward: two stages, every length residue the bounds depend on", needs=FWD_NEEDS,
              kernels=FWD_KERNELS,
              zh="因果前向：两个阶段，边界所依赖的每一种长度余数")
def forward_causal(ctx):
    for shape in _causal_shapes(ctx):
        large = shape == ctx.pick(gpu=CAUSAL_LARGE_GPU, interpreter=CAUSAL_LARGE_INTERPRETER)
        q, k, v = _qkv(ctx, *shape, ctx.pick(gpu=F16, interpreter=F32), large=large)
        _forward(ctx, q, k, v, True, label=large_label(ctx) if large else "")


@lesson.check(1, "forward output in the input's dtype and precision (fp16; bf16 and fp32 on a GPU)", needs=FWD_NEEDS,
              kernels=FWD_KERNELS,
              zh="前向输出的 dtype 和精度与输入一致（fp16；有 GPU 时还有 bf16 和 fp32）")
def forward_dtypes(ctx):
    cases = ctx.pick(gpu=[((2, 2, 1024, 64), BF16), ((1, 2, 768, 128), BF16), ((1, 2, 512, 64), F32),
                          ((1, 1, 128, 80), F32)],
                     interpreter=[((1, 2, 64, 32), F16), ((1, 1, 96, 16), F16)])
    for shape, dtype in cases:
        q, k, v = _qkv(ctx, *shape, dtype)
        _forward(ctx, q, k, v, False)


# ── the backward, through attention_backward ────────────────────────────────────────────────────────
# Each TODO named on its own ("TODO 7, TODO 8"), so that a message says exactly which TODOs it suspects.
BACKWARD_PARTS = {"dk": "dK (`_attn_bwd_dkdv`: TODO 7, TODO 8, TODO 9)", "dv": "dV (`_attn_bwd_dkdv`: TODO 7, TODO 8)",
                  "dq": "dQ (`_attn_bwd_dq`: TODO 10, TODO 11, TODO 12)"}
BACKWARD_PARTS_ZH = {"dk": "dK（`_attn_bwd_dkdv`：TODO 7、TODO 8、TODO 9）", "dv": "dV（`_attn_bwd_dkdv`：TODO 7、TODO 8）",
                     "dq": "dQ（`_attn_bwd_dq`：TODO 10、TODO 11、TODO 12）"}
KERNEL_OF = {"dk": "dK (`_attn_bwd_dkdv`)", "dv": "dV (`_attn_bwd_dkdv`)", "dq": "dQ (`_attn_bwd_dq`)"}
KERNEL_OF_ZH = {"dk": "dK（`_attn_bwd_dkdv`）", "dv": "dV（`_attn_bwd_dkdv`）", "dq": "dQ（`_attn_bwd_dq`）"}


def _gradients_without_delta(q, k, v, causal, sm_scale, dtype, dout):
    """[dq, dk] of attention with delta = 0, in `dtype`: dS = P ∘ dP. What attention_backward must return when it is
    handed o = 0, since its pre-pass then has delta = rowsum(dO ∘ O) = 0 to compute."""
    q, k, v, dout = (x.detach().to(dtype) for x in (q, k, v, dout))
    scores = (q @ k.transpose(-1, -2)) * sm_scale
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    ds = torch.softmax(scores, dim=-1) * (dout @ v.transpose(-1, -2))
    return [ds @ k * sm_scale, ds.transpose(-1, -2) @ q * sm_scale]


def _right_without_delta(ctx, names, dout, q, k, v, lse, causal, scale, factor):
    """True when the gradients `names` (some of dq, dk), wrong with the real o, come out right with o = 0, where
    delta must be 0: then what is wrong is delta, the one input that o reaches (its pre-pass, or its use in dS)."""
    try:
        grads = ctx.call("attention_backward", dout, q, k, v, torch.zeros_like(q), lse.float(), causal, scale)
        if not isinstance(grads, (list, tuple)) or len(grads) != 3:
            return False
        got = dict(zip(("dq", "dk", "dv"), grads))
        exact = dict(zip(("dq", "dk"), _gradients_without_delta(q, k, v, causal, scale, torch.float64, dout)))
        same = dict(zip(("dq", "dk"), _gradients_without_delta(q, k, v, causal, scale, q.dtype, dout)))
        for name in names:
            ctx.expect_close(got[name], exact[name], same_precision=same[name], factor=factor,
                             floor=_floor(ctx, q.dtype, exact[name]), what=name)
    except CheckFailed:
        return False
    return True


def _backward(ctx, q, k, v, causal, judged, sm_scale=None, dout=None, label="", large=False):
    """attention_backward on o and lse computed here (exact, as a correct forward saves them); judges the gradients
    in `judged` and reports all three. dK and dQ depend on delta = rowsum(dO ∘ O), which dV does not: when dV is
    right and dK or dQ is wrong, a second run with o = 0 (so delta = 0) tells a wrong delta from a wrong kernel.
    large: the inputs have large scores (_qkv), and the label says so. At |s| ≈ 150 fp32 holds a score to about
    1e-5, and the kernels rebuild P = 2^(s·log2(e) − lse) from a rounded product and a rounded lse where PyTorch's
    softmax subtracts the exact row max: a right kernel's error there is up to 3× PyTorch's own (measured), so 8× is
    allowed instead of 4×; a missing or misplaced shift is inf or NaN, far outside either."""
    factor = 8.0 if large else 4.0
    label += large_label(ctx) if large else ""
    B, H, N, D = q.shape
    scale = _scale(D, sm_scale)
    dout = ctx.randn(B, H, N, D, dtype=q.dtype) if dout is None else dout
    o, lse, exact = _attention(q, k, v, causal, scale, torch.float64, dout)
    _, _, same = _attention(q, k, v, causal, scale, q.dtype, dout)
    grads = _tensors(ctx, ctx.call("attention_backward", dout, q, k, v, o.to(q.dtype), lse.float(), causal, scale),
                     3, "attention_backward")
    what = ctx.t(f"attention_backward(do, q, k, v, o, lse, causal={causal}, sm_scale={scale:.4g}) for shape "
                 f"{(B, H, N, D)}, {q.dtype}{label} (o and lse exact, as a correct forward saves them)",
                 f"attention_backward(do, q, k, v, o, lse, causal={causal}, sm_scale={scale:.4g})，形状 "
                 f"{(B, H, N, D)}，{q.dtype}{label}（o 和 lse 是精确值，和正确的前向保存的一样）")
    verdicts = {}
    for name, g, e, s in zip(("dq", "dk", "dv"), grads, exact, same):
        try:
            ctx.expect_close(g, e, same_precision=s, floor=_floor(ctx, q.dtype, e), what=name, factor=factor)
            verdicts[name] = None
        except CheckFailed as failure:
            verdicts[name] = str(failure)
    wrong = [name for name in judged if verdicts[name]]
    if not wrong:
        return
    off = [name for name in ("dq", "dk") if verdicts[name]]
    cause = ""
    if not verdicts["dv"] and _right_without_delta(ctx, off, dout, q, k, v, lse, causal, scale, factor):
        if off == ["dq", "dk"]:  # the one delta both kernels read
            cause = ctx.t("dK and dQ are wrong and dV is right, but dK and dQ come out right when o = 0 (so that "
                          "delta = rowsum(dO ∘ O) is 0): the delta that `_attn_bwd_preprocess` computes (TODO 6) is "
                          "wrong.\n",
                          "dK 和 dQ 不对而 dV 正确，但当 o = 0（于是 delta = rowsum(dO ∘ O) 为 0）时 dK 和 dQ 都对："
                          "`_attn_bwd_preprocess` 算出的 delta（TODO 6）不对。\n")
        else:  # one kernel alone reads delta wrong: its dS
            todo, ds = (7, "dsT = pT ∘ (dpT − delta)") if off == ["dk"] else (10, "ds = p ∘ (dp − delta)")
            gradient = KERNEL_OF[off[0]]
            cause = ctx.t(f"{gradient} is wrong, but right when o = 0 (so that delta is 0), and the other kernel "
                          f"reads the same delta without trouble: the use of delta in {ds} (TODO {todo}) is wrong.\n",
                          f"{KERNEL_OF_ZH[off[0]]} 不对，但当 o = 0（于是 delta 为 0）时是对的，而另一个 kernel 读同一个 "
                          f"delta 却没有问题：{ds} 里对 delta 的用法（TODO {todo}）不对。\n")

    def summary(name, g, e):
        if verdicts[name]:
            part = (KERNEL_OF if cause else BACKWARD_PARTS)[name]
            part_zh = (KERNEL_OF_ZH if cause else BACKWARD_PARTS_ZH)[name]
            return ctx.t(f"{part} is wrong: {verdicts[name]}", f"{part_zh} 不对：{verdicts[name]}")
        error = (g.double() - e).abs().max().item()
        return ctx.t(f"{name} is right (max error {error:.2g})", f"{name} 正确（最大误差 {error:.2g}）")
    ctx.fail(ctx.t(f"{what}:\n", f"{what}：\n") + cause
             + "\n".join(summary(n, g, e) for n, g, e in zip(("dq", "dk", "dv"), grads, exact)))


def _backward_full_blocks(ctx, judged):
    """_backward, not causal, lengths that fill the blocks, on each case: (shape, dtype, sm_scale, layout, large
    scores). The first gives each of B, H, N, d a size of its own above 1 and unlike the blocks (interpreter: dK/dV
    16×32, dQ 32×16, delta 16 rows, and d = 40 padded to BLOCK_D = 64; on an H200 d = 16 = BLOCK_D under dK/dV 32×64
    and dQ 64×32), with q, k, v and dO strided; the large case (_qkv) makes p rebuilt from the saved lse without
    subtracting it first (2^s / 2^lse) overflow."""
    cases = ctx.pick(gpu=[((2, 3, 384, 16), F16, None, "bnhd", False), ((2, 3, 128, 32), F16, None, "bhnd", False),
                          ((2, 4, 1024, 64), F16, None, "bhnd", False), ((1, 2, 1024, 128), F16, None, "bhnd", False),
                          ((1, 3, 256, 80), F16, None, "bhnd", False), ((2, 2, 512, 64), F16, 0.3, "bhnd", False),
                          ((1, 2, 512, 64), F16, None, "bhnd", True)],
                     interpreter=[((2, 3, 96, 40), F32, None, "bnhd", False), ((1, 2, 64, 32), F32, None, "bhnd", True),
                                  ((2, 1, 64, 16), F32, 0.3, "bhnd", False)])
    for (B, H, N, D), dtype, sm_scale, layout, large in cases:
        q, k, v = _qkv(ctx, B, H, N, D, dtype, layout, large=large, sm_scale=sm_scale)
        label = "" if sm_scale is None else f", sm_scale={sm_scale}"
        dout = None
        if layout == "bnhd":
            dout = ctx.randn(B, N, H, D, dtype=dtype).transpose(1, 2)
            label += ctx.t(", q, k, v and do strided views", "，q、k、v 和 do 都是带 stride 的视图")
        _backward(ctx, q, k, v, False, judged, sm_scale, dout=dout, label=label, large=large)


@lesson.check(2, "dK and dV (attention_backward, lengths that fill the blocks, no mask)", needs=BWD_NEEDS,
              kernels=BWD_KERNELS,
              zh="dK 和 dV（attention_backward，长度恰好填满各个块，不加掩码）")
def backward_dkdv(ctx):
    _backward_full_blocks(ctx, ("dk", "dv"))


@lesson.check(2, "dQ (attention_backward, lengths that fill the blocks, no mask)", needs=BWD_NEEDS,
              kernels=BWD_KERNELS,
              zh="dQ（attention_backward，长度恰好填满各个块，不加掩码）")
def backward_dq(ctx):
    _backward_full_blocks(ctx, ("dq",))


@lesson.check(1, "gradients with lengths that are not multiples of the blocks (N = 1, 17, …)", needs=BWD_NEEDS,
              kernels=BWD_KERNELS,
              zh="长度不是块大小整数倍时的梯度（N = 1、17、……）")
def backward_ragged(ctx):
    shapes = ctx.pick(gpu=[(1, 1, 1, 64), (2, 3, 17, 32), (2, 4, 1000, 64), (1, 2, 1000, 128), (1, 3, 333, 80),
                           (1, 2, 191, 64)],
                      interpreter=[(1, 2, 1, 16), (1, 2, 17, 32), (1, 1, 40, 16), (2, 1, 63, 32)])
    for shape in shapes:
        q, k, v = _qkv(ctx, *shape, ctx.pick(gpu=F16, interpreter=F32))
        _backward(ctx, q, k, v, False, ("dq", "dk", "dv"))


@lesson.check(2, "causal gradients: the three stages of dK/dV and dQ's two, every length residue", needs=BWD_NEEDS,
              kernels=BWD_KERNELS,
              zh="因果梯度：dK/dV 的三个阶段和 dQ 的两个阶段，每一种长度余数")
def backward_causal(ctx):
    for shape in _causal_shapes(ctx):
        large = shape == ctx.pick(gpu=CAUSAL_LARGE_GPU, interpreter=CAUSAL_LARGE_INTERPRETER)
        q, k, v = _qkv(ctx, *shape, ctx.pick(gpu=F16, interpreter=F32), large=large)
        _backward(ctx, q, k, v, True, ("dq", "dk", "dv"), large=large)


@lesson.check(1, "gradients in the input's dtype and precision (fp16; bf16 and fp32 on a GPU)", needs=BWD_NEEDS,
              kernels=BWD_KERNELS,
              zh="梯度的 dtype 和精度与输入一致（fp16；有 GPU 时还有 bf16 和 fp32）")
def backward_dtypes(ctx):
    cases = ctx.pick(gpu=[((2, 4, 1024, 64), BF16), ((1, 2, 768, 128), BF16), ((1, 2, 1024, 32), BF16),
                          ((1, 2, 256, 64), F32)],
                     interpreter=[((1, 2, 64, 32), F16), ((1, 1, 96, 16), F16)])
    for shape, dtype in cases:
        q, k, v = _qkv(ctx, *shape, dtype)
        _backward(ctx, q, k, v, False, ("dq", "dk", "dv"))


# ── the whole: flash_attention through autograd ─────────────────────────────────────────────────────
def _run(ctx, q, k, v, causal, sm_scale=None, dout=None):
    """flash_attention in the worker; checks the glue, the kernels launched and (via ctx.call) no torch attention."""
    _glue_done(ctx, dout is not None)
    kwargs = {"causal": causal} if sm_scale is None else {"causal": causal, "sm_scale": sm_scale}
    try:
        result = ctx.call("flash_attention", q, k, v, backward=dout, **kwargs)
    except CheckFailed as failure:  # PyTorch names no line for this one: say which TODO returns the gradients
        counts = re.search(r"incorrect\s+number\s+of\s+gradients\s+\(expected (\d+), got (\d+)\)", str(failure))
        if counts is None:
            raise
        expected, got = counts.groups()
        ctx.fail(ctx.t(f"FlashAttention.backward (TODO 14) returned {got} value(s), but autograd wants {expected}: one "
                       "per input of FlashAttention.forward after ctx, in the same order (q, k, v, causal, sm_scale), "
                       f"with None for causal and sm_scale, which are not tensors ({failure})",
                       f"FlashAttention.backward（TODO 14）返回了 {got} 个值，而 autograd 要的是 {expected} 个："
                       "FlashAttention.forward 在 ctx 之后的每个输入各对应一个，顺序相同（q、k、v、causal、sm_scale），"
                       f"causal 和 sm_scale 不是张量，对应的位置返回 None（{failure}）"))
    ctx.kernels_launched_from_submission("flash_attention", ctx.last_info,
                                         FWD_KERNELS + BWD_KERNELS if dout is not None else FWD_KERNELS)
    return result


def _no_nan(ctx, what, tensors, where):
    """Fail first, and say where to look, when a result holds NaN (before comparing it with anything)."""
    for name, t in tensors:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and torch.isnan(t).any():
            first = tuple(int(i) for i in torch.isnan(t).nonzero()[0])
            count = int(torch.isnan(t).sum())
            ctx.fail(ctx.t(f"{name} of {what} holds {count} NaN value(s), first at index {first} "
                           f"(shape {tuple(t.shape)}): NaN comes from a load past the end of a row or of a tensor "
                           f"without a mask (the checks put NaN around every input), a 0/0, or an element never "
                           f"written. {where}",
                           f"{what} 的 {name} 有 {count} 个 NaN，第一个在下标 {first}（形状 {tuple(t.shape)}）："
                           f"NaN 来自没有掩码、越过一行末尾或张量末尾的载入（检查会在每个输入周围放上 NaN）、0/0，"
                           f"或者从未写入的元素。{where}"))


@lesson.check(1, "autograd: flash_attention gives what attention_forward and attention_backward give (TODOs 13, 14)",
              needs=ALL_NEEDS,
              zh="autograd：flash_attention 给出的结果与 attention_forward 和 attention_backward 相同（TODO 13、14）")
def autograd(ctx):
    cases = ctx.pick(gpu=[((2, 4, 1024, 64), F16, False, 0.3), ((1, 2, 512, 64), F16, True, None)],
                     interpreter=[((1, 2, 64, 16), F32, False, 0.3), ((1, 1, 64, 16), F32, True, None)])
    for (B, H, N, D), dtype, causal, sm_scale in cases:
        q, k, v = _qkv(ctx, B, H, N, D, dtype, layout="bnhd")
        dout = ctx.randn(B, N, H, D, dtype=dtype).transpose(1, 2)  # autograd may hand the backward a strided dO
        scale = _scale(D, sm_scale)
        out, grads = _run(ctx, q, k, v, causal, sm_scale, dout=dout)
        what = ctx.t(f"flash_attention(q, k, v, causal={causal}, sm_scale={sm_scale}) for shape {(B, H, N, D)}, "
                     f"{dtype}",
                     f"flash_attention(q, k, v, causal={causal}, sm_scale={sm_scale})，形状 {(B, H, N, D)}，{dtype}")
        if grads is None or len(grads) < 3 or any(not isinstance(g, torch.Tensor) for g in grads[:3]):
            ctx.fail(ctx.t(f"{what}: autograd got no gradient for q, k or v: FlashAttention.backward (TODO 14) must "
                           "return dq, dk, dv, None, None (one gradient per input of forward)",
                           f"{what}：autograd 没有得到 q、k 或 v 的梯度：FlashAttention.backward（TODO 14）必须返回 "
                           "dq, dk, dv, None, None（forward 的每个输入对应一个梯度）"))
        o, lse = _tensors(ctx, ctx.call("attention_forward", q, k, v, causal, scale), 2, "attention_forward")
        own = _tensors(ctx, ctx.call("attention_backward", dout, q, k, v, o, lse, causal, scale), 3,
                       "attention_backward")
        _no_nan(ctx, ctx.t(f"attention_forward/attention_backward for shape {(B, H, N, D)}, causal={causal}",
                           f"attention_forward/attention_backward（形状 {(B, H, N, D)}，causal={causal}）"),
                [("o", o), ("lse", lse)] + list(zip(("dq", "dk", "dv"), own)),
                ctx.t("Fix the kernels first: the checks named forward and backward_* say which.",
                      "先把 kernel 修好：名为 forward 和 backward_* 的检查会告诉你是哪一个。"))
        ctx.expect_close(out, o.double(), floor=_floor(ctx, dtype, o.double()),
                         what=ctx.t(f"output of {what}, against attention_forward(q, k, v, causal={causal}, "
                                    f"sm_scale={scale:.4g}) (TODO 13: FlashAttention.forward runs attention_forward)",
                                    f"{what} 的输出，与 attention_forward(q, k, v, causal={causal}, "
                                    f"sm_scale={scale:.4g}) 对比（TODO 13：FlashAttention.forward 要运行 "
                                    "attention_forward）"))
        for name, g, e in zip(("dq", "dk", "dv"), grads, own):
            ctx.expect_close(g, e.double(), floor=_floor(ctx, dtype, e.double()),
                             # the glue of both TODOs carries causal, sm_scale and the tensors from forward to
                             # backward: a loss on the way shows here, whichever of the two lost it
                             what=ctx.t(f"{name} of {what}, against attention_backward on the same inputs (TODO 13 "
                                        "and TODO 14: FlashAttention.forward keeps q, k, v, o, lse, causal and "
                                        "sm_scale on ctx, and FlashAttention.backward hands exactly those to "
                                        "attention_backward and returns dq, dk, dv, None, None)",
                                        f"{what} 的 {name}，与相同输入上的 attention_backward 对比（TODO 13 和 TODO 14："
                                        "FlashAttention.forward 要把 q、k、v、o、lse、causal 和 sm_scale 留在 ctx 上，"
                                        "FlashAttention.backward 要把它们原样交给 attention_backward，并返回 "
                                        "dq, dk, dv, None, None）"))


@lesson.check(1, "two backward runs give bit-identical gradients (no atomics)", needs=ALL_NEEDS,
              zh="两次反向运行给出逐位相同的梯度（不用原子操作）")
def deterministic(ctx):
    atomics = [line.strip() for line in ctx.program.splitlines() if "atomic_" in line and not line.strip().startswith("#")]
    if atomics:
        ctx.fail(ctx.t(f"your kernels use atomics (`{atomics[0][:80]}`): atomic additions land in a different order on "
                       "every run, so gradients differ in their last bits; write each gradient from exactly one "
                       "program",
                       f"你的 kernel 用了原子操作（`{atomics[0][:80]}`）：每次运行时原子加法的先后顺序都不同，所以梯度的"
                       "最后几位会不一样；每个梯度元素应当只由一个 program 写出"))
    cases = ctx.pick(gpu=[((2, 8, 1024, 64), F16), ((1, 4, 2048, 128), BF16), ((2, 4, 768, 64), F16)],
                     interpreter=[((1, 2, 64, 32), F16), ((1, 2, 64, 16), F32)])
    look = ctx.t("Look at the loads of the backward kernel that computes it (`_attn_bwd_dq` for dq, `_attn_bwd_dkdv` "
                 "for dk and dv) and at the forward's log-sum-exp.",
                 "检查算出它的那个反向 kernel 里的载入（dq 看 `_attn_bwd_dq`，dk 和 dv 看 `_attn_bwd_dkdv`），"
                 "以及前向的 log-sum-exp。")
    for shape, dtype in cases:
        q, k, v = _qkv(ctx, *shape, dtype)
        dout = ctx.randn(*shape, dtype=dtype)
        _, first = _run(ctx, q, k, v, False, dout=dout)
        _, second = _run(ctx, q, k, v, False, dout=dout)
        for name, a, b in zip(("dq", "dk", "dv"), first or [None] * 3, second or [None] * 3):
            if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
                ctx.fail(ctx.t(f"the backward returned no {name}", f"反向没有返回 {name}"))
            _no_nan(ctx, ctx.t(f"flash_attention's backward (shape {shape}, {dtype}, not causal)",
                               f"flash_attention 的反向（形状 {shape}，{dtype}，非因果）"),
                    [(name, a), (ctx.t(f"{name} (second run)", f"{name}（第二次运行）"), b)], look)
            if a.shape != b.shape or not torch.equal(_bits(a), _bits(b)):
                diff = (a.double() - b.double()).abs()
                ctx.fail(ctx.t(f"{name} differs between two identical backward runs (shape {shape}, {dtype}, not "
                               f"causal): {int((diff > 0).sum())} values, max difference {diff.max().item():.3g}",
                               f"{name} 在两次相同的反向运行之间不一致（形状 {shape}，{dtype}，非因果）："
                               f"{int((diff > 0).sum())} 个值不同，最大差值 {diff.max().item():.3g}"))


@lesson.check(1, "flash_attention runs the four kernels and no PyTorch attention, forward and backward",
              needs=ALL_NEEDS,
              zh="flash_attention 在前向和反向中运行四个 kernel，不调用 PyTorch 的注意力")
def anti_cheat(ctx):
    B, H, N, D = ctx.pick(gpu=(2, 4, 1024, 64), interpreter=(1, 2, 64, 16))
    dtype = ctx.pick(gpu=F16, interpreter=F32)
    for causal in (False, True):
        q, k, v = _qkv(ctx, B, H, N, D, dtype)
        _run(ctx, q, k, v, causal, dout=ctx.randn(B, H, N, D, dtype=dtype))  # kernels launched, nothing forbidden
        shape = tuple(ctx.last_info["largest_shape"])
        # (the interpreter copies tensors as flat byte arrays, hence the shape test rather than a size limit)
        if len(shape) >= 2 and shape[-2:] == (N, N):
            ctx.fail(ctx.t(f"the forward of flash_attention created a tensor of shape {shape}: an N×N score matrix; "
                           "FlashAttention never materialises one",
                           f"flash_attention 的前向创建了一个形状为 {shape} 的张量：一个 N×N 的分数矩阵；"
                           "FlashAttention 从来不把它完整地存下来"))


SLOWDOWN_ALLOWED = 2.0       # the student's time at most this × the reference's (each of fwd, fwd+bwd, causal)
CAUSAL_SHARE_ALLOWED = 0.75  # the causal forward at most this × the full one (about 0.5 when blocks are skipped)


@lesson.check(1, "speed against the reference solution; causal faster than full", needs=ALL_NEEDS, modes=("gpu",),
              timeout=600,
              zh="与参考实现比速度；因果比全注意力快")
def speed(ctx):
    ctx.load_reference()
    # H = 12, not 16: Triton specialises every integer argument on whether it divides by 16, so with H = 16 this check
    # compiled six kernels of its own; with 12 it runs the ones the correctness checks compiled (d = 64, fp16).
    B, H, N, D = 4, 12, 4096, 64
    q, k, v = _qkv(ctx, B, H, N, D, F16)
    for causal in (False, True):  # compile and autotune now, beside the other checks; the timings wait for them
        for backward in (False, True):
            for key in ("student", "reference"):
                ctx.warm_up("flash_attention", q, k, v, key=key, causal=causal, backward=backward)
    report, problems = [], []
    for causal in (False, True):
        for backward in (False, True):
            student, reference = ctx.bench_against_reference("flash_attention", q, k, v, causal=causal,
                                                              backward=backward, slowdown_allowed=SLOWDOWN_ALLOWED)
            part = f"{'fwd+bwd' if backward else 'fwd'}{' causal' if causal else ''}"
            report.append(ctx.t(f"{part}: {student:.2f} ms vs reference {reference:.2f} ms",
                                f"{part}：{student:.2f} ms，参考实现 {reference:.2f} ms"))
            if student > SLOWDOWN_ALLOWED * reference:
                problems.append(ctx.t(f"{part} takes {student / reference:.1f}× the reference's time "
                                      f"(allowed: {SLOWDOWN_ALLOWED:g}×)",
                                      f"{part} 的用时是参考实现的 {student / reference:.1f} 倍"
                                      f"（允许：{SLOWDOWN_ALLOWED:g} 倍）"))
    causal_fwd, full_fwd = ctx.best_times(lambda: ctx.bench("flash_attention", q, k, v, causal=True),
                                          lambda: ctx.bench("flash_attention", q, k, v, causal=False),
                                          within=CAUSAL_SHARE_ALLOWED)
    if causal_fwd > CAUSAL_SHARE_ALLOWED * full_fwd:
        problems.append(ctx.t(f"the causal forward takes {causal_fwd / full_fwd:.2f}× the time of the "
                              "full one: blocks past the diagonal should be skipped (about 0.5×)",
                              f"因果前向的用时是全注意力的 {causal_fwd / full_fwd:.2f} 倍：对角线之后的块应当跳过"
                              "（约 0.5 倍）"))
    summary = f"B={B}, H={H}, N={N}, d={D}, fp16: " + "; ".join(report)
    if problems:
        ctx.fail("; ".join(problems) + f" ({summary})")
    return summary


def _aot(ctx, kernel, signature, constexprs, **options):
    """ctx.aot, with a hint when the error sits inside a helper that the kernel calls."""
    try:
        return ctx.aot(kernel, signature, constexprs, **options)
    except CheckFailed as failure:
        ctx.fail(ctx.t(f"`{kernel}` does not compile for a GPU ({constexprs}): {failure}\nIf the caret (^) points at a "
                       "call of a helper such as `_attn_fwd_inner`, the error is inside that helper; a common cause is "
                       "a tl.dot whose operands have different dtypes (convert p or ds to the input dtype first)",
                       f"`{kernel}` 无法为 GPU 编译（{constexprs}）：{failure}\n如果脱字符（^）指向的是对某个辅助函数"
                       "（例如 `_attn_fwd_inner`）的调用，错误就在那个辅助函数里面；常见的原因是 tl.dot 的两个操作数 "
                       "dtype 不同（先把 p 或 ds 转换成输入的 dtype）"))


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


@lesson.check(1, "kernels compile for sm_80 and sm_90 GPUs (fp16, bf16)", needs=FWD_NEEDS + BWD_NEEDS,
              modes=("gpu", "interpreter", "structure"), compile_only=True, timeout=400,
              zh="kernel 能为 sm_80 和 sm_90 GPU 编译（fp16、bf16）")
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
    return ctx.t("shared memory on sm_90 (without the pipelining buffers): ",
                 "sm_90 上的共享内存（不含流水线缓冲区）：") + ", ".join(shared)


# ── memory safety (issue 24): every access inside the tensors, even one whose value is thrown away ──
def memory_calls(ctx, call):
    # N = 37 leaves ragged Q and K blocks, d = 12 padding lanes; the forward's o and lse feed the backward (lse as
    # the kernels lay it out: (B, H, N) contiguous, so not gapped)
    for causal in (False, True):
        q, k, v, do = (ctx.randn(2, 3, 37, 12, dtype=torch.float16) for _ in range(4))
        o, lse = call("attention_forward", q, k, v, causal, 0.3)
        call("attention_backward", do, q, k, v, o, AsGiven(lse), causal, 0.3)


add_memory_check(lesson, FWD_NEEDS + BWD_NEEDS, (), memory_calls)  # its kernels: the checks above say which

"""Checks of lesson 04: `tiled_attention_kernel` and `tiled_attention(q, k, v, causal=False, sm_scale=None)` for
(B, H, N, d) tensors: BLOCK_M×BLOCK_N tiles with tl.dot, strides, masks for any length and any d, causal masks
aligned bottom-right (query i sees keys j <= i + seqlen_k - seqlen_q; a row with no visible key gives 0), with the
blocks above the diagonal skipped, and autotuning.

One mistake, one check (COURSE_SPEC §5): each check tests its own idea on inputs that are easy in every other
respect. Only `forward_ragged` has non-causal lengths that are not multiples of the blocks (and a custom sm_scale),
only `head_dim_padded` a head dim that is not a power of two, only `strided_inputs` non-contiguous inputs, only the
causal checks a causal mask, and only `causal_unequal_lengths` a causal mask with seqlen_q ≠ seqlen_k. Batch sizes
above 1 everywhere it costs little, and in the non-causal checks heads too (B ≠ H): a wrong batch or head offset fails
`forward_divisible`. `forward_ragged` has a case where every dimension (B, H, seqlen_q, seqlen_k, d) is above 1 and
apart from the others and from the blocks, so that a stride, offset or length of one used for another's fails;
`strided_inputs` gives each tensor strides of its own, on every axis (a feature stride too), and q a head stride
unlike the output's. The online softmax's running max is `forward_divisible`'s: its last input has scores of 150
whose max moves by 120 from one K block to a later one (large_scores), where exp2 overflows unless the running max is
subtracted, and acc or l_i not rescaled, or a max that is not the running one, goes wrong or inf.

Block sizes (COURSE_SPEC §4): the notebook runs every problem smaller than its TUNE_FROM_SCORES (every check here
but `speed`) untuned, with one config per (head dim, causal, dtype) whose shape follows the head dim: a wide tile
(BLOCK_M < BLOCK_N: 64×128 on a GPU in fp16/bf16, 32×64 in fp32, 16×32 in the interpreter) for BLOCK_D <= 32 and a
tall one (BLOCK_M > BLOCK_N: 128×64, 64×32, 32×16) above. The checks that catch a mix-up of BLOCK_M and BLOCK_N run
both (head dims up to 32 and from 64).

Causal bounds (`hi`, `mask_start`) that are off by one key go wrong only for some remainders of the lengths modulo
the blocks, so the causal checks cover every one of them (causal_cases), compared with a mask built element by
element: for seqlen_q = seqlen_k every N modulo the largest block, for seqlen_q ≠ seqlen_k (both signs) every
diag = seqlen_k - seqlen_q modulo BLOCK_N, on which the bounds of every Q block depend (start_m·BLOCK_M + diag; with
BLOCK_M < BLOCK_N the Q blocks' starts add multiples of BLOCK_M, so diag modulo BLOCK_M is enough). On a GPU the
modulus is 128, a multiple of every block of the notebook's autotuning list too."""
import math
import re

import torch

from ..harness import TORCH_DOES_THE_WORK, CheckFailed, Lesson
from .memory_safety import add_memory_check

lesson = Lesson(
    "04_tiled_kernel_2d",
    graded=("tiled_attention_kernel", "tiled_attention"),
    kernels=("tiled_attention_kernel",),
    forbidden=TORCH_DOES_THE_WORK,
    structure_needs={"tiled_attention_kernel": ["tl.program_id", "tl.arange", "tl.load", "tl.store", "tl.dot",
                                                "tl.trans", "tl.where", "tl.max", "tl.sum"]},
)
NEEDS = ("tiled_attention_kernel", "tiled_attention")
KERNELS = ("tiled_attention_kernel",)


# ── references (computed here, in the judge) ────────────────────────────────────────────────────────────
def reference(q, k, v, causal=False, sm_scale=None, rows=None, n_q=None):
    """(float64 result, same-precision result) for q, k, v (B, H, ·, d), one batch element at a time.

    Causal masks are aligned bottom-right (query i sees key j when j <= i + seqlen_k - seqlen_q); a row that sees
    no key gives 0. The same-precision result is what a FlashAttention kernel in q's dtype computes: fp32 scores
    and softmax, probabilities rounded to the input dtype before P·V, fp32 sums, output rounded to the input dtype.
    With `rows` (indices into a q of `n_q` rows), q holds only those rows."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    n_k = k.shape[-2]
    hidden = None
    if causal:
        rows = torch.arange(q.shape[-2]) if rows is None else rows
        n_q = q.shape[-2] if n_q is None else n_q
        hidden = torch.arange(n_k)[None, :] > rows[:, None] + (n_k - n_q)
    exact = torch.empty(q.shape, dtype=torch.float64)
    same = torch.empty(q.shape, dtype=q.dtype)
    for b in range(q.shape[0]):
        for dtype in (torch.float64, torch.float32):
            s = (q[b].to(dtype) @ k[b].to(dtype).transpose(-1, -2)) * scale
            if hidden is not None:
                s = s.masked_fill(hidden, float("-inf"))
            p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row with every score -inf: NaN -> 0
            if dtype == torch.float64:
                exact[b] = p @ v[b].double()
            else:
                same[b] = (p.to(q.dtype).float() @ v[b].float()).to(q.dtype)
    return exact, same


def describe(ctx, q, k, causal, sm_scale=None, extra=""):
    B, H, n_q, d = q.shape
    shape = (f"B={B}, H={H}, seqlen_q={n_q}, seqlen_k={k.shape[2]}, d={d}, {q.dtype}, causal={causal}"
             + (f", sm_scale={sm_scale}" if sm_scale is not None else ""))
    return ctx.t(f"tiled_attention for {shape}", f"tiled_attention，{shape}") + extra


def floor_for(ctx, dtype):
    """Smallest allowed error: fp32 on a GPU goes through TF32 tensor cores (10-bit mantissa)."""
    if dtype == torch.float32:
        return 1e-2 if ctx.gpu else 1e-5
    return {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]


def expect_attention(ctx, q, k, v, causal=False, sm_scale=None, what=None, hint=None):
    """Call the student's tiled_attention and compare with float64 attention computed here; `hint(out)`: what a
    wrong `out` points at ('' for nothing), added to the message."""
    kwargs = {"causal": causal} if sm_scale is None else {"causal": causal, "sm_scale": sm_scale}
    out = ctx.call("tiled_attention", q, k, v, **kwargs)
    what = what or describe(ctx, q, k, causal, sm_scale)
    B, H, n_q, d = q.shape
    scores = B * H * n_q * k.shape[2]
    biggest_input = max(t.untyped_storage().nbytes() // t.element_size() for t in (q, k, v))
    if scores > 2 * biggest_input + 2 * q.numel() and ctx.last_info["largest_numel"] >= scores:
        ctx.fail(ctx.t(f"{what}: `tiled_attention` created a tensor of shape {ctx.last_info['largest_shape']} "
                       f"({ctx.last_info['largest_numel']} elements, at least B·H·seqlen_q·seqlen_k = {scores}): the "
                       "scores must stay inside your kernel, tile by tile, never in a torch tensor",
                       f"{what}：`tiled_attention` 创建了一个形状为 {ctx.last_info['largest_shape']} 的张量"
                       f"（{ctx.last_info['largest_numel']} 个元素，不少于 B·H·seqlen_q·seqlen_k = {scores}）：分数必须"
                       "留在你的 kernel 里，一个 tile 一个 tile 地算，绝不能放进 torch 张量"))
    exact, same = reference(q, k, v, causal, sm_scale)
    try:
        ctx.expect_close(out, exact, same_precision=same, what=what, floor=floor_for(ctx, q.dtype))
    except CheckFailed as failure:
        if hint is None:
            raise
        raise CheckFailed(str(failure) + hint(out)) from None
    return out


def residue_lengths(modulus, equal):
    """(seqlen_q, seqlen_k) pairs: N = modulus + 1 … 2·modulus when equal; otherwise, for every remainder r of
    diag = seqlen_k - seqlen_q modulo `modulus`, one pair with more keys than queries and one with more queries than
    keys (diag = r - 2·modulus: the first Q blocks see no key, and their unclamped bound would be below -BLOCK_N, where
    Triton's `//`, which rounds toward zero, no longer hides a missing clamp), their lengths spread over the
    remainders too."""
    if equal:
        return [(n, n) for n in range(modulus + 1, 2 * modulus + 1)]
    pairs = []
    for r in range(modulus):
        n_q = modulus + modulus // 4 + 3 * r
        pairs.append((n_q, n_q + (r or modulus)))             # diag ≡ r, positive
        n_k = modulus + modulus // 8 + 2 * r
        pairs.append((n_k + (2 * modulus - r), n_k))            # diag = r - 2·modulus ≡ r, negative
    return pairs


def causal_cases(ctx, equal):
    """[(B, H, seqlen_q, seqlen_k, d)] covering every remainder the causal bounds depend on, for both tile shapes
    (the module docstring), in fp16: on a GPU N modulo 128, and diag modulo 128 (tall 128×64 at d = 64) or 64 (wide
    64×128 at d = 32, whose Q blocks start at multiples of 64); in the interpreter (tall 32×16 at d = 64, wide 16×32
    at d = 16) N modulo 32 and diag modulo 16."""
    if ctx.gpu:
        sets = [(64, 128, 128), (32, 128, 128 if equal else 64)]
    else:
        sets = [(64, 32, 16), (16, 32, 16)]
    cases = []
    for d, modulus_equal, modulus_diag in sets:
        for i, (n_q, n_k) in enumerate(residue_lengths(modulus_equal if equal else modulus_diag, equal)):
            B = 2 if i % 8 == 0 else 1  # a few with a batch: the bounds do not depend on it, the offsets do
            cases.append((B, 1, n_q, n_k, d))
    return cases


def qkv(ctx, B, H, n_q, n_k, d, dtype=torch.float16):
    # q a little larger than k: peaked softmax rows, so the running max changes from block to block
    return (ctx.randn(B, H, n_q, d, dtype=dtype, scale=1.5), ctx.randn(B, H, n_k, d, dtype=dtype),
            ctx.randn(B, H, n_k, d, dtype=dtype))


LEVELS = (30.0, 150.0)  # the levels large_scores adds to the scores
LOG2E = 1 / math.log(2)


def large_scores(ctx, B, H, n, d, dtype):
    """q, k, v (B, H, n, d) whose scores q·k·sm_scale are ordinary ones plus a level that changes halfway through
    the keys: query rows 0..n/2-1 get +30 on the first half of the keys and +150 on the second, the other rows +150
    then +30 (q's columns 0 and 1 pick the level, k's columns carry it: 16·(150·√d/16)/√d = 150, exact in fp32 and,
    for d a power of 4, in TF32). exp2 of a base-2 score overflows fp32 past 128 (150·log2 e = 216), so only the
    subtracted running max keeps the kernel finite. With n a multiple of 2·BLOCK_N each half of the keys is whole
    K blocks, and the max moves by 120 from one block to a later one: in the first rows it jumps (acc or l_i not
    rescaled by alpha leaves the first blocks e^120 too heavy), in the others it falls (a max that is only this
    block's, not the running one, makes alpha = 2^173 = inf)."""
    q, k, v = qkv(ctx, B, H, n, n, d, dtype=torch.float64)
    column = 16.0
    low, high = (level * math.sqrt(d) / column for level in LEVELS)
    q[..., :2] = 0.0
    q[..., :n // 2, 0] = q[..., n // 2:, 1] = column
    k[..., :n // 2, 0], k[..., n // 2:, 0] = low, high
    k[..., :n // 2, 1], k[..., n // 2:, 1] = high, low
    return q.to(dtype), k.to(dtype), v.to(dtype)


# ── checks ────────────────────────────────────────────────────────────────────────────────────────────
@lesson.check(2, "non-causal attention, lengths that are multiples of the block", needs=NEEDS, kernels=KERNELS,
              zh="非因果注意力，长度是块大小的整数倍")
def forward_divisible(ctx):
    # Batch and heads both above 1 and different, in both tile shapes: an offset of the batch taken for the head's,
    # or a head offset left out, fails here.
    for shape, dtype in ctx.pick(
            gpu=[((2, 4, 512, 512, 64), torch.float16), ((2, 2, 1024, 1024, 128), torch.float16),
                 ((3, 2, 256, 256, 32), torch.float16), ((2, 3, 384, 384, 16), torch.float16)],
            interpreter=[((2, 3, 64, 64, 64), torch.float16), ((3, 2, 64, 64, 16), torch.float32)]):
        expect_attention(ctx, *qkv(ctx, *shape, dtype=dtype))
    # Then scores of 150 whose max moves by 120 from block to block (large_scores), in fp32; in the interpreter the
    # wide 16×32 tile (n = 64: two K blocks), on a GPU the tall 64×32 (n = 256: four on each level).
    B, H, n, d = ctx.pick(gpu=(2, 3, 256, 64), interpreter=(2, 3, 64, 16))
    q, k, v = large_scores(ctx, B, H, n, d, torch.float32)
    what = describe(ctx, q, k, False, extra=ctx.t(
        f"; scores up to {LEVELS[1]:g} (query rows 0..{n // 2 - 1}: +{LEVELS[0]:g} on keys 0..{n // 2 - 1}, "
        f"+{LEVELS[1]:g} on the rest; the other rows the other way round)",
        f"；分数高达 {LEVELS[1]:g}（查询行 0..{n // 2 - 1}：键 0..{n // 2 - 1} 加 {LEVELS[0]:g}，其余的键加 "
        f"{LEVELS[1]:g}；其余的行反过来）"))
    expect_attention(ctx, q, k, v, what=what, hint=lambda out: large_scores_hint(ctx, out))


def large_scores_hint(ctx, out):
    """What a wrong output of large_scores' input points at, the ordinary inputs being right."""
    if not (isinstance(out, torch.Tensor) and out.is_floating_point()):
        return ""
    if torch.isfinite(out).all():
        return ctx.t(f"; the ordinary inputs above are right, so look at what these scores change: in half of the "
                     f"rows the running max jumps by {LEVELS[1] - LEVELS[0]:g} in a later K block, so l_i (TODO 5) and "
                     "acc (TODO 6) must shrink by alpha; in the others it falls, and m_new must stay the running max "
                     "(TODO 5)",
                     f"；上面的普通输入是对的，所以看看这些分数改变了什么：一半的行里运行最大值在后面某个 K 块跳高了 "
                     f"{LEVELS[1] - LEVELS[0]:g}，所以 l_i（TODO 5）和 acc（TODO 6）都要乘以 alpha 缩小；另一半的行里"
                     "它会下降，m_new 必须保持为运行最大值（TODO 5）")
    return ctx.t(
        f"; the ordinary inputs above are right, but here the scores reach {LEVELS[1]:g} "
        f"({LEVELS[1] * LOG2E:.0f} in base 2), and 2^128 overflows fp32: every exp2 must take a score minus "
        "the running max, p = 2^(qk·qk_scale − m_safe) and alpha = 2^(m_i − m_safe), with m_new = "
        "max(m_i, row max of qk·qk_scale) the max of every block so far (TODO 5); in the rows whose level "
        f"falls from {LEVELS[1]:g} to {LEVELS[0]:g} in a later block, an m_new that is only that block's max "
        "makes alpha overflow too",
        f"；上面的普通输入是对的，但这里分数高达 {LEVELS[1]:g}（以 2 为底是 {LEVELS[1] * LOG2E:.0f}），而 2^128 "
        "就超出了 fp32 的范围：每个 exp2 都必须先减去运行最大值：p = 2^(qk·qk_scale − m_safe)，alpha = "
        "2^(m_i − m_safe)，其中 m_new = max(m_i, qk·qk_scale 的行最大值) 是到目前为止所有块的最大值（TODO 5）；"
        f"在后面某块的水平从 {LEVELS[1]:g} 降到 {LEVELS[0]:g} 的那些行里，如果 m_new 只是这一块的最大值，"
        "alpha 同样会溢出")


@lesson.check(2, "non-causal attention, ragged lengths (not multiples of any block), seqlen_q ≠ seqlen_k, sm_scale",
              needs=NEEDS, kernels=KERNELS,
              zh="非因果注意力，参差的长度（不是任何块大小的整数倍）、seqlen_q ≠ seqlen_k、自定义 sm_scale")
def forward_ragged(ctx):
    for shape, dtype, scale in ctx.pick(
            gpu=[((2, 3, 1000, 1000, 64), torch.float16, None), ((2, 3, 333, 777, 128), torch.float16, None),
                 ((1, 4, 1, 513, 64), torch.float16, None), ((3, 2, 1537, 100, 32), torch.float16, 0.3),
                 ((1, 2, 77, 1, 64), torch.float16, None), ((1, 1, 4097, 4095, 64), torch.float16, None)],
            # (2, 3, 50, 77, 64): every dimension above 1 and apart from the others and from the 32×16 tile, so an
            # offset, stride or length of one dimension used for another's gives a wrong result (issue 24)
            interpreter=[((2, 3, 50, 77, 64), torch.float32, None), ((2, 1, 45, 19, 16), torch.float16, 0.3),
                         ((2, 1, 1, 37, 16), torch.float16, None)]):
        expect_attention(ctx, *qkv(ctx, *shape, dtype=dtype), sm_scale=scale)


@lesson.check(1, "head dimensions that are not powers of two (d padded to BLOCK_D and masked)", needs=NEEDS,
              kernels=KERNELS,
              zh="不是 2 的幂的头维度（d 补齐到 BLOCK_D 并加掩码）")
def head_dim_padded(ctx):
    # Lengths are multiples of every block, so every K block runs in the unmasked stage, the last one included:
    # an unmasked-stage load without the d mask reads past the last key's row into the NaN around the tensor.
    for shape, dtype in ctx.pick(
            gpu=[((2, 3, 384, 384, 80), torch.float16), ((2, 4, 512, 512, 96), torch.float16),
                 ((2, 2, 256, 256, 40), torch.float16), ((2, 2, 128, 128, 24), torch.float16)],
            interpreter=[((2, 1, 64, 64, 40), torch.float32), ((2, 1, 32, 32, 24), torch.float16)]):
        expect_attention(ctx, *qkv(ctx, *shape, dtype=dtype))


@lesson.check(1, "non-contiguous inputs: (B, N, H, d) tensors transposed, q, k, v packed in one tensor", needs=NEEDS,
              kernels=KERNELS,
              zh="非连续输入：转置过的 (B, N, H, d) 张量，打包在一个张量里的 q、k、v")
def strided_inputs(ctx):
    # H > 1 everywhere: q's head stride (d in a (B, N, H, d) layout) then differs from the output's (N·d), and each of
    # the second layout's tensors has a feature stride of its own (q 2, k seqlen + 7, v 3, the output 1), so a stride
    # of one tensor or one axis used for another's reads the wrong elements (or the NaN in the gaps).
    for B, H, n, d, dtype, causal in ctx.pick(
            gpu=[(2, 4, 1024, 64, torch.float16, False), (2, 3, 512, 128, torch.float16, False),
                 (2, 2, 256, 32, torch.float32, False)],
            interpreter=[(2, 3, 32, 64, torch.float32, False), (3, 2, 64, 16, torch.float16, False)]):
        qkv_packed = ctx.randn(B, n, 3, H, d, dtype=dtype)        # a fused projection's output
        q, k, v = (t.transpose(1, 2) for t in qkv_packed.unbind(2))
        expect_attention(ctx, q, k, v, causal=causal, what=describe(
            ctx, q, k, causal, extra=ctx.t(f"; q, k, v = qkv.unbind(2) of a packed (B, N, 3, H, d) tensor, then "
                                           f".transpose(1, 2) (q strides {q.stride()})",
                                           f"；q, k, v = 打包的 (B, N, 3, H, d) 张量的 qkv.unbind(2)，再 "
                                           f".transpose(1, 2)（q 的 stride 为 {q.stride()}）")))
        x = ctx.randn(B, n + 7, H, 2 * d, dtype=dtype)           # (B, N, H, d), transposed, every other feature
        q = x[:, :n, :, ::2].transpose(1, 2)
        k = ctx.randn(B, H, d, n + 7, dtype=dtype)[..., :n].transpose(2, 3)  # features n+7 apart, rows side by side
        v = ctx.randn(B, H, n + 7, 3 * d, dtype=dtype)[:, :, :n, ::3]  # every third feature, rows 3·d apart
        expect_attention(ctx, q, k, v, causal=causal, what=describe(
            ctx, q, k, causal, extra=ctx.t(f"; q strides {q.stride()}, k strides {k.stride()}, v strides {v.stride()}",
                                           f"；q 的 stride 为 {q.stride()}，k 的为 {k.stride()}，v 的为 {v.stride()}")))


@lesson.check(2, "causal attention with seqlen_q = seqlen_k (every remainder of N modulo the blocks)", needs=NEEDS,
              kernels=KERNELS,
              zh="seqlen_q = seqlen_k 的因果注意力（N 对块大小取模的每一种余数）")
def causal(ctx):
    extra = ctx.pick(gpu=[(2, 3, 1000, 1000, 64, torch.float16), (1, 2, 1024, 1024, 128, torch.float16),
                          (2, 2, 64, 64, 32, torch.float16), (1, 1, 3, 3, 64, torch.float16)],
                     interpreter=[(2, 1, 3, 3, 32, torch.float16)])
    for *shape, dtype in extra + [case + (torch.float16,) for case in causal_cases(ctx, equal=True)]:
        expect_attention(ctx, *qkv(ctx, *shape, dtype=dtype), causal=True)


@lesson.check(1, "causal with seqlen_q ≠ seqlen_k (bottom-right: query i sees keys j ≤ i + seqlen_k − seqlen_q; "
                 "every remainder of the difference modulo the blocks); rows that see no key give 0", needs=NEEDS,
              kernels=KERNELS,
              zh="seqlen_q ≠ seqlen_k 的因果注意力（右下对齐：查询 i 看到键 j ≤ i + seqlen_k − seqlen_q；"
                 "两者之差对块大小取模的每一种余数）；看不到任何键的行输出 0")
def causal_unequal_lengths(ctx):
    extra = ctx.pick(gpu=[(1, 2, 300, 700, 64, torch.float16), (1, 2, 700, 300, 64, torch.float16),
                          (2, 2, 1, 1000, 128, torch.float16), (1, 3, 1000, 64, 32, torch.float16)],
                     interpreter=[(2, 1, 1, 40, 16, torch.float32)])
    for *shape, dtype in extra + [case + (torch.float16,) for case in causal_cases(ctx, equal=False)]:
        q, k, v = qkv(ctx, *shape, dtype=dtype)
        out = ctx.call("tiled_attention", q, k, v, causal=True)
        empty = shape[2] - shape[3]
        if empty > 0 and not (out[:, :, :empty].abs() <= 1e-6).all():
            bad = (~(out[:, :, :empty].abs() <= 1e-6)).nonzero()[0].tolist()
            nan = torch.isnan(out[tuple(bad)])
            ctx.fail(ctx.t(f"{describe(ctx, q, k, True)}: the first {empty} query rows see no key (bottom-right "
                           f"alignment), so their output must be 0; at index {tuple(bad)} it is "
                           f"{out[tuple(bad)].item():.4g}",
                           f"{describe(ctx, q, k, True)}：前 {empty} 个查询行看不到任何键（右下对齐），所以它们的输出"
                           f"必须是 0；但下标 {tuple(bad)} 处是 {out[tuple(bad)].item():.4g}")
                     + (empty_rows_nan_cause(ctx, shape[3], shape[4], dtype) if nan else ""))
        exact, same = reference(q, k, v, True)
        ctx.expect_close(out, exact, same_precision=same, what=describe(ctx, q, k, True), floor=floor_for(ctx, dtype))


def empty_rows_nan_cause(ctx, n_k, d, dtype):
    """Why rows that see no key came out NaN, told apart by one more call: seqlen_q = seqlen_k + 1, where row 0 sees no
    key but every bound of TODO 2 is >= 0 (start_m·BLOCK_M + 1 + diag >= 0 for diag = -1), so no key before key 0 is
    ever loaded. NaN there too: the -inf guard of TODO 5 (or a load past a row or past the end without a mask).
    Row 0 right there: the NaN of the longer problem comes from loads before key 0, i.e. a negative `mask_start`."""
    q, k, v = qkv(ctx, 1, 1, n_k + 1, n_k, d, dtype=dtype)
    probe = ctx.call("tiled_attention", q, k, v, causal=True)
    if not torch.isnan(probe[:, :, :1]).any() and not (probe[:, :, :1].abs() <= 1e-6).all():
        return ctx.t(" (NaN: from a 0/0, an exp2(-inf - (-inf)) or a load outside the tensor)",
                     "（NaN：来自 0/0、exp2(-inf - (-inf))，或者一次越出张量的加载）")
    if torch.isnan(probe[:, :, :1]).any():
        return ctx.t(f" (NaN also for seqlen_q = {n_k + 1}, seqlen_k = {n_k}, where row 0 sees no key and no bound "
                     "of the key range can be negative: a row that has seen only masked keys has a running max of "
                     "-inf, and exp2(-inf - (-inf)) is NaN; TODO 5 must subtract 0 for such rows (m_safe). Or a load "
                     "past the end of a row or of a tensor without a mask)",
                     f"（seqlen_q = {n_k + 1}、seqlen_k = {n_k} 时也是 NaN：这时第 0 行看不到任何键，而键范围的边界都不可能"
                     "是负数。只遇到过被掩码的键的行，运行最大值是 -inf，而 exp2(-inf - (-inf)) 是 NaN；TODO 5 对这样的行要改为"
                     "减去 0（m_safe）。也可能是某次没有掩码的加载越过了一行或整个张量的末尾）")
    return ctx.t(f" (NaN: with seqlen_q = {n_k + 1}, seqlen_k = {n_k} the row that sees no key gives 0, so the -inf "
                 "guard works; here the first Q blocks lie more than BLOCK_N rows above the first visible key, and "
                 "the NaN comes from keys before key 0, which the masked stage loads when `mask_start` is negative. "
                 "TODO 2 must clamp `mask_start` at 0: Triton's // rounds toward zero, so a bound below -BLOCK_N "
                 "gives a negative multiple of BLOCK_N)",
                 f"（NaN：seqlen_q = {n_k + 1}、seqlen_k = {n_k} 时，看不到任何键的那一行输出 0，说明 -inf 的防护没问题；"
                 "这里开头几个 Q 块位于第一个可见键上方超过 BLOCK_N 行的地方，NaN 来自键 0 之前的位置：`mask_start` "
                 "为负数时，加掩码的阶段会加载那里。TODO 2 必须把 `mask_start` 截到 0：Triton 的 // 向零取整，所以小于 "
                 "-BLOCK_N 的边界会得到 BLOCK_N 的一个负倍数）")


@lesson.check(1, "causal: the K/V blocks above the diagonal are skipped, never loaded", needs=NEEDS, kernels=KERNELS,
              zh="因果：对角线上方的 K/V 块被跳过，从不加载")
def causal_skips_blocks(ctx):
    # Keys from `start` on are NaN. A query row i < start cannot see them, and with any BLOCK_M, BLOCK_N ≤ 512 that
    # divide `start`, its Q block ends at or before `start`, so a kernel that stops at the diagonal never loads them.
    # A kernel that loads them and multiplies by a probability of 0 gets 0·NaN = NaN in those rows. That NaN blames
    # the key range only once the same input without NaN keys gives the right output: a NaN the online update makes
    # (TODO 5) or any other wrong causal output is reported as such, not as blocks loaded above the diagonal.
    B, H, n, start = ctx.pick(gpu=(2, 2, 2048, 1024), interpreter=(2, 1, 160, 128))
    for d in (64, 16):  # both tile shapes: tall (BLOCK_M > BLOCK_N) and wide
        q, k, v = qkv(ctx, B, H, n, n, d)
        plain = ctx.t(f"tiled_attention(causal=True) for B={B}, H={H}, seqlen={n}, d={d}, fp16 (no key set to NaN "
                      "yet: this check compares the output with NaN keys only once this one is right; the causal check "
                      "tests the same)",
                      f"tiled_attention(causal=True)，B={B}, H={H}, seqlen={n}, d={d}, fp16（还没有把任何键设为 NaN："
                      "只有这里的输出正确之后，这个检查才会用 NaN 键去比较；因果检查测的是同一件事）")
        exact, same = reference(q, k, v, True)
        ctx.expect_close(ctx.call("tiled_attention", q, k, v, causal=True), exact, same_precision=same, what=plain,
                         floor=floor_for(ctx, q.dtype))
        k_nan, v_nan = k.clone(), v.clone()
        k_nan[:, :, start:] = float("nan")
        v_nan[:, :, start:] = float("nan")
        out = ctx.call("tiled_attention", q, k_nan, v_nan, causal=True)
        got = out[:, :, :start]
        what = ctx.t(f"tiled_attention(causal=True) for B={B}, H={H}, seqlen={n}, d={d}, fp16, with k and v set to "
                     f"NaN from key {start} on",
                     f"tiled_attention(causal=True)，B={B}, H={H}, seqlen={n}, d={d}, fp16，k 和 v 从键 {start} "
                     "起设为 NaN")
        if torch.isnan(got).any():
            row = int(torch.isnan(got).nonzero()[0][2])
            ctx.fail(ctx.t(f"{what}: row {row} came out NaN, but rows before {start} cannot see those keys, and "
                           "without the NaN keys the output is right. So your kernel loads K/V blocks that lie "
                           "entirely above the diagonal (0·NaN = NaN shows it): the loop over K blocks must stop at "
                           "`hi`, one past the last key the Q block can see (TODO 2), so that causal attention does "
                           "about half the work",
                           f"{what}：第 {row} 行的结果是 NaN，可是 {start} 之前的行看不到这些键，而且不含 NaN 键时输出是"
                           "对的。所以你的 kernel 加载了完全位于对角线上方的 K/V 块（0·NaN = NaN 暴露了这一点）：对 K 块"
                           "的循环必须停在 `hi`，即这个 Q 块能看到的最后一个键的下一个位置（TODO 2），这样因果注意力才"
                           "只做大约一半的工作"))
        exact, same = reference(q[:, :, :start], k[:, :, :start], v[:, :, :start], True)
        ctx.expect_close(got, exact, same_precision=same,
                         what=what + ctx.t(f", rows 0..{start - 1}", f"，第 0..{start - 1} 行"),
                         floor=floor_for(ctx, q.dtype))


@lesson.check(1, "fp32 inputs (fp32 output; TF32 tensor-core error allowed on a GPU)", needs=NEEDS, kernels=KERNELS,
              zh="fp32 输入（fp32 输出；在 GPU 上允许 TF32 张量核心的误差）")
def fp32_inputs(ctx):
    for shape, causal in ctx.pick(gpu=[((2, 3, 1024, 1024, 64), False), ((2, 2, 512, 512, 128), False),
                                       ((2, 2, 256, 256, 16), False)],
                                  interpreter=[((2, 1, 64, 64, 32), False), ((2, 1, 32, 32, 64), False)]):
        expect_attention(ctx, *qkv(ctx, *shape, dtype=torch.float32), causal=causal)


@lesson.check(1, "bf16 inputs (GPU only: the interpreter's bf16 tl.dot is broken)", needs=NEEDS, kernels=KERNELS,
              modes=("gpu",),
              zh="bf16 输入（仅 GPU：解释器的 bf16 tl.dot 有问题）")
def bf16_inputs(ctx):
    for shape, causal in [((2, 3, 1000, 1000, 64), False), ((1, 2, 700, 300, 128), True), ((1, 2, 257, 513, 96), True)]:
        expect_attention(ctx, *qkv(ctx, *shape, dtype=torch.bfloat16), causal=causal)


def _expect_rows(ctx, q, k, v, causal, out, rows_per_head=96):
    """Compare a sample of rows of a large output with float64 attention of just those rows."""
    B, H, n_q, d = q.shape
    gen = torch.Generator().manual_seed(ctx.seed)
    for b, h in [(0, 0), (B - 1, H - 1)]:
        rows = torch.cat([torch.arange(32), torch.randint(0, n_q, (rows_per_head,), generator=gen),
                          torch.arange(n_q - 32, n_q)]).unique()
        exact, same = reference(q[b:b + 1, h:h + 1, rows], k[b:b + 1, h:h + 1], v[b:b + 1, h:h + 1], causal,
                                rows=rows, n_q=n_q)
        ctx.expect_close(out[b:b + 1, h:h + 1, rows], exact, same_precision=same, floor=floor_for(ctx, q.dtype),
                         what=describe(ctx, q, k, causal,
                                       extra=ctx.t(f"; rows {rows.tolist()[:4]}… of batch {b}, head {h}",
                                                   f"；批次 {b}、头 {h} 的第 {rows.tolist()[:4]}… 行")))


@lesson.check(1, "long sequences (4k–8k), causal and not (GPU only)", needs=NEEDS, kernels=KERNELS, modes=("gpu",),
              timeout=400,
              zh="长序列（4k–8k），因果与非因果（仅 GPU）")
def large_shapes(ctx):
    for shape, causal in [((2, 8, 4096, 4096, 64), False), ((2, 8, 4096, 4096, 64), True),
                          ((1, 4, 8191, 8191, 128), True), ((1, 2, 2000, 8000, 128), True)]:
        q, k, v = qkv(ctx, *shape)
        out = ctx.call("tiled_attention", q, k, v, causal=causal)
        _expect_rows(ctx, q, k, v, causal, out)


SPEED_NEEDED = 0.3  # at least this × the reference solution's speed


@lesson.check(1, f"speed: at least {SPEED_NEEDED:g}× the reference solution (B=4, H=16, N=4096, d=64, fp16, GPU only)",
              needs=NEEDS, kernels=KERNELS, modes=("gpu",), timeout=400,
              zh=f"速度：至少达到参考实现的 {SPEED_NEEDED:g}×（B=4, H=16, N=4096, d=64, fp16，仅 GPU）")
def speed(ctx):
    B, H, n, d = 4, 16, 4096, 64
    q, k, v = qkv(ctx, B, H, n, n, d)
    ctx.load_reference()
    ctx.warm_up("tiled_attention", q, k, v, key="reference")  # compiles and autotunes beside the call below
    out = ctx.call("tiled_attention", q, k, v)  # correct first (and no torch attention inside)
    _expect_rows(ctx, q, k, v, False, out)
    student_ms, reference_ms = ctx.bench_against_reference("tiled_attention", q, k, v,
                                                           slowdown_allowed=1 / SPEED_NEEDED)
    flops = 4 * B * H * n * n * d
    ratio = reference_ms / student_ms
    report = ctx.t(f"your kernel {student_ms:.3f} ms ({flops / student_ms / 1e9:.0f} TFLOP/s), the reference "
                   f"{reference_ms:.3f} ms ({flops / reference_ms / 1e9:.0f} TFLOP/s): {ratio:.2f}× the reference's "
                   "speed",
                   f"你的 kernel {student_ms:.3f} ms（{flops / student_ms / 1e9:.0f} TFLOP/s），参考实现 "
                   f"{reference_ms:.3f} ms（{flops / reference_ms / 1e9:.0f} TFLOP/s）：速度是参考实现的 {ratio:.2f}×")
    if ratio < SPEED_NEEDED:
        ctx.fail(report + ctx.t(f"; at least {SPEED_NEEDED:g}× is needed. Check that the K/V loop has no work it "
                                "doesn't need (masks only in the last stage), that tl.dot gets fp16 operands "
                                "(p.to(v.dtype)), and the autotune configs",
                                f"；至少需要 {SPEED_NEEDED:g}×。请检查：K/V 循环里没有多余的工作（掩码只放在最后一个"
                                "阶段），tl.dot 拿到的是 fp16 操作数（p.to(v.dtype)），以及自动调优的配置"))
    return report


KERNEL_ARGS = (["Q", "K", "V", "Out", "qk_scale"]
               + [f"stride_{t}{a}" for t, axes in (("q", "zhmk"), ("k", "zhnk"), ("v", "zhnk"), ("o", "zhmk"))
                  for a in axes]
               + ["H", "N_CTX_Q", "N_CTX_K", "HEAD_DIM", "BLOCK_D", "IS_CAUSAL", "BLOCK_M", "BLOCK_N"])


@lesson.check(1, "tiled_attention_kernel compiles for sm_80 and sm_90 GPUs (fp16 and bf16, d = 64 and 80)",
              needs=NEEDS, modes=("gpu", "interpreter", "structure"), compile_only=True, timeout=300,
              zh="tiled_attention_kernel 能为 sm_80 和 sm_90 GPU 编译（fp16 和 bf16，d = 64 和 80）")
def compiles(ctx):
    notes = []
    for dtype, head_dim, block_d, causal in (("fp16", 64, 64, True), ("bf16", 80, 128, False)):
        signature = {name: "i32" for name in KERNEL_ARGS}
        signature.update({"Q": f"*{dtype}", "K": f"*{dtype}", "V": f"*{dtype}", "Out": f"*{dtype}", "qk_scale": "fp32"})
        constexprs = {"HEAD_DIM": head_dim, "BLOCK_D": block_d, "IS_CAUSAL": causal, "BLOCK_M": 128, "BLOCK_N": 64}
        signature.update({name: "constexpr" for name in constexprs})
        try:
            ctx.aot("tiled_attention_kernel", signature, constexprs, num_warps=4, num_stages=3)
        except Exception as error:
            text = str(error)
            if re.search(r"KeyError|is\snot\sin\slist", text):  # a parameter name the check passes is missing
                ctx.fail(ctx.t(f"{text}\n(the check compiles the kernel with the notebook's parameter names "
                               f"{', '.join(KERNEL_ARGS)}: keep the kernel's signature as given)",
                               f"{text}\n（这个检查用笔记本里的参数名 {', '.join(KERNEL_ARGS)} 编译 kernel："
                               "请保持 kernel 的签名不变）"))
            raise
        notes.append(f"{dtype}, d={head_dim}, causal={causal}")
    return ctx.t("compiled with a 128×64 tile for sm_80 and sm_90: ", "已用 128×64 的 tile 为 sm_80 和 sm_90 编译：") \
        + "; ".join(notes)


# ── memory safety (issue 24): every access inside the tensors, even one whose value is thrown away ──
def memory_calls(ctx, call):
    # ragged lengths both ways, a head dim below a power of two, causal with more queries than keys
    for causal, (n_q, n_k) in ((False, (21, 37)), (True, (37, 21))):
        q, k, v = ctx.randn(2, 3, n_q, 12), ctx.randn(2, 3, n_k, 12), ctx.randn(2, 3, n_k, 12)
        call("tiled_attention", q, k, v, causal=causal)


add_memory_check(lesson, NEEDS, KERNELS, memory_calls)

"""Checks of lesson 02: `online_softmax(x, block)` and `tiled_attention(q, k, v, block_m, block_n, causal)`.

Both are plain PyTorch: in gpu mode the tensors live on the GPU, in interpreter mode on the CPU; structure
mode checks the code's shape only (COURSE_SPEC §4). `tiled_attention` must never create an M×N tensor: the
worker records the largest tensor any aten op creates during the call, and the torch-level matrix products it
made (with shapes), which is how the causal check sees that fully masked blocks were skipped.
"""
import math

import torch

from ..harness import Lesson

lesson = Lesson(
    "02_tiled_simulator",
    graded=("online_softmax", "tiled_attention"),
    forbidden=("softmax", "log_softmax", "scaled_dot_product_attention", "_scaled_dot_product_attention_math"),
    structure_needs={"online_softmax": ["block", "m", "l"],
                     "tiled_attention": ["block_m", "block_n", "causal", "m_i", "l_i", "acc"]},
    pytorch_only=True,
)
PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "baddbmm", "addmm", "tensordot"}


# ── online_softmax ──────────────────────────────────────────────────────────────────────────────────
def expect_softmax(ctx, x, block, what=None):
    kwargs = {} if block is None else {"block": block}
    out = ctx.call("online_softmax", x, **kwargs)
    how = "the default block" if block is None else f"block={block}"
    ctx.expect_close(out, torch.softmax(x.double(), dim=-1),
                     same_precision=torch.softmax(x.float(), dim=-1).to(x.dtype),
                     what=what or f"online_softmax(x, {how}) for x of shape {tuple(x.shape)}, {x.dtype}")


@lesson.check(1, "online_softmax over several whole blocks", needs=("online_softmax",))
def online_softmax_blocks(ctx):
    for shape, block in ctx.pick(gpu=[((64, 1024), 128), ((4, 8, 256), 32), ((16, 512), None)],
                                 interpreter=[((4, 256), 64), ((3, 5, 96), 32), ((2, 512), None)]):
        expect_softmax(ctx, ctx.randn(*shape, scale=3.0), block)


@lesson.check(1, "online_softmax when the row length is not a multiple of the block (and fp16)",
              needs=("online_softmax",))
def online_softmax_ragged(ctx):
    cases = ctx.pick(
        gpu=[((3, 1), 64, torch.float32), ((5, 100), 32, torch.float32), ((2, 7), 4, torch.float32),
             ((4, 3, 1000), 128, torch.float32), ((6, 77), 16, torch.float16), ((9, 333), 64, torch.float16)],
        interpreter=[((3, 1), 64, torch.float32), ((5, 100), 32, torch.float32), ((2, 7), 4, torch.float32),
                     ((4, 3, 130), 64, torch.float32), ((6, 77), 16, torch.float16)])
    for shape, block, dtype in cases:
        expect_softmax(ctx, ctx.randn(*shape, dtype=dtype, scale=3.0), block)


@lesson.check(1, "online_softmax of huge values (±1e4) whose maximum jumps from block to block",
              needs=("online_softmax",))
def online_softmax_stable(ctx):
    expect_softmax(ctx, ctx.randn(4, 200, scale=1e4), 64)
    n = 150
    rising = torch.arange(n, dtype=torch.float64) * 60.0 - 4000.0 + ctx.randn(3, n, dtype=torch.float64)
    for name, x in [("rising", rising), ("falling", rising.flip(-1)), ("all near -1e4", rising - 1e4)]:
        expect_softmax(ctx, x.float(), 32, what=f"online_softmax(x, block=32) for {name} rows of shape {tuple(x.shape)} "
                                                f"(values {x.min().item():.0f}…{x.max().item():.0f})")


# ── tiled_attention ────────────────────────────────────────────────────────────────────────────────
def causal_mask(M, N):
    """True where a key is hidden: top-left alignment, query i sees keys j <= i (as SDPA's is_causal)."""
    return torch.ones(M, N, dtype=torch.bool).triu(1)


def exact_attention(q, k, v, causal):
    """(out, lse) in float64 from the given (rounded) inputs."""
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(causal_mask(q.shape[-2], k.shape[-2]), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse[..., None]) @ v.double(), lse


def same_precision_attention(q, k, v, causal):
    """What PyTorch gets with products in the input's precision and softmax in float32: the error budget."""
    s = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(causal_mask(q.shape[-2], k.shape[-2]), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).to(q.dtype)
    return p @ v, lse


def describe(q, k, block_m, block_n, causal):
    blocks = "default blocks" if block_m is None else f"block_m={block_m}, block_n={block_n}"
    return (f"q {tuple(q.shape)}, k/v {tuple(k.shape)} ({q.dtype}), {blocks}"
            + (", causal=True" if causal else ""))


def call_attention(ctx, q, k, v, block_m, block_n, causal):
    kwargs = {} if block_m is None else {"block_m": block_m, "block_n": block_n}
    if causal:
        kwargs["causal"] = True
    result = ctx.call("tiled_attention", q, k, v, **kwargs)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        ctx.fail(f"tiled_attention must return a pair (out, lse), got {type(result).__name__}"
                 + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else ""))
    return result


def expect_attention(ctx, q, k, v, block_m=None, block_n=None, causal=False, check_out=True, check_lse=False):
    out, lse = call_attention(ctx, q, k, v, block_m, block_n, causal)
    exact_out, exact_lse = exact_attention(q, k, v, causal)
    same_out, same_lse = same_precision_attention(q, k, v, causal)
    where = describe(q, k, block_m, block_n, causal)
    if check_out:
        ctx.expect_close(out, exact_out, same_precision=same_out, what=f"out of tiled_attention for {where}")
    if check_lse:
        if not isinstance(lse, torch.Tensor) or lse.dtype != torch.float32:
            got = lse.dtype if isinstance(lse, torch.Tensor) else type(lse).__name__
            ctx.fail(f"lse of tiled_attention for {where}: expected a float32 tensor of shape {tuple(exact_lse.shape)} "
                     f"(one natural-log log-sum-exp per query row), got {got}")
        ctx.expect_close(lse, exact_lse, same_precision=same_lse, factor=8.0,
                         floor=1e-5 if q.dtype == torch.float32 and not ctx.gpu else 1e-3,
                         what=f"lse (natural log of the softmax denominator, per query row) of tiled_attention for {where}")
    return out, lse


def qkv(ctx, batch, M, N, d, dtype=torch.float32, scale=1.0):
    return (ctx.randn(*batch, M, d, dtype=dtype, scale=scale), ctx.randn(*batch, N, d, dtype=dtype, scale=scale),
            ctx.randn(*batch, N, d, dtype=dtype))


NEEDS = ("tiled_attention",)


@lesson.check(1, "tiled_attention when M and N are multiples of the blocks", needs=NEEDS)
def attention_divisible(ctx):
    for batch, M, N, d, bm, bn in ctx.pick(
            gpu=[((2, 4), 512, 512, 64, 64, 64), ((3,), 256, 1024, 128, 128, 64), ((), 1024, 256, 64, 32, 128)],
            interpreter=[((2,), 128, 128, 64, 32, 32), ((), 64, 192, 32, 32, 64), ((2, 2), 128, 64, 16, 64, 16)]):
        expect_attention(ctx, *qkv(ctx, batch, M, N, d, scale=1.5), bm, bn)


@lesson.check(2, "tiled_attention for any M, N (partial last blocks, M != N, N=1), d = 40 or 100, fp16/bf16/fp32",
              needs=NEEDS)
def attention_ragged(ctx):
    cases = ctx.pick(
        gpu=[((2, 3), 1000, 1000, 64, None, None, torch.float16), ((2,), 333, 777, 40, 64, 32, torch.float32),
             ((4,), 777, 129, 100, 128, 64, torch.float16), ((), 1, 300, 64, 64, 64, torch.float32),
             ((3,), 300, 1, 40, 64, 64, torch.float32), ((2, 2), 200, 301, 80, 32, 64, torch.bfloat16)],
        interpreter=[((2,), 100, 100, 40, 32, 16, torch.float32), ((), 70, 150, 100, 64, 64, torch.float16),
                     ((2, 2), 130, 45, 40, 16, 32, torch.float32), ((), 1, 90, 64, None, None, torch.float32),
                     ((3,), 50, 1, 24, 64, 64, torch.float16), ((), 37, 70, 40, 16, 16, torch.bfloat16)])
    for batch, M, N, d, bm, bn, dtype in cases:
        expect_attention(ctx, *qkv(ctx, batch, M, N, d, dtype=dtype, scale=1.5), bm, bn)


@lesson.check(1, "tiled_attention returns lse = natural-log log-sum-exp of each row's scaled scores (float32)",
              needs=NEEDS)
def attention_lse(ctx):
    for batch, M, N, d, bm, bn, dtype, causal in ctx.pick(
            gpu=[((2, 2), 1000, 777, 64, 64, 64, torch.float16, False), ((3,), 333, 333, 40, 64, 32, torch.float32, True),
                 ((), 1, 100, 100, 64, 64, torch.float32, False)],
            interpreter=[((2,), 100, 70, 40, 32, 16, torch.float32, False), ((), 90, 90, 64, 32, 32, torch.float16, True),
                         ((), 1, 50, 100, 64, 64, torch.float32, False)]):
        expect_attention(ctx, *qkv(ctx, batch, M, N, d, dtype=dtype, scale=1.5), bm, bn, causal,
                         check_out=False, check_lse=True)


@lesson.check(2, "tiled_attention with causal=True (query i sees keys j <= i), M = N and M != N",
              needs=NEEDS)
def attention_causal(ctx):
    for batch, M, N, d, bm, bn, dtype in ctx.pick(
            gpu=[((2, 4), 1000, 1000, 64, 64, 64, torch.float16), ((2,), 333, 777, 40, 64, 32, torch.float32),
                 ((3,), 777, 129, 100, 32, 64, torch.float16), ((), 1, 300, 64, 64, 64, torch.float32),
                 ((2,), 300, 1, 64, None, None, torch.float32)],
            interpreter=[((2,), 100, 100, 40, 32, 16, torch.float32), ((), 50, 130, 100, 16, 32, torch.float16),
                         ((2,), 130, 50, 40, 32, 16, torch.float32), ((), 1, 40, 64, None, None, torch.float32),
                         ((), 40, 1, 24, 16, 16, torch.float32)]):
        expect_attention(ctx, *qkv(ctx, batch, M, N, d, dtype=dtype, scale=1.5), bm, bn, causal=True)


def product_work(info):
    """(number of torch matrix products, their multiply-adds) recorded during the last call."""
    calls, work = 0, 0
    for op, shapes, count in info["forbidden"]:
        if op not in PRODUCTS:
            continue
        calls += count
        if len(shapes) >= 2 and len(shapes[0]) >= 2 and len(shapes[1]) >= 2:
            a, b = shapes[0], shapes[1]
            work += count * math.prod(a) * b[-1]
        elif shapes:
            work += count * math.prod(shapes[0])
    return calls, work


@lesson.check(1, "causal=True skips the K/V blocks that lie entirely above the diagonal", needs=NEEDS)
def causal_skips_blocks(ctx):
    n, block = ctx.pick(gpu=(1024, 64), interpreter=(512, 64))
    q, k, v = qkv(ctx, (2,), n, n, 64)
    call_attention(ctx, q, k, v, block, block, False)
    full_calls, full_work = product_work(ctx.last_info)
    expect_attention(ctx, q, k, v, block, block, causal=True)
    causal_calls, causal_work = product_work(ctx.last_info)
    if full_calls == 0:
        ctx.fail("tiled_attention made no torch matrix products (`@`, torch.matmul, einsum), so this check cannot "
                 "count the tiles it computed; compute each score tile as `q_blk @ k_blk.transpose(-1, -2)` and "
                 "each output update as `p @ v_blk`")
    tiles = n // block
    visited = tiles * (tiles + 1) // 2
    expected = visited / tiles ** 2
    ratio = min(causal_calls / full_calls, causal_work / max(full_work, 1))
    if ratio > (expected + 1) / 2:
        ctx.fail(f"for M = N = {n} with {block}×{block} blocks, causal=True made {causal_calls} matrix products "
                 f"({causal_work:.3g} multiply-adds) and causal=False {full_calls} ({full_work:.3g}): "
                 f"{ratio:.0%} of the work, where skipping the blocks entirely above the diagonal leaves "
                 f"{visited} of {tiles ** 2} tiles ({expected:.0%}). A K/V block whose first key comes after the "
                 "Q block's last query is fully masked: don't compute it")
    return f"causal computed {ratio:.0%} of the non-causal products (ideal {expected:.0%})"


@lesson.check(1, "tiled_attention never creates an M×N tensor", needs=NEEDS)
def no_full_score_matrix(ctx):
    n = ctx.pick(gpu=1024, interpreter=512)
    for dtype, causal, blocks in [(torch.float32, False, (64, 64)), (torch.float16, True, (None, None))]:
        q, k, v = qkv(ctx, (2,), n, n, 64, dtype=dtype)
        call_attention(ctx, q, k, v, *blocks, causal)
        info = ctx.last_info
        if info["largest_numel"] >= n * n:
            ctx.fail(f"for q, k, v of shape {tuple(q.shape)}{' with causal=True' if causal else ''}, tiled_attention "
                     f"created a tensor of shape {tuple(info['largest_shape'])} ({info['largest_numel']} elements, "
                     f"at least M×N = {n * n}): the point of tiling is that only block_m×block_n score tiles "
                     "(and per-row vectors) ever exist. Look for q @ k.transpose(...) on the whole problem, or a "
                     "full M×N causal mask: build each tile's mask from its row and column offsets")
    return f"largest tensor created: {info['largest_numel']} elements, shape {tuple(info['largest_shape'])}"

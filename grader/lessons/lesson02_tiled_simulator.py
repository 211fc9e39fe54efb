"""Checks of lesson 02: `online_softmax(x, block)`, `tiled_attention(q, k, v, block_m, block_n, causal)` and
`tiled_attention_backward(q, k, v, out, lse, dout, block_m, block_n, causal)`.

All three are plain PyTorch: in gpu mode the tensors live on the GPU, in interpreter and structure mode on the CPU
(the checks run for real in every mode). Neither `tiled_attention` nor `tiled_attention_backward` may create an M×N
tensor: the worker records the largest tensor any aten op creates during the call, and the torch-level matrix
products it made (with shapes), which is how the skip checks see that fully masked tiles were not computed.

One mistake, one check (COURSE_SPEC §5): only the ragged checks use lengths that are not multiples of the blocks
(and fp16/bf16); the causal checks use fp32, and `*_causal` uses lengths that are multiples of the blocks, with block
sizes that are coprime (4×3, 3×4, 3×5), so that the block boundaries fall on every residue of the other block size;
`*_causal_ragged` then runs M and N over every residue modulo both block sizes of 4×3 and 3×4 blocks, for M = N, M < N
and M > N (every_residue). Both compare with a brute-force mask (key j hidden from query i when j > i), never
with the bounds a kernel computes. The backward's inputs `out` and `lse` come from the judge's float64 forward, so a
wrong forward costs no backward points.
Huge values: online_softmax_stable (±1e4, a max that jumps by ~2000 from block to block) for online_softmax;
one case of attention_divisible for the forward's running max and one of backward_dv for P = exp(s - lse) (scores
of ±300 and more, whose max grows from K/V block to block: huge_scores). Every other check keeps scores of a few units.
Shapes: one case of attention_divisible and of the backward's three divisible checks gives every size its own value
(two batch dims, M, N, d, block_m, block_n, and the numbers of Q and K/V blocks: all different and above 1), so
that no mix-up of two of them can pass there.
"""
import ast
import functools
import math

import torch

from .. import notebook, structure
from ..harness import CheckFailed, Lesson

lesson = Lesson(
    "02_tiled_simulator",
    graded=("online_softmax", "tiled_attention", "tiled_attention_backward"),
    forbidden=("softmax", "log_softmax", "scaled_dot_product_attention", "_scaled_dot_product_attention_math"),
    structure_needs={"online_softmax": ["block", "m", "l"],
                     "tiled_attention": ["block_m", "block_n", "causal", "m_i", "l_i", "acc"],
                     "tiled_attention_backward": ["block_m", "block_n", "causal", "lse", "delta"]},
    pytorch_only=True,
)
PRODUCTS = {"matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "einsum", "baddbmm", "addmm", "tensordot"}


# ── online_softmax ──────────────────────────────────────────────────────────────────────────────────
def expect_softmax(ctx, x, block, what=None):
    kwargs = {} if block is None else {"block": block}
    out = ctx.call("online_softmax", x, **kwargs)
    how = ctx.t("the default block", "默认块大小") if block is None else f"block={block}"
    ctx.expect_close(out, torch.softmax(x.double(), dim=-1),
                     same_precision=torch.softmax(x.float(), dim=-1).to(x.dtype),
                     what=what or ctx.t(f"online_softmax(x, {how}) for x of shape {tuple(x.shape)}, {x.dtype}",
                                        f"online_softmax(x, {how})，x 的形状 {tuple(x.shape)}，{x.dtype}"))


@lesson.check(1, "online_softmax over several whole blocks", needs=("online_softmax",),
              zh="由若干完整块组成的行上的 online_softmax")
def online_softmax_blocks(ctx):
    # (3, 5, 128) in blocks of 32: every size, and the number of blocks (4), differs from the others
    for shape, block in ctx.pick(gpu=[((64, 1024), 128), ((4, 6, 256), 32), ((16, 512), None)],
                                 interpreter=[((4, 256), 64), ((3, 5, 128), 32), ((2, 512), None)]):
        expect_softmax(ctx, ctx.randn(*shape, scale=3.0), block)


@lesson.check(1, "online_softmax when the row length is not a multiple of the block (and fp16)",
              needs=("online_softmax",),
              zh="行长不是块大小的倍数时的 online_softmax（以及 fp16）")
def online_softmax_ragged(ctx):
    cases = ctx.pick(
        gpu=[((3, 1), 64, torch.float32), ((5, 100), 32, torch.float32), ((2, 7), 4, torch.float32),
             ((4, 3, 1000), 128, torch.float32), ((6, 77), 16, torch.float16), ((9, 333), 64, torch.float16)],
        interpreter=[((3, 1), 64, torch.float32), ((5, 100), 32, torch.float32), ((2, 7), 4, torch.float32),
                     ((4, 3, 130), 64, torch.float32), ((6, 77), 16, torch.float16)])
    for shape, block, dtype in cases:
        expect_softmax(ctx, ctx.randn(*shape, dtype=dtype, scale=3.0), block)


@lesson.check(1, "online_softmax of huge values (±1e4) whose maximum jumps from block to block",
              needs=("online_softmax",),
              zh="超大数值（±1e4）、最大值在块与块之间跳变时的 online_softmax")
def online_softmax_stable(ctx):
    expect_softmax(ctx, ctx.randn(4, 200, scale=1e4), 64)
    n = 150
    rising = torch.arange(n, dtype=torch.float64) * 60.0 - 4000.0 + ctx.randn(3, n, dtype=torch.float64)
    for name, x in [(ctx.t("rising", "递增"), rising), (ctx.t("falling", "递减"), rising.flip(-1)),
                    (ctx.t("all near -1e4", "全在 -1e4 附近"), rising - 1e4)]:
        values = f"{x.min().item():.0f}…{x.max().item():.0f}"
        expect_softmax(ctx, x.float(), 32, what=ctx.t(
            f"online_softmax(x, block=32) for {name} rows of shape {tuple(x.shape)} (values {values})",
            f"online_softmax(x, block=32)，{name}的行，形状 {tuple(x.shape)}（取值 {values}）"))


# ── references (float64, the whole score matrix: fine for the small inputs of the checks) ─────────────
def causal_mask(M, N):
    """True where a key is hidden, by brute force over every (query, key) pair: top-left alignment, query i sees
    keys j <= i (as SDPA's is_causal). Never the bounds a kernel computes."""
    return torch.arange(N)[None, :] > torch.arange(M)[:, None]


def attention_graph(q, k, v, causal, work=torch.float64):
    """(out, lse) of attention with scores and softmax in `work`, the products in the inputs' own dtype when `work`
    is not float64 (what PyTorch gets in that precision: the error budget of the checks)."""
    if work == torch.float64:
        q, k, v = q.double(), k.double(), v.double()
    s = (q @ k.transpose(-1, -2)).to(work) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(causal_mask(q.shape[-2], k.shape[-2]).to(s.device), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    return p.to(v.dtype) @ v, lse


def exact_attention(q, k, v, causal):
    """(out, lse) in float64 from the given (rounded) inputs."""
    return attention_graph(q, k, v, causal)


def same_precision_attention(q, k, v, causal):
    """What PyTorch gets with products in the input's precision and softmax in float32: the error budget."""
    return attention_graph(q, k, v, causal, work=torch.float32)


def attention_gradients(q, k, v, dout, causal, work=torch.float64):
    """(dq, dk, dv) by autograd through attention_graph: in float64 (exact), or in the inputs' precision."""
    leaves = [(t.double() if work == torch.float64 else t).detach().requires_grad_(True) for t in (q, k, v)]
    out, _ = attention_graph(*leaves, causal, work=work)
    out.backward(dout.to(out.dtype))
    return [t.grad for t in leaves]


def describe(ctx, q, k, block_m, block_n, causal):
    blocks = ctx.t("default blocks", "默认块大小") if block_m is None else f"block_m={block_m}, block_n={block_n}"
    return (f"q {tuple(q.shape)}, k/v {tuple(k.shape)} ({q.dtype}), {blocks}"
            + (", causal=True" if causal else ""))


def qkv(ctx, batch, M, N, d, dtype=torch.float32, scale=1.0):
    return (ctx.randn(*batch, M, d, dtype=dtype, scale=scale), ctx.randn(*batch, N, d, dtype=dtype, scale=scale),
            ctx.randn(*batch, N, d, dtype=dtype))


def huge_scores(ctx, batch, M, N, d):
    """fp32 q, k, v whose scores q·kᵀ/√d are a per-row offset, -300, 0 or +300 (rows in turn), plus a random part
    that grows with the key: about ±1 for the first keys, ±30 (up to ±100) for the last, so each row's max grows
    by tens from K/V block to block. The offset rides on the last coordinate (q's holds it, k's is √d). Exp without
    the max subtracted overflows float32 (> 88) on the +300 rows; sums not rescaled when the max grows are wrong on
    every row; a running max that starts at 0 instead of -inf loses every term of the -300 rows (exp underflows)."""
    q = ctx.randn(*batch, M, d, scale=3.0)
    k = ctx.randn(*batch, N, d) * torch.linspace(0.3, 10.0, N)[:, None]
    q[..., -1] = torch.tensor([-300.0, 0.0, 300.0]).repeat(M)[:M]
    k[..., -1] = math.sqrt(d)
    return q, k, ctx.randn(*batch, N, d)


def largest_score(q, k):
    return ((q.double() @ k.double().transpose(-1, -2)).abs().max() / math.sqrt(q.shape[-1])).item()


def every_residue():
    """(M, N, block_m, block_n) with 4×3 and 3×4 blocks: M = N = 1…12, M = 1…12 < N = 13…24 and M = 13…24 > N = 1…12,
    each length running over 12 consecutive values (every residue modulo 3 and 4, and 12 = lcm(3, 4)); the other
    length is paired as r -> 5r mod 12 (5 is coprime to 12), so that it runs over every residue too. M = 1 and N = 1
    are among them. 72 calls: the sweep of every pair (288) found nothing more in the mutants and costs 4× the time."""
    cases = []
    for bm, bn in ((4, 3), (3, 4)):
        for r in range(1, 13):
            cases += [(r, r, bm, bn), (r, 13 + 5 * r % 12, bm, bn), (12 + r, 1 + 5 * r % 12, bm, bn)]
    return cases


# ── tiled_attention ────────────────────────────────────────────────────────────────────────────────
def call_attention(ctx, q, k, v, block_m, block_n, causal):
    kwargs = {} if block_m is None else {"block_m": block_m, "block_n": block_n}
    if causal:
        kwargs["causal"] = True
    result = ctx.call("tiled_attention", q, k, v, **kwargs)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = type(result).__name__ + (f"[{len(result)}]" if isinstance(result, (tuple, list)) else "")
        ctx.fail(ctx.t(f"tiled_attention must return a pair (out, lse), got {got}",
                       f"tiled_attention 必须返回一对 (out, lse)，实际得到 {got}"))
    return result


def expect_attention(ctx, q, k, v, block_m=None, block_n=None, causal=False, check_out=True, check_lse=False):
    out, lse = call_attention(ctx, q, k, v, block_m, block_n, causal)
    exact_out, exact_lse = exact_attention(q, k, v, causal)
    same_out, same_lse = same_precision_attention(q, k, v, causal)
    where = describe(ctx, q, k, block_m, block_n, causal)
    if check_out:
        ctx.expect_close(out, exact_out, same_precision=same_out,
                         what=ctx.t(f"out of tiled_attention for {where}", f"tiled_attention 的 out（{where}）"))
    if check_lse:
        if not isinstance(lse, torch.Tensor) or lse.dtype != torch.float32:
            got = lse.dtype if isinstance(lse, torch.Tensor) else type(lse).__name__
            shape = tuple(exact_lse.shape)
            ctx.fail(ctx.t(f"lse of tiled_attention for {where}: expected a float32 tensor of shape {shape} "
                           f"(one natural-log log-sum-exp per query row), got {got}",
                           f"tiled_attention 的 lse（{where}）：应为形状 {shape} 的 float32 张量（每个查询行一个自然对数的 "
                           f"log-sum-exp），实际得到 {got}"))
        ctx.expect_close(lse, exact_lse, same_precision=same_lse, factor=8.0,
                         floor=1e-5 if q.dtype == torch.float32 and not ctx.gpu else 1e-3,
                         what=ctx.t(f"lse (natural log of the softmax denominator, per query row) of tiled_attention "
                                    f"for {where}",
                                    f"tiled_attention 的 lse（每个查询行 softmax 分母的自然对数；{where}）"))
    return out, lse


NEEDS = ("tiled_attention",)


@lesson.check(1, "tiled_attention when M and N are multiples of the blocks", needs=NEEDS,
              zh="M 和 N 是块大小的倍数时的 tiled_attention")
def attention_divisible(ctx):
    # The last case of each mode gives every size its own value (batch dims 2 and 3, M, N, d, the blocks, and 4 Q
    # blocks against 5 K/V blocks; 8 against 12 on a GPU)
    for batch, M, N, d, bm, bn in ctx.pick(
            gpu=[((2, 4), 512, 512, 64, 64, 64), ((3,), 256, 1024, 128, 128, 64), ((), 1024, 256, 64, 32, 128),
                 ((2, 3), 512, 384, 80, 64, 32)],
            interpreter=[((2,), 128, 128, 64, 32, 32), ((), 64, 192, 32, 32, 64), ((2, 3), 128, 80, 24, 32, 16)]):
        expect_attention(ctx, *qkv(ctx, batch, M, N, d, scale=1.5), bm, bn)
    # Scores of ±300 and more whose max grows from K/V block to block (huge_scores): the running max must be
    # subtracted (else exp overflows), start at -inf and rescale l_i and acc each time it grows
    batch, M, N, d, bm, bn = ctx.pick(gpu=((2, 2), 256, 512, 64, 64, 32), interpreter=((2,), 64, 96, 40, 32, 16))
    q, k, v = huge_scores(ctx, batch, M, N, d)
    try:
        expect_attention(ctx, q, k, v, bm, bn)
    except CheckFailed as failure:  # the inputs of ordinary size passed: the size of the scores is the difference
        big = largest_score(q, k)
        raise CheckFailed(f"{failure}" + ctx.t(
            f". The ordinary inputs passed; these scores reach ±{big:.0f} (rows offset by -300, 0 or +300), and each "
            "row's max grows from K/V block to block: subtract the running max before exp (m_safe, TODO 7: exp "
            "overflows float32 above 88), start it at -inf (TODO 3: from 0, a row whose scores are all near -300 has "
            "every exp underflow to 0), and rescale l_i and acc by alpha whenever it grows (TODO 7)",
            f"。普通大小的输入已经通过；这些分数达到 ±{big:.0f}（各行偏移 -300、0 或 +300），而且每行的最大值随 K/V "
            "块逐块增大：取 exp 之前要减去运行最大值（m_safe，TODO 7：float32 的 exp 超过 88 就会溢出），它的初值要是 "
            "-inf（TODO 3：若从 0 开始，分数全在 -300 附近的行每个 exp 都会下溢为 0），并且每当它增大时，都要用 alpha "
            "重新缩放 l_i 和 acc（TODO 7）")) from None


@lesson.check(2, "tiled_attention for any M, N (partial last blocks, M != N, N=1, no keys at all), d = 40 or 100, "
                 "fp16/bf16/fp32", needs=NEEDS,
              zh="任意 M、N 的 tiled_attention（最后一块不满、M != N、N=1、一个键都没有），d = 40 或 100，fp16/bf16/fp32")
def attention_ragged(ctx):
    cases = ctx.pick(
        gpu=[((2, 3), 1000, 1000, 64, None, None, torch.float16), ((2,), 333, 777, 40, 64, 32, torch.float32),
             ((4,), 777, 129, 100, 128, 64, torch.float16), ((), 1, 300, 64, 64, 64, torch.float32),
             ((3,), 300, 1, 40, 64, 64, torch.float32), ((2, 2), 200, 301, 80, 32, 64, torch.bfloat16),
             ((2,), 70, 0, 40, 32, 16, torch.float32)],
        interpreter=[((2,), 100, 100, 40, 32, 16, torch.float32), ((), 70, 150, 100, 64, 64, torch.float16),
                     ((2, 2), 130, 45, 40, 16, 32, torch.float32), ((), 1, 90, 64, None, None, torch.float32),
                     ((3,), 50, 1, 24, 64, 64, torch.float16), ((), 37, 70, 40, 16, 16, torch.bfloat16),
                     ((2,), 70, 0, 40, 32, 16, torch.float32)])
    # The last case has no keys at all (N = 0): the loop over K/V blocks never runs, every row ends with l = 0 and
    # must give output 0, not 0/0 (section "Causal attention"), whatever m, l and acc started from
    for batch, M, N, d, bm, bn, dtype in cases:
        expect_attention(ctx, *qkv(ctx, batch, M, N, d, dtype=dtype, scale=1.5), bm, bn)


@lesson.check(1, "tiled_attention returns lse = natural-log log-sum-exp of each row's scaled scores (float32; -inf "
                 "for a row that sees no key)", needs=NEEDS,
              zh="tiled_attention 返回的 lse：每行缩放后分数的自然对数 log-sum-exp（float32；一个键都看不到的行为 -inf）")
def attention_lse(ctx):
    # The last case has no keys (N = 0): log of an empty sum, -inf in every row
    for batch, M, N, d, bm, bn in ctx.pick(
            gpu=[((2, 2), 1024, 768, 64, 64, 64), ((3,), 256, 256, 40, 64, 32), ((), 64, 128, 100, 64, 64),
                 ((2,), 70, 0, 40, 32, 16)],
            interpreter=[((2,), 128, 64, 40, 32, 16), ((), 96, 96, 64, 32, 32), ((), 64, 128, 100, 64, 64),
                         ((2,), 70, 0, 40, 32, 16)]):
        expect_attention(ctx, *qkv(ctx, batch, M, N, d, scale=1.5), bm, bn, check_out=False, check_lse=True)


# Causal, lengths that are multiples of the blocks. The coprime tiny blocks put the end of the Q blocks (4, 8, 12, …)
# on every residue modulo block_n = 3 (and the K blocks' starts on every residue modulo block_m), so a bound that is
# off by one key (or that uses block_n where block_m belongs) shows here; M = N, M < N and M > N.
CAUSAL_DIVISIBLE = [((), 12, 12, 8, 4, 3), ((), 12, 24, 8, 4, 3), ((), 24, 9, 8, 4, 3), ((), 12, 12, 8, 3, 4),
                    ((), 9, 20, 8, 3, 4), ((), 24, 12, 8, 3, 4), ((), 15, 15, 8, 3, 5), ((), 15, 30, 8, 5, 3)]


@lesson.check(2, "tiled_attention with causal=True (query i sees keys j <= i, top-left), M = N and M != N, "
                 "lengths that are multiples of the blocks", needs=NEEDS,
              zh="causal=True 的 tiled_attention（查询 i 看到键 j <= i，左上对齐），M = N 与 M != N，长度是块大小的倍数")
def attention_causal(ctx):
    for batch, M, N, d, bm, bn in CAUSAL_DIVISIBLE + ctx.pick(
            gpu=[((2, 4), 1024, 1024, 64, 64, 32), ((2,), 384, 768, 40, 128, 64), ((3,), 768, 256, 100, 64, 128)],
            interpreter=[((2,), 96, 96, 40, 32, 16), ((), 64, 128, 16, 16, 32), ((2,), 128, 64, 16, 32, 16)]):
        expect_attention(ctx, *qkv(ctx, batch, M, N, d, scale=1.5), bm, bn, causal=True)


@lesson.check(1, "tiled_attention with causal=True when M and N are not multiples of the blocks (every residue modulo "
                 "4×3 and 3×4 blocks, M = N and M != N)", needs=NEEDS,
              zh="M 和 N 不是块大小的倍数时 causal=True 的 tiled_attention（4×3 与 3×4 块下的每个余数，M = N 与 M != N）")
def attention_causal_ragged(ctx):
    for M, N, bm, bn in every_residue():
        expect_attention(ctx, *qkv(ctx, (), M, N, 8, scale=1.5), bm, bn, causal=True)


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


def needed_tiles(M, N, block_m, block_n):
    """(tiles that hold at least one visible (query, key) pair, all tiles), by brute force over the pairs."""
    hidden = causal_mask(M, N)
    needed = sum(bool((~hidden[i:i + block_m, j:j + block_n]).any())
                 for i in range(0, M, block_m) for j in range(0, N, block_n))
    return needed, -(-M // block_m) * -(-N // block_n)


def expect_skipping(ctx, name, call, M, N, block, where=None):
    """`call(causal)` runs the learner's function; compares the matrix products of causal=True with causal=False."""
    call(False)
    full_calls, full_work = product_work(ctx.last_info)
    if full_calls == 0:
        ctx.fail(ctx.t(f"{name} made no torch matrix products (`@`, torch.matmul, einsum), so this check cannot count "
                       "the tiles it computed; compute each tile's products with `@` on the tiles",
                       f"{name} 没有做任何 torch 矩阵乘法（`@`、torch.matmul、einsum），所以这个检查数不出它计算了哪些 tile；"
                       "请对每个 tile 用 `@` 计算乘积"))
    call(True)
    causal_calls, causal_work = product_work(ctx.last_info)
    needed, total = needed_tiles(M, N, block, block)
    ideal = needed / total
    most = min(causal_calls / full_calls, causal_work / max(full_work, 1))
    least = max(causal_calls / full_calls, causal_work / max(full_work, 1))
    what = ctx.t(f"for M = {M}, N = {N} with {block}×{block} blocks, causal=True made {causal_calls} matrix products "
                 f"({causal_work:.3g} multiply-adds) and causal=False {full_calls} ({full_work:.3g}): {most:.0%} of the "
                 f"work, where the {needed} of {total} tiles that hold a visible key make {ideal:.0%}",
                 f"M = {M}、N = {N}、{block}×{block} 的块：causal=True 做了 {causal_calls} 次矩阵乘法（{causal_work:.3g} "
                 f"次乘加），causal=False 做了 {full_calls} 次（{full_work:.3g}）：工作量的 {most:.0%}，而含有可见键的 "
                 f"{needed}/{total} 个 tile 只占 {ideal:.0%}")
    if most > ideal + (1 - ideal) / 4:
        where = where or ctx.t("don't compute it", "不要计算它")
        ctx.fail(ctx.t(f"{what}. A tile whose first key comes after its last query is fully masked: {where}",
                       f"{what}。第一个键在最后一个查询之后的 tile 被完全掩码：{where}"))
    if least < 0.9 * ideal:
        ctx.fail(ctx.t(f"{what}: fewer than the tiles that hold a visible key need; a tile with any key j <= query i "
                       "must be computed",
                       f"{what}：比含有可见键的 tile 所需的还少；只要 tile 中有某个键 j <= 查询 i，就必须计算它"))
    return most, ideal


@lesson.check(1, "causal=True skips the K/V blocks that lie entirely above the diagonal", needs=NEEDS,
              zh="causal=True 跳过完全位于对角线上方的 K/V 块")
def causal_skips_blocks(ctx):
    n, block = ctx.pick(gpu=(1024, 64), interpreter=(512, 64))
    q, k, v = qkv(ctx, (2,), n, n, 64)
    most, ideal = expect_skipping(ctx, "tiled_attention",
                                  lambda causal: call_attention(ctx, q, k, v, block, block, causal), n, n, block)
    return ctx.t(f"causal computed {most:.0%} of the non-causal products (ideal {ideal:.0%})",
                 f"causal 做了非 causal 的 {most:.0%} 的矩阵乘法（理想值 {ideal:.0%}）")


def expect_small(ctx, name, call, n):
    """No tensor with n×n elements during `call()`. The worker allocates each torch.empty* output inside a NaN margin
    (3× its size, counted as created), so the checks keep their outputs far below n×n: batch 2, d = 16 or 32."""
    call()
    info = ctx.last_info
    shape, numel = tuple(info["largest_shape"]), info["largest_numel"]
    if numel >= n * n:
        ctx.fail(ctx.t(f"{name} created a tensor of shape {shape} ({numel} elements, at least M×N = {n * n}): the point "
                       "of tiling is that only block_m×block_n tiles (and per-row vectors) ever exist. Look for "
                       "q @ k.transpose(...) on the whole problem, or a full M×N causal mask: build each tile's mask "
                       "from its row and column offsets",
                       f"{name} 创建了形状为 {shape} 的张量（{numel} 个元素，不少于 M×N = {n * n}）：分块的意义就在于只存在 "
                       "block_m×block_n 的 tile（以及每行一个数的向量）。找一找是否在整个问题上做了 q @ k.transpose(...)，"
                       "或者建了完整的 M×N 因果掩码：每个 tile 的掩码应由它的行、列偏移生成"))
    return ctx.t(f"largest tensor created: {numel} elements, shape {shape}", f"创建的最大张量：{numel} 个元素，形状 {shape}")


@lesson.check(1, "tiled_attention never creates an M×N tensor", needs=NEEDS,
              zh="tiled_attention 从不创建 M×N 的张量")
def no_full_score_matrix(ctx):
    n = ctx.pick(gpu=1024, interpreter=512)
    for causal, blocks in [(False, (64, 64)), (True, (None, None))]:
        q, k, v = qkv(ctx, (2,), n, n, 32)
        note = expect_small(ctx, ctx.t(f"for q, k, v of shape {tuple(q.shape)}{', causal=True' if causal else ''}, "
                                       "tiled_attention",
                                       f"q、k、v 的形状为 {tuple(q.shape)}{'、causal=True' if causal else ''} 时，"
                                       "tiled_attention"),
                            lambda: call_attention(ctx, q, k, v, *blocks, causal), n)
    return note


# ── tiled_attention_backward ───────────────────────────────────────────────────────────────────────
BACKWARD = ("tiled_attention_backward",)
AUTOGRAD_ATTRIBUTES = {"backward", "grad", "requires_grad", "requires_grad_", "enable_grad", "autograd", "vjp",
                       "jacrev", "jacfwd", "jacobian"}


@functools.lru_cache(maxsize=8)
def autograd_use(program, name="tiled_attention_backward"):
    """(line, code) where `name`, or a function of the learner's that it calls, uses autograd; None if nowhere."""
    code = notebook.student_code(program)
    try:
        tree = structure.parse(code)  # one thread at a time (the checks run in threads)
    except SyntaxError:
        return None
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    todo, seen = [name], set()
    while todo:
        fn = functions.get(todo.pop())
        if fn is None or fn.name in seen:
            continue
        seen.add(fn.name)
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and node.attr in AUTOGRAD_ATTRIBUTES or \
                    isinstance(node, ast.Name) and node.id in ("autograd", "functorch"):
                return node.lineno, code.split("\n")[node.lineno - 1].strip()
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo.append(node.func.id)
    return None


def call_backward(ctx, q, k, v, out, lse, dout, block_m, block_n, causal):
    used = autograd_use(ctx.program)
    if used:
        code = used[1][:100]
        ctx.fail(ctx.t(f"tiled_attention_backward computes its gradients with autograd (`{code}`): this lesson asks "
                       "you to compute dq, dk and dv yourself, tile by tile, so that costs the backward's points",
                       f"tiled_attention_backward 用 autograd 计算梯度（`{code}`）：本课要求你逐个 tile 亲手计算 dq、dk、dv，"
                       "所以这会失去反向传播的分数"))
    kwargs = {} if block_m is None else {"block_m": block_m, "block_n": block_n}
    if causal:
        kwargs["causal"] = True
    result = ctx.call("tiled_attention_backward", q, k, v, out, lse, dout, **kwargs)
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        got = type(result).__name__ + (f"[{len(result)}]" if isinstance(result, (tuple, list)) else "")
        ctx.fail(ctx.t(f"tiled_attention_backward must return a triple (dq, dk, dv), got {got}",
                       f"tiled_attention_backward 必须返回三元组 (dq, dk, dv)，实际得到 {got}"))
    return result


def common_factor(got, exact):
    """c when `got` is c times `exact` everywhere (c not 1, to 1%): a factor or a sign is off, not the terms; else None."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(exact.shape):
        return None
    g, e = got.detach().double().cpu(), exact.detach().double().cpu()
    if not torch.isfinite(g).all() or not e.abs().sum():
        return None
    c = ((g * e).sum() / (e * e).sum()).item()
    return c if abs(c - 1) > 0.02 and (g - c * e).norm() <= 0.01 * abs(c) * e.norm() else None


def where_to_look(ctx, wrong, factors=None, d=None):
    """Which TODOs a set of wrong gradients points to. `factors`: {name: c} for the wrong gradients that are c times
    the right ones. dk and dq both depend on ds, but also each on its own line: when both are off by one common
    factor, the factor (the scale, or a sign) is wrong, not ds or delta."""
    if not wrong:
        return ""
    factors = factors or {}
    if "dv" in wrong:
        return ctx.t("dv = pᵀ·dO needs nothing but p: look at the recomputed p (TODO 10, and TODO 11 when causal) and "
                     "at the dK/dV loop (TODOs 13 and 14)",
                     "dv = pᵀ·dO 只需要 p：检查重新计算的 p（TODO 10，causal 时还有 TODO 11）和 dK/dV 循环（TODO 13、14）")
    c, c_q = factors.get("dk"), factors.get("dq")
    if {"dk", "dq"} <= wrong and c and c_q and abs(c / c_q - 1) < 0.02:
        if c < 0:
            return ctx.t("dv is right, and dk and dq are both the right ones times −1: a sign, not delta. ds = p ∘ "
                         "(dp − delta) (TODO 12), and each tile's share is added to dk and dq (TODOs 14 and 16)",
                         "dv 是对的，而 dk 和 dq 都是正确值乘以 −1：是符号问题，不是 delta。ds = p ∘ (dp − delta)（TODO 12），"
                         "并且每个 tile 的贡献要加到 dk 和 dq 上（TODO 14、16）")
        root = f"{math.sqrt(d):.3g}" if d else "?"
        return ctx.t(f"dv is right, and dk and dq are both {c:.3g} times the right ones (√d = {root}): the scale, not "
                     "ds or delta. It multiplies dq = scale·ds·k and dk = scale·dsᵀ·q once each (TODOs 16 and 14), and is "
                     "in neither ds nor dp (TODO 12)",
                     f"dv 是对的，而 dk 和 dq 都是正确值的 {c:.3g} 倍（√d = {root}）：问题在缩放系数，不在 ds 或 delta。"
                     "它在 dq = scale·ds·k 和 dk = scale·dsᵀ·q 里各乘一次（TODO 16、14），ds 和 dp 里都没有它（TODO 12）")
    if {"dk", "dq"} <= wrong:
        return ctx.t("dv is right, so p is: dk and dq both come from ds = p ∘ (dp − delta): look at TODO 12 and at "
                     "delta (TODO 9)",
                     "dv 是对的，所以 p 也是对的：dk 和 dq 都来自 ds = p ∘ (dp − delta)：检查 TODO 12 和 delta（TODO 9）")
    if "dk" in wrong:
        return ctx.t("dv and dq are right: look at how the dK/dV loop accumulates dk (TODO 14)",
                     "dv 和 dq 是对的：检查 dK/dV 循环如何累加 dk（TODO 14）")
    return ctx.t("dk and dv are right: look at the dQ loop (TODOs 15 and 16)",
                 "dk 和 dv 是对的：检查 dQ 循环（TODO 15、16）")


def expect_gradients(ctx, q, k, v, dout, block_m=None, block_n=None, causal=False, graded=("dq", "dk", "dv"),
                     factor=4.0):
    """Call the learner's backward with the exact forward's (out, lse); compare dq, dk, dv with float64 autograd,
    within `factor` × the error of float32 autograd. Fails when a gradient in `graded` is off; the message reports
    all three."""
    exact_out, exact_lse = exact_attention(q, k, v, causal)
    got = call_backward(ctx, q, k, v, exact_out.to(q.dtype), exact_lse.float(), dout, block_m, block_n, causal)
    exact = attention_gradients(q, k, v, dout, causal)
    same = attention_gradients(q, k, v, dout, causal, work=torch.float32)
    where = describe(ctx, q, k, block_m, block_n, causal)
    reports, wrong, factors = [], set(), {}
    for name, g, e, s in zip(("dq", "dk", "dv"), got, exact, same):
        # fp32 on the CPU: PyTorch's own error is ~1e-6 of the largest gradient, and a tile-by-tile sum adds a few
        # times that (a fixed 1e-5 left the reference at 0.8 of it over 20 seeds); relative to the gradient: 0.3
        floor = 1e-5 * max(1.0, e.abs().max().item()) if q.dtype == torch.float32 and not ctx.gpu else None
        try:
            ctx.expect_close(g, e, same_precision=s.to(q.dtype), what=name, floor=floor, factor=factor)
            error = f"{(g.double() - e).abs().max().item():.2g}"
            reports.append(ctx.t(f"{name} ok (max error {error})", f"{name} 通过（最大误差 {error}）"))
        except CheckFailed as problem:
            reports.append(str(problem))
            wrong.add(name)
            factors[name] = common_factor(g, e)
    if wrong & set(graded):
        ctx.fail(ctx.t(f"tiled_attention_backward for {where}, against float64 autograd:",
                       f"tiled_attention_backward（{where}），与 float64 的 autograd 比较：")
                 + "\n" + "\n".join(reports) + "\n" + where_to_look(ctx, wrong, factors, q.shape[-1]))


def backward_inputs(ctx, batch, M, N, d, dtype=torch.float32):
    q, k, v = qkv(ctx, batch, M, N, d, dtype=dtype, scale=1.5)
    return q, k, v, ctx.randn(*batch, M, d, dtype=dtype)


# The last case of each mode gives every size its own value (batch dims 2 and 4, M, N, d, the blocks, and 5 Q
# blocks against 3 K/V blocks; on a GPU batch dims 2 and 3, 12 Q blocks against 8)
BACKWARD_DIVISIBLE = dict(
    gpu=[((2, 4), 512, 512, 64, 64, 64), ((3,), 256, 1024, 128, 128, 64), ((), 1024, 256, 64, 32, 128),
         ((2, 3), 384, 512, 80, 32, 64)],
    interpreter=[((2,), 128, 64, 32, 32, 16), ((), 64, 192, 40, 32, 64), ((2, 4), 80, 96, 24, 16, 32)])


def backward_divisible(ctx, gradient):
    for batch, M, N, d, bm, bn in ctx.pick(**BACKWARD_DIVISIBLE):
        expect_gradients(ctx, *backward_inputs(ctx, batch, M, N, d), bm, bn, graded=(gradient,))


@lesson.check(1, "tiled_attention_backward: dv = Pᵀ·dO, with P recomputed from the saved lse (M, N multiples of "
                 "the blocks)", needs=BACKWARD,
              zh="tiled_attention_backward：dv = Pᵀ·dO，P 由保存的 lse 重新计算（M、N 是块大小的倍数）")
def backward_dv(ctx):
    backward_divisible(ctx, "dv")
    # Scores of ±300 and more (huge_scores): P = exp(s - lse) stays finite, where exp(s) / exp(lse), or an lse
    # subtracted with the wrong sign, overflows (dv needs only P, so only this check has them). 10×, not 4×: at
    # ±300 P rebuilt from the given float32 lse carries the rounding of both s and lse (up to 4.6× float32
    # autograd's error over 500 seeds, whose own lse cancels the rounding of s); a NaN fails at any factor.
    batch, M, N, d, bm, bn = ctx.pick(gpu=((2, 2), 256, 512, 64, 64, 32), interpreter=((2,), 64, 96, 40, 32, 16))
    q, k, v = huge_scores(ctx, batch, M, N, d)
    try:
        expect_gradients(ctx, q, k, v, ctx.randn(*batch, M, d), bm, bn, graded=("dv",), factor=10.0)
    except CheckFailed as failure:  # the inputs of ordinary size passed: the size of the scores is the difference
        big = largest_score(q, k)
        raise CheckFailed(f"{failure}" + ctx.t(
            f". The ordinary inputs passed; these scores reach ±{big:.0f}: exp(s) alone overflows float32 (above 88) "
            "or underflows to 0, while P = exp(s - lse), with the tile's rows of lse subtracted inside the exp, "
            "stays between 0 and 1 (TODO 10)",
            f"。普通大小的输入已经通过；这些分数达到 ±{big:.0f}：单独计算 exp(s) 会在 float32 下溢出（超过 88）或下溢为 0，"
            "而 P = exp(s - lse)（在 exp 里面减去这个 tile 对应行的 lse）始终在 0 和 1 之间（TODO 10）")) from None


@lesson.check(1, "tiled_attention_backward: dk from ds = P∘(dP − delta) in the dK/dV loop over Q blocks (M, N "
                 "multiples of the blocks)", needs=BACKWARD,
              zh="tiled_attention_backward：遍历 Q 块的 dK/dV 循环中由 ds = P∘(dP − delta) 得到的 dk（M、N 是块大小的倍数）")
def backward_dk(ctx):
    backward_divisible(ctx, "dk")


@lesson.check(1, "tiled_attention_backward: dq from the dQ loop over K/V blocks (M, N multiples of the blocks)",
              needs=BACKWARD,
              zh="tiled_attention_backward：遍历 K/V 块的 dQ 循环得到的 dq（M、N 是块大小的倍数）")
def backward_dq(ctx):
    backward_divisible(ctx, "dq")


@lesson.check(2, "tiled_attention_backward for any M, N (partial last blocks, M != N, N=1, M=1), d = 40 or 100, "
                 "fp16/bf16/fp32", needs=BACKWARD,
              zh="任意 M、N 的 tiled_attention_backward（最后一块不满、M != N、N=1、M=1），d = 40 或 100，fp16/bf16/fp32")
def backward_ragged(ctx):
    cases = ctx.pick(
        gpu=[((2, 3), 1000, 1000, 64, None, None, torch.float16), ((2,), 333, 777, 40, 64, 32, torch.float32),
             ((4,), 777, 129, 100, 128, 64, torch.float16), ((), 1, 300, 64, 64, 64, torch.float32),
             ((3,), 300, 1, 40, 64, 64, torch.float32), ((2, 2), 200, 301, 80, 32, 64, torch.bfloat16)],
        interpreter=[((2,), 100, 100, 40, 32, 16, torch.float32), ((), 70, 150, 100, 64, 64, torch.float16),
                     ((2, 2), 130, 45, 40, 16, 32, torch.float32), ((), 1, 90, 64, None, None, torch.float32),
                     ((3,), 50, 1, 24, 64, 64, torch.float16), ((), 37, 70, 40, 16, 16, torch.bfloat16)])
    for batch, M, N, d, bm, bn, dtype in cases:
        expect_gradients(ctx, *backward_inputs(ctx, batch, M, N, d, dtype), bm, bn)


@lesson.check(2, "tiled_attention_backward with causal=True (top-left), M = N and M != N, lengths that are multiples "
                 "of the blocks", needs=BACKWARD,
              zh="causal=True 的 tiled_attention_backward（左上对齐），M = N 与 M != N，长度是块大小的倍数")
def backward_causal(ctx):
    for batch, M, N, d, bm, bn in CAUSAL_DIVISIBLE + ctx.pick(
            gpu=[((2, 4), 1024, 1024, 64, 64, 32), ((2,), 384, 768, 40, 128, 64), ((3,), 768, 256, 100, 64, 128)],
            interpreter=[((2,), 96, 96, 40, 32, 16), ((), 64, 128, 16, 16, 32), ((2,), 128, 64, 16, 32, 16)]):
        expect_gradients(ctx, *backward_inputs(ctx, batch, M, N, d), bm, bn, causal=True)


@lesson.check(1, "tiled_attention_backward with causal=True when M and N are not multiples of the blocks (every "
                 "residue modulo 4×3 and 3×4 blocks, M = N and M != N)", needs=BACKWARD,
              zh="M 和 N 不是块大小的倍数时 causal=True 的 tiled_attention_backward（4×3 与 3×4 块下的每个余数，M = N 与 M != N）")
def backward_causal_ragged(ctx):
    for M, N, bm, bn in every_residue():
        expect_gradients(ctx, *backward_inputs(ctx, (), M, N, 8), bm, bn, causal=True)


def products_by_operands(info):
    """{(last two dims of the left operand, of the right one): calls} of the torch matrix products of a call."""
    found = {}
    for op, shapes, count in info["forbidden"]:
        if op in PRODUCTS and len(shapes) >= 2 and len(shapes[0]) >= 2 and len(shapes[1]) >= 2:
            key = (tuple(shapes[0][-2:]), tuple(shapes[1][-2:]))
            found[key] = found.get(key, 0) + count
    return found


def loops_that_do_not_skip(ctx):
    """Which loops of the backward compute fully masked tiles, told apart by the shapes of their own products with
    block_m = 16, block_n = 32, d = 8: the dK/dV loop's pᵀ·dO and dsᵀ·Q are (32, 16)·(16, 8), the dQ loop's ds·K is
    (16, 32)·(32, 8). [] when the learner's products have other shapes (then the message names both loops)."""
    bm, bn, d, n = 16, 32, 8, 128
    q, k, v, dout = backward_inputs(ctx, (2,), n, n, d)
    counts = {}
    for causal in (False, True):
        out, lse = (t.float() for t in exact_attention(q, k, v, causal))
        call_backward(ctx, q, k, v, out, lse, dout, bm, bn, causal)
        counts[causal] = products_by_operands(ctx.last_info)
    needed, total = needed_tiles(n, n, bm, bn)
    ideal = needed / total
    found = []
    for loop, key in (("dkdv", ((bn, bm), (bm, d))), ("dq", ((bm, bn), (bn, d)))):
        full = counts[False].get(key, 0)
        if full and counts[True].get(key, 0) / full > ideal + (1 - ideal) / 4:
            found.append(loop)
    return found


@lesson.check(1, "tiled_attention_backward with causal=True skips the tiles above the diagonal, in both loops",
              needs=BACKWARD,
              zh="causal=True 的 tiled_attention_backward 在两个循环中都跳过对角线上方的 tile（分块）")
def backward_causal_skips(ctx):
    block = 32
    notes = []
    # M = N: about half the tiles (a loop that doesn't skip: 76% or more of the products against an ideal of 62%);
    # M << N: only the first keys are visible, so a loop that doesn't skip stands out (54% or more, ideal 19%)
    for M, N in ctx.pick(gpu=[(512, 512), (128, 1024)], interpreter=[(128, 128), (64, 256)]):
        q, k, v, dout = backward_inputs(ctx, (2,), M, N, 32)
        out, lse = (t.float() for t in exact_attention(q, k, v, False))
        out_c, lse_c = (t.float() for t in exact_attention(q, k, v, True))

        def call(causal):
            return call_backward(ctx, q, k, v, out_c if causal else out, lse_c if causal else lse, dout, block, block,
                                 causal)
        try:
            most, ideal = expect_skipping(ctx, "tiled_attention_backward", call, M, N, block,
                                          where=ctx.t("neither loop may compute it", "两个循环都不应计算它"))
        except CheckFailed as problem:
            if ctx.t("fully masked", "被完全掩码") not in str(problem):
                raise  # fewer products than needed: no loop to name
            try:
                loops = loops_that_do_not_skip(ctx)
            except CheckFailed:
                loops = []  # the diagnosis call itself failed: name both loops
            start = ctx.t("the dK/dV loop must start at the first query row that sees the K/V block's first key "
                          "(TODO 13)",
                          "dK/dV 循环必须从第一个能看到这个 K/V 块第一个键的查询行开始（TODO 13）")
            stop = ctx.t("the dQ loop must stop after the last key that the Q block's last query sees (TODO 15)",
                         "dQ 循环必须在这个 Q 块最后一个查询能看到的最后一个键之后停下（TODO 15）")
            which = {("dkdv",): ctx.t("The dK/dV loop computes them (the dQ loop skips them): ",
                                      "是 dK/dV 循环算了它们（dQ 循环跳过了）：") + start,
                     ("dq",): ctx.t("The dQ loop computes them (the dK/dV loop skips them): ",
                                    "是 dQ 循环算了它们（dK/dV 循环跳过了）：") + stop,
                     ("dkdv", "dq"): ctx.t("Both loops compute them: ", "两个循环都算了它们：") + start
                     + ctx.t(", and ", "；") + stop}.get(tuple(loops), ctx.t(
                         "One of the loops computes them (its products do not tell which): ",
                         "某个循环算了它们（从矩阵乘法看不出是哪一个）：") + start + ctx.t(", or ", "；或者") + stop)
            ctx.fail(str(problem) + ctx.t(". ", "。") + which)
        notes.append(ctx.t(f"M = {M}, N = {N}: {most:.0%} (ideal {ideal:.0%})",
                           f"M = {M}、N = {N}：{most:.0%}（理想值 {ideal:.0%}）"))
    return ctx.t("causal computed " + ", ".join(notes) + " of the non-causal products",
                 "causal 做的矩阵乘法占非 causal 的比例：" + "；".join(notes))


@lesson.check(1, "tiled_attention_backward never creates an M×N tensor", needs=BACKWARD,
              zh="tiled_attention_backward 从不创建 M×N 的张量")
def backward_no_full_matrix(ctx):
    n = ctx.pick(gpu=1024, interpreter=256)
    for causal, blocks in [(False, (64, 64)), (True, (None, None))]:
        q, k, v, dout = backward_inputs(ctx, (2,), n, n, 16)
        out, lse = exact_attention(q, k, v, causal)
        note = expect_small(ctx, ctx.t(f"for q, k, v of shape {tuple(q.shape)}{', causal=True' if causal else ''}, "
                                       "tiled_attention_backward",
                                       f"q、k、v 的形状为 {tuple(q.shape)}{'、causal=True' if causal else ''} 时，"
                                       "tiled_attention_backward"),
                            lambda: call_backward(ctx, q, k, v, out.float(), lse.float(), dout, *blocks, causal), n)
    return note

"""Checks of lesson 06: `flash_decode_kernel` (split-KV partial outputs and their log-sum-exp), `combine_kernel`,
`paged_row_offsets` (the page-table lookup), `choose_num_splits` and the wrapper
`flash_decode(q, k_cache, v_cache, cache_seqlens, block_table=None, sm_scale=None, num_splits=None)`.

q is (B, Hq, Mq, d); the cache is contiguous (B, Hkv, Nmax, d) or paged (num_pages, page_size, Hkv, d) with an int32
block_table (B, max_pages); cache_seqlens int32 (B,) counts each sequence's valid keys, the new tokens' included:
query i of sequence b sees keys j <= cache_seqlens[b] - Mq + i (causal, bottom-right). Query head h reads KV head
h // (Hq / Hkv). The float64 reference is computed here, in the judge (`reference`). Every check but the one named
for a concept keeps that concept easy (one split, Hq = Hkv, Mq = 1, equal lengths, a contiguous cache), so that one
mistake costs the points of the check named for it. Positions of the cache past a sequence's length hold NaN, as
do unused pages, so that a kernel that reads them shows it (0·NaN = NaN).

A message names a TODO only after the simpler cases that TODO's concept builds on pass (issue 23): a check that finds
a mismatch first re-runs what it depends on (`depends`: the same inputs with one split, a contiguous copy of a paged
cache, the split merge without empty chunks) and, when that fails too, says which check to fix first instead of
blaming its own TODO. split_kv tells the merge (TODO 1), the partial lse (TODO 6) and the chunks or grid (TODOs 3, 7)
apart with probes whose every chunk's weight is known (`split_diagnosis`).

Issue 24: no dimension is 1 everywhere. gqa gives B, Hkv and the group sizes of their own and a group of 80 query
heads, more rows than the largest Q tile (BLOCK_H = 64), so the grid's third axis has two programs (causal too, with
22 heads × 3 new tokens). paged ends with the one case where every indexed dimension is above 1 and differs from the
others (B, Hkv, GROUP, Mq, num_splits, pages per sequence, page size, d; on a GPU also GROUP·Mq = 72 rows: two Q
tiles); it is where the concepts meet, so it depends on the same inputs in a contiguous cache, which names the checks
of the concepts when it fails too. Every stabilising maximum is exercised: split_kv's last cases have scores of 150
(216 in base 2, past exp2's fp32 range of 128), one split (the kernel's running max m_i, and the merge's 2^(lse -
lse_max) of a single split) and two whose lse differ by 173 (the merge must subtract the largest lse, not none, the
smallest or its negative). empty_splits ends with a sequence of length 0, a batch's padding slot, whose rows no split
sees (the merge's guards, TODO 1). page_offsets_64bit reads the kernel's Triton IR compiled for sm_90 (no GPU needed):
a page number times a page stride must be an i64 product (a pool past 2^31 elements is too large for a check to
allocate, and the interpreter computes in int64 whatever the code says).
"""
import math
import re

import torch

from ..harness import TORCH_DOES_THE_WORK, CheckFailed, Lesson
from .memory_safety import add_memory_check

KERNELS = ("flash_decode_kernel", "combine_kernel")
lesson = Lesson(
    "06_flash_decoding",
    graded=("flash_decode_kernel", "combine_kernel", "paged_row_offsets", "flash_decode", "choose_num_splits"),
    kernels=("flash_decode_kernel", "combine_kernel", "paged_row_offsets"),
    forbidden=TORCH_DOES_THE_WORK,
    structure_needs={"flash_decode_kernel": ["tl.program_id", "tl.num_programs", "tl.cdiv", "tl.load", "tl.store",
                                             "tl.dot", "tl.where", "tl.max", "tl.sum", "tl.math.exp2"],
                     "combine_kernel": ["tl.load", "tl.store", "tl.max", "tl.sum", "tl.math.exp2"],
                     "paged_row_offsets": ["tl.load"]},
)
NEEDS = ("flash_decode_kernel", "combine_kernel", "flash_decode")
PAGED_NEEDS = NEEDS + ("paged_row_offsets",)
SPLITS_NEEDS = NEEDS + ("choose_num_splits",)
DECODE_KERNEL = ("flash_decode_kernel",)   # every check: the wrapper runs the learner's decode kernel
F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
MAX_SPLITS = 128
# ── inputs and the reference (computed here, in the judge) ────────────────────────────────────────────────
def decode_inputs(ctx, B, HQ, HKV, MQ, lengths, d, dtype=F16, capacity=None):
    """q (B, HQ, MQ, d), a contiguous cache (B, HKV, capacity, d) with NaN past each length, int32 cache_seqlens."""
    capacity = capacity or max(lengths)
    q = ctx.randn(B, HQ, MQ, d, dtype=dtype, scale=1.5)  # peaked rows: the running max changes from tile to tile
    k, v = ctx.randn(B, HKV, capacity, d, dtype=dtype), ctx.randn(B, HKV, capacity, d, dtype=dtype)
    for b, n in enumerate(lengths):
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("nan")
    return q, k, v, torch.tensor(lengths, dtype=torch.int32)


def to_paged(ctx, k, v, lengths, page_size, spare_pages=3):
    """A paged copy of a contiguous cache: each sequence's pages at shuffled places of a pool with `spare_pages`
    unused pages, page 0 among them; NaN wherever no valid key is (unused pages, the rest of a last page); the table's
    entries past a sequence's last page point at an unused page. (A kernel that masks its page-table loads with
    `other=0` then sends the keys past a sequence's end to page 0: NaN, if it also forgets to mask the K/V loads.)
    Returns (k_pages, v_pages, block_table)."""
    B, hkv, capacity, d = k.shape
    used = [-(-n // page_size) for n in lengths]
    total = sum(used) + max(1, spare_pages)
    order = (torch.randperm(total - 1, generator=ctx.gen) + 1).tolist() + [0]   # page 0 comes last: a spare one
    k_pages = torch.full((total, page_size, hkv, d), float("nan"), dtype=k.dtype)
    v_pages = k_pages.clone()
    table = torch.full((B, -(-capacity // page_size)), order[sum(used)], dtype=torch.int32)  # a spare page
    for b in range(B):
        for j in range(used[b]):
            page, lo, hi = order.pop(0), j * page_size, min((j + 1) * page_size, lengths[b])
            table[b, j] = page
            k_pages[page, :hi - lo] = k[b, :, lo:hi].transpose(0, 1)
            v_pages[page, :hi - lo] = v[b, :, lo:hi].transpose(0, 1)
    return k_pages, v_pages, table


def _sequence_kv(k, v, b, n, block_table):
    """(Hkv, n, d) keys and values of sequence b, from a contiguous or a paged cache."""
    if block_table is None:
        return k[b, :, :n], v[b, :, :n]
    pages = block_table[b, :-(-n // k.shape[1])].long()
    return (k[pages].flatten(0, 1)[:n].transpose(0, 1), v[pages].flatten(0, 1)[:n].transpose(0, 1))


def reference(q, k, v, seqlens, block_table=None, sm_scale=None):
    """(float64 result, same-precision result) of one decode step. Query i of sequence b sees keys
    j <= seqlens[b] - Mq + i, found by comparing positions (a brute-force mask, not the kernel's bounds); a row that
    sees no key gives 0. The same-precision result is what a FlashAttention kernel in q's dtype computes: fp32 scores
    and softmax, probabilities rounded to the input dtype before P·V, output rounded to the input dtype."""
    B, HQ, MQ, d = q.shape
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    exact = torch.zeros(q.shape, dtype=torch.float64)
    same = torch.zeros(q.shape, dtype=q.dtype)
    for b in range(B):
        n = int(seqlens[b])
        kb, vb = _sequence_kv(k, v, b, n, block_table)
        group = HQ // kb.shape[0]
        hidden = torch.arange(n)[None, :] > (n - MQ + torch.arange(MQ))[:, None]
        for dtype in (torch.float64, torch.float32):
            keys = kb.to(dtype).repeat_interleave(group, dim=0)
            values = vb.to(dtype).repeat_interleave(group, dim=0)
            s = (q[b].to(dtype) @ keys.transpose(-1, -2)) * scale
            p = torch.softmax(s.masked_fill(hidden, float("-inf")), dim=-1).nan_to_num(0.0)
            if dtype == torch.float64:
                exact[b] = p @ values
            else:
                same[b] = (p.to(q.dtype).float() @ values).to(q.dtype)
    return exact, same


def floor_for(ctx, dtype):
    """Smallest allowed error: fp32 on a GPU goes through TF32 tensor cores (10-bit mantissa)."""
    if dtype == F32:
        return 1e-2 if ctx.gpu else 1e-5
    return {F16: 2e-3, BF16: 1.6e-2}[dtype]


def describe(ctx, q, k, seqlens, block_table=None, num_splits=1, sm_scale=None):
    B, HQ, MQ, d = q.shape
    lengths = seqlens.tolist()
    shown = str(lengths) if len(lengths) <= 6 else ctx.t(f"[{lengths[0]}, …, {lengths[-1]}] ({len(lengths)} sequences)",
                                                         f"[{lengths[0]}, …, {lengths[-1]}]（{len(lengths)} 个序列）")
    layout = (ctx.t(f"paged cache, page_size={k.shape[1]}, {k.shape[0]} pages",
                    f"分页缓存，page_size={k.shape[1]}，{k.shape[0]} 页") if block_table is not None
              else ctx.t(f"contiguous cache of capacity {k.shape[2]}", f"容量为 {k.shape[2]} 的连续缓存"))
    hkv = k.shape[2] if block_table is not None else k.shape[1]
    call = f"flash_decode(num_splits={num_splits}{'' if sm_scale is None else f', sm_scale={sm_scale}'})"
    dtype = str(q.dtype).replace('torch.', '')
    return ctx.t(f"{call} for B={B}, Hq={HQ}, Hkv={hkv}, Mq={MQ}, d={d}, {dtype}, cache_seqlens={shown}, {layout}",
                 f"{call}，B={B}，Hq={HQ}，Hkv={hkv}，Mq={MQ}，d={d}，{dtype}，cache_seqlens={shown}，{layout}")


def attempt(probe):
    """None when `probe()` passes, else its verdict."""
    try:
        probe()
    except CheckFailed as failure:
        return str(failure)
    return None


def expect_decode(ctx, q, k, v, seqlens, block_table=None, num_splits=1, sm_scale=None, hint="", depends=()):
    """Call the learner's flash_decode and compare with float64 attention computed here.

    On a mismatch, each of `depends` ((what it is, a probe that raises CheckFailed)) runs first: a simpler case that
    fails too is what to fix first, and the message says so instead of giving `hint`, which names this check's own
    TODO. `hint` is a string or a function that works out the diagnosis (it may run probes of its own)."""
    kwargs = {"num_splits": num_splits}
    if block_table is not None:
        kwargs["block_table"] = block_table
    if sm_scale is not None:
        kwargs["sm_scale"] = sm_scale
    out = ctx.call("flash_decode", q, k, v, seqlens, **kwargs)
    exact, same = reference(q, k, v, seqlens, block_table, sm_scale)
    what = describe(ctx, q, k, seqlens, block_table, num_splits, sm_scale)
    try:
        ctx.expect_close(out, exact, same_precision=same, what=what, floor=floor_for(ctx, q.dtype))
    except CheckFailed as failure:
        for simpler, probe in depends:
            found = attempt(probe)
            if found:
                raise CheckFailed(str(failure) + ctx.t(
                    f"\n→ this case builds on a simpler one that fails too, {simpler}: fix that first (its own check "
                    f"says what is wrong), then come back here. {found}",
                    f"\n→ 这个情形建立在一个更简单的情形之上，而它也失败了：{simpler}。先修好它（它自己的检查会说哪里不对），"
                    f"再回来看这里。{found}")) from None
        hint = hint() if callable(hint) else hint
        raise CheckFailed(str(failure) + (f"\n→ {hint}" if hint else "")) from None
    return out


def one_split(ctx, inputs, **kwargs):
    """A dependency: the same inputs with num_splits = 1 (what decode_one_split, gqa, ragged_lengths and causal
    check), so that a split check blames the split only when the unsplit result is right."""
    return (ctx.t("the same inputs with num_splits=1", "同样的输入在 num_splits=1 时"),
            lambda: expect_decode(ctx, *inputs, num_splits=1, **kwargs))


def basic_case(ctx):
    """A dependency: the first case of decode_one_split (one new token, Hq = Hkv, equal lengths, one split)."""
    B, H, n, d = ctx.pick(gpu=(2, 4, 1000, 128), interpreter=(2, 2, 77, 32))
    return (ctx.t(f"the plain case of check decode_one_split (B={B}, Hq=Hkv={H}, Mq=1, cache_seqlens={n}, one split)",
                  f"检查 decode_one_split 的基本情形（B={B}，Hq=Hkv={H}，Mq=1，cache_seqlens={n}，一段）"),
            lambda: expect_decode(ctx, *decode_inputs(ctx, B, H, H, 1, [n] * B, d)))


def merge_case(ctx):
    """A dependency: split_kv's first case (several splits, no empty chunk, Mq = 1)."""
    n, d, dtype, splits = ctx.pick(gpu=(3581, 128, F16, 7), interpreter=(443, 16, F32, 7))
    return (ctx.t(f"the split merge of check split_kv (num_splits={splits}, cache_seqlens={n}, no empty chunk)",
                  f"检查 split_kv 的分段合并（num_splits={splits}，cache_seqlens={n}，没有空段）"),
            lambda: expect_decode(ctx, *decode_inputs(ctx, 1, 2, 2, 1, [n], d, dtype), num_splits=splits))


def rows_written(ctx, B, HQ, HKV, MQ, d):
    """A dependency of the checks with Mq > 1 or more than 64 query rows per KV head: the launch geometry. Every
    value row is the same vector c (finite well past the length, so a mask that reads a tile too far still finds c),
    so each output row is c whatever the causal mask, the chunks or the head mapping: a row that is not c was written
    by no program (a grid too small, TODO 7).
    The inputs are drawn only when the probe runs (on a mismatch), so the checks' own inputs stay as they were."""
    n = 100
    hint = ctx.t(
        "every value row is the same vector c, so every output row must be c whatever the mask: the rows that are "
        "not were written by no program. The launch geometry (TODO 7): the decode grid "
        "(B·Hkv, num_splits, cdiv(GROUP·MQ, BLOCK_H)) and combine_grid, one program per output row: B·Hq·MQ, the new "
        "tokens included",
        "所有值行都是同一个向量 c，所以不管掩码如何，每个输出行都必须是 c：不是 c 的行没有任何 program 写过。"
        "问题在启动的几何形状（TODO 7）：decode kernel 的 grid (B·Hkv, num_splits, cdiv(GROUP·MQ, BLOCK_H))，"
        "以及 combine_grid，每个输出行一个 program：B·Hq·MQ，新 token 也算在内")

    def probe():
        q, k, v, seqlens = decode_inputs(ctx, B, HQ, HKV, MQ, [n] * B, d, capacity=n + 512)
        k = ctx.randn(*k.shape, dtype=k.dtype)
        v = ctx.randn(d, dtype=v.dtype).expand(v.shape).contiguous()
        expect_decode(ctx, q, k, v, seqlens, hint=hint)

    return (ctx.t(f"every output row written (B={B}, Hq={HQ}, Hkv={HKV}, Mq={MQ}, every value row the same vector c, "
                  "so each output row is c whatever the mask)",
                  f"每个输出行都被写出（B={B}，Hq={HQ}，Hkv={HKV}，Mq={MQ}，所有值行都是同一个向量 c，"
                  "所以不管掩码如何，每个输出行都是 c）"), probe)


def split_diagnosis(ctx, d, dtype):
    """Why several splits are wrong when one is right, from probes whose chunk weights are known whatever BLOCK_N is:
    a power-of-two length cut into 2 or 4 splits gives equal chunks (BLOCK_N divides a quarter of it). A: q = 0, every
    score 0: every chunk weighs the same, so only the chunks, the grid and the merge's normalisation matter. B: scores 0
    on the first half and 1 on the second (natural units): the halves' running maxima differ, their sums do not. C:
    every score 0 but on three quarters of the second half (-20): the maxima are equal, the sums differ. A wrong merge
    (TODO 1) weighs B and C wrongly; a wrong partial lse (TODO 6) only one of them (without the max m_i: B; not log2 of
    the sum: C)."""
    n = ctx.pick(gpu=4096, interpreter=256)
    seqlens = torch.tensor([n], dtype=torch.int32)
    plus_minus = torch.ones(1, 1, n, d)
    plus_minus[:, :, n // 2:] = -1.0                     # V = +1 on the first half, -1 on the second
    probe = lambda q, k, v, splits: attempt(lambda: expect_decode(ctx, q.to(dtype), k.to(dtype), v.to(dtype), seqlens,
                                                                  num_splits=splits))
    zeros = torch.zeros(1, 1, 1, d)
    for splits in (2, 4):
        if probe(zeros, ctx.randn(1, 1, n, d), ctx.randn(1, 1, n, d), splits):
            return ctx.t(
                f"with q = 0 every key scores the same and every chunk of a {n}-key cache weighs the same, yet "
                f"num_splits={splits} is wrong: the chunks, the grid or the merge's normalisation. Each split reads "
                "its own run of whole tiles, "
                "none twice and none missed (TODO 3); the decode grid has num_splits programs on its second axis "
                "(TODO 7); the merge divides by the sum of the weights (TODO 1)",
                f"q = 0 时每个键的分数都一样，{n} 个键的缓存的每一段权重也都一样，可 num_splits={splits} 仍然不对：问题在分段、"
                "grid 或合并时的归一化。每一段读它自己的一串完整 tile，不重复也不遗漏（TODO 3）；decode kernel 的 grid 第二维有 num_splits"
                " 个 program（TODO 7）；合并时要除以权重之和（TODO 1）")
    q = torch.zeros(1, 1, 1, d)
    q[..., 0] = 1.0
    k_max = torch.zeros(1, 1, n, d)
    k_max[:, :, n // 2:, 0] = math.sqrt(d)               # score q·k/sqrt(d) = 1 on the second half: maxima differ
    k_sum = torch.zeros(1, 1, n, d)
    k_sum[:, :, n // 2 + n // 8:, 0] = -20 * math.sqrt(d)   # score -20 but on n/8 keys of the second half: sums differ
    wrong_max, wrong_sum = probe(q, k_max, plus_minus, 2), probe(q, k_sum, plus_minus, 2)
    if wrong_max and wrong_sum:
        return ctx.t(
            "every chunk's own result is right (chunks that weigh the same merge right), but chunks that should weigh "
            "differently are merged with the wrong weights: split s weighs 2^(lse_s - the largest lse), in base 2 as "
            "the kernel's lse is (tl.math.exp2, not tl.exp), and the merged row is the weighted sum over the sum of "
            "the weights (TODO 1)",
            "每一段自己的结果是对的（权重相同的段能正确合并），但本该权重不同的段用错了权重：第 s 段的权重是 "
            "2^(lse_s - 最大的 lse)，和 kernel 写出的 lse 一样以 2 为底（tl.math.exp2，不是 tl.exp），合并后的行是加权和"
            "除以权重之和（TODO 1）")
    if wrong_max:
        return ctx.t(
            "chunks with equal maxima merge right but chunks whose maxima differ do not: the partial lse must include "
            "the chunk's running max, lse = m_i + log2(l_i) (TODO 6)",
            "最大值相同的段能正确合并，最大值不同的段却不行：部分结果的 lse 必须包含这一段的运行最大值，"
            "lse = m_i + log2(l_i)（TODO 6）")
    return ctx.t(
        "the merge weighs chunks right when their sums are equal, not otherwise: the partial lse is the base-2 log of "
        "the chunk's sum of 2^s, m_i + log2(l_i), with tl.math.log2 (TODO 6)",
        "各段的和相等时合并的权重是对的，否则就不对：部分结果的 lse 是这一段 2^s 之和以 2 为底的对数，"
        "m_i + log2(l_i)，用 tl.math.log2（TODO 6）")


# ── checks ───────────────────────────────────────────────────────────────────────────────────────────────
@lesson.check(2, "one new token, Hq = Hkv, equal lengths, one split; a given sm_scale", needs=NEEDS,
              kernels=DECODE_KERNEL, zh="一个新 token，Hq = Hkv，长度相同，一段；给定的 sm_scale")
def decode_one_split(ctx):
    for B, H, n, d, dtype, sm_scale in ctx.pick(
            gpu=[(2, 4, 1000, 128, F16, None), (1, 8, 4097, 64, F16, None), (3, 2, 777, 128, F16, 0.3),
                 (1, 4, 513, 128, F32, None)],
            interpreter=[(2, 2, 77, 32, F16, None), (1, 1, 40, 16, F32, 0.3)]):
        expect_decode(ctx, *decode_inputs(ctx, B, H, H, 1, [n] * B, d, dtype), sm_scale=sm_scale,
                      hint=ctx.t("the basic kernel: TODOs 2, 3, 5, 6 and 7", "基本的 kernel：TODO 2、3、5、6 和 7"))


def large_scores(ctx, B, H, n, d, dtype):
    """Inputs whose scores q·k·sm_scale are ordinary ones plus a level: +30 on the first half of the keys, +150 on
    the second (one column of q and of k carries it). exp2 of a base-2 score overflows fp32 past 128 (150·log2 e =
    216): only the subtracted maxima keep it finite, the running max m_i in the kernel and the largest lse in the
    merge. The halves' lse differ by 120·log2 e = 173, more than 128, so a merge that subtracts some other value
    than the largest lse (the smallest, or none) overflows too; the first half weighs e^-120, nothing."""
    q, k, v, seqlens = decode_inputs(ctx, B, H, H, 1, [n] * B, d, dtype)
    column = 16.0                                        # q's big column; k's makes the level: 16·k·sm_scale
    q[..., 0] = column
    k[:, :, :n // 2, 0] = 30 * math.sqrt(d) / column
    k[:, :, n // 2:, 0] = 150 * math.sqrt(d) / column
    return q, k, v, seqlens


@lesson.check(2, "split-KV: num_splits = 2, 7 and 1 give the same result (partials merged by log-sum-exp); scores "
                 "of 150, where exp2 overflows unless the maxima are subtracted",
              needs=NEEDS, kernels=DECODE_KERNEL,
              zh="split-KV：num_splits = 2、7 和 1 的结果相同（部分结果按 log-sum-exp 合并）；分数为 150 时，"
                 "不减去最大值 exp2 就会溢出")
def split_kv(ctx):
    # lengths of 14·32 - 5 and 28·128 - 3 keys: every split gets whole tiles, none is empty (that is empty_splits)
    for B, H, n, d, dtype, splits in ctx.pick(
            gpu=[(2, 4, 3581, 128, F16, (2, 7, 1)), (1, 2, 8191, 64, F16, (7,))],
            interpreter=[(1, 1, 443, 16, F32, (2, 7, 1))]):
        inputs = decode_inputs(ctx, B, H, H, 1, [n] * B, d, dtype)
        for num_splits in splits:
            expect_decode(ctx, *inputs, num_splits=num_splits,
                          depends=[one_split(ctx, inputs)] if num_splits != 1 else [],
                          hint=lambda: split_diagnosis(ctx, d, dtype))
    # Large scores (fp16: exact products on a GPU's tensor cores, where fp32 would round them to TF32), one split
    # first: it needs the kernel's running max and the merge's largest lse alike (a merge of one split computes
    # 2^(lse - lse_max)); then two splits of a power-of-two length, one per half, whose lse differ by 173.
    B, H, n, d = ctx.pick(gpu=(2, 3, 4096, 128), interpreter=(1, 2, 128, 16))
    inputs = large_scores(ctx, B, H, n, d, F16)
    expect_decode(ctx, *inputs, num_splits=1, hint=ctx.t(
        "the scores here reach 150 (natural units; 216 in base 2): 2^216 overflows fp32 (2^128 at most), so every "
        "exp2 must take a score minus the largest one first: in the kernel, p = 2^(qk·qk_scale - m_i) with the "
        "running max m_i in the same base-2 units as the scores, and lse = m_i + log2(l_i) (TODO 6); in the merge, "
        "w = 2^(lse - lse_max) with lse_max the largest lse (TODO 1)",
        "这里的分数高达 150（自然单位；以 2 为底是 216）：2^216 超出 fp32 的范围（最大 2^128），所以每个 exp2 都必须先"
        "减去最大的分数：kernel 里 p = 2^(qk·qk_scale - m_i)，运行最大值 m_i 和分数一样以 2 为底，lse = m_i + "
        "log2(l_i)（TODO 6）；合并时 w = 2^(lse - lse_max)，lse_max 是最大的 lse（TODO 1）"))
    expect_decode(ctx, *inputs, num_splits=2, depends=[one_split(ctx, inputs)], hint=ctx.t(
        "one split is right, two are not: the halves' lse differ by 173 (base 2), so the merge must subtract the "
        "largest lse, lse_max = max over s of lse[s], from every lse before exp2: w = 2^(lse - lse_max) (TODO 1); "
        "any other value (none, the smallest lse, or lse_max added) overflows",
        "一段是对的，两段不对：两半的 lse 相差 173（以 2 为底），所以合并时必须先从每个 lse 中减去最大的 lse，"
        "lse_max = 所有 s 上 lse[s] 的最大值，再取 exp2：w = 2^(lse - lse_max)（TODO 1）；别的值（不减、减最小的 lse、"
        "或加上 lse_max）都会溢出"))


SPLIT_CASES = [(1, 8, 131072, 132, 64), (1, 8, 4096, 132, 64), (8, 8, 16384, 132, 64), (32, 32, 4096, 132, 64),
               (1, 1, 100, 132, 32), (4, 2, 1, 132, 64), (1, 32, 65536, 40, 32), (2, 8, 1000, 4, 32),
               (1, 8, 8192, 132, 128), (64, 8, 2048, 132, 64)]


@lesson.check(1, "choose_num_splits fills the SMs with whole, non-empty chunks; num_splits=None", needs=SPLITS_NEEDS,
              zh="choose_num_splits 用整数个 tile、不空的段填满 SM；num_splits=None")
def choose_splits(ctx):
    for batch, kv_heads, n, sms, block_n in SPLIT_CASES:
        splits = ctx.call("choose_num_splits", batch, kv_heads, n, sms, block_n)
        tiles, programs = -(-n // block_n), batch * kv_heads
        what = (f"choose_num_splits(batch={batch}, kv_heads={kv_heads}, max_seqlen={n}, sm_count={sms}, "
                f"block_n={block_n})")
        if type(splits) is not int or splits < 1:
            ctx.fail(ctx.t(f"{what} returned {splits!r}: expected an int >= 1 (TODO 9)",
                           f"{what} 返回了 {splits!r}：应为 >= 1 的 int（TODO 9）"))
        if splits > min(tiles, MAX_SPLITS):
            ctx.fail(ctx.t(f"{what} = {splits}: more splits than the {min(tiles, MAX_SPLITS)} that each get a whole "
                           "tile (at most n_tiles and MAX_SPLITS, TODO 9)",
                           f"{what} = {splits}：段数比每段都能分到一个完整 tile 的 {min(tiles, MAX_SPLITS)} 段还多"
                           "（至多 n_tiles 和 MAX_SPLITS，TODO 9）"))
        if -(-tiles // -(-tiles // splits)) != splits:
            ctx.fail(ctx.t(f"{what} = {splits}: with {tiles} tiles, cdiv(n_tiles, {splits}) tiles per split leave a "
                           "split empty; lower the count to the number of chunks those tiles per split make "
                           "(section 6, TODO 9)",
                           f"{what} = {splits}：{tiles} 个 tile 时，每段 cdiv(n_tiles, {splits}) 个 tile 会留下一个空段；"
                           "把段数降到按这个每段 tile 数实际分出的段数（第 6 节，TODO 9）"))
        if programs * splits < min(sms, programs * min(tiles, MAX_SPLITS)):
            ctx.fail(ctx.t(f"{what} = {splits}: {programs * splits} programs leave some of the {sms} SMs idle (TODO 9)",
                           f"{what} = {splits}：{programs * splits} 个 program 会让 {sms} 个 SM 中的一些闲着（TODO 9）"))
        if splits > 1 and programs * splits > 16 * sms:
            ctx.fail(ctx.t(f"{what} = {splits}: {programs * splits} programs, more than 16 per SM, for chunks of "
                           f"{-(-tiles // splits)} tiles: the splits cost more than they bring (TODO 9)",
                           f"{what} = {splits}：{programs * splits} 个 program，每个 SM 超过 16 个，每段只有 "
                           f"{-(-tiles // splits)} 个 tile：分段的开销比带来的好处还大（TODO 9）"))
    B, HQ, HKV, n, d, dtype = ctx.pick(gpu=(1, 32, 8, 16384, 128, F16), interpreter=(1, 4, 1, 256, 16, F32))
    expect_decode(ctx, *decode_inputs(ctx, B, HQ, HKV, 1, [n] * B, d, dtype), num_splits=None,
                  depends=[basic_case(ctx), merge_case(ctx)],
                  hint=ctx.t("num_splits=None asks choose_num_splits for the count",
                             "num_splits=None 时由 choose_num_splits 决定段数"))
    ctx.kernels_launched_from_submission("flash_decode", ctx.last_info, DECODE_KERNEL)


@lesson.check(1, "empty chunks (sequences with fewer tiles than num_splits; rows that see none of a chunk's keys) "
                 "contribute nothing, never NaN; a sequence of length 0 gives 0", needs=NEEDS, kernels=DECODE_KERNEL,
              zh="空段（tile 数少于 num_splits 的序列；看不到一段里任何键的行）不贡献任何东西，也绝不产生 NaN；"
                 "长度为 0 的序列给出 0")
def empty_splits(ctx):
    lengths, d, splits = ctx.pick(gpu=([1, 17, 1000, 4097], 64, (7, 64)), interpreter=([1, 17, 200], 16, (4, 7)))
    inputs = decode_inputs(ctx, len(lengths), 2, 2, 1, lengths, d)
    for num_splits in splits:
        expect_decode(ctx, *inputs, num_splits=num_splits, depends=[one_split(ctx, inputs), merge_case(ctx)],
                      hint=ctx.t("TODO 6: a chunk with no visible key writes o = 0 and lse = -inf, not 0/0",
                                 "TODO 6：没有可见键的段写出 o = 0 和 lse = -inf，而不是 0/0"))
    # 8 new tokens, 70 keys: the first rows see keys up to 62, 63, … so the last chunk holds no key they see
    inputs = decode_inputs(ctx, 1, 2, 2, 8, [70], d)
    expect_decode(ctx, *inputs, num_splits=ctx.pick(gpu=2, interpreter=3),
                  depends=[rows_written(ctx, 1, 2, 2, 8, d), one_split(ctx, inputs), merge_case(ctx)],
                  hint=ctx.t("TODO 6: rows that see no key of the chunk", "TODO 6：看不到这一段任何键的行"))
    # A padding slot of the batch (cache_seqlens = 0, as in a server's batch of fixed size): no split sees a key of
    # its rows, every lse is -inf, and only the merge's guards (TODO 1) make the row 0 instead of 2^(-inf - (-inf)).
    # The chunks that are empty in rows that do see keys pass above, so what is left to blame is the merge.
    inputs = decode_inputs(ctx, 2, 2, 2, 1, [0, ctx.pick(gpu=1000, interpreter=45)], d)
    expect_decode(ctx, *inputs, num_splits=2, depends=[merge_case(ctx)], hint=ctx.t(
        "sequence 0 has no key (cache_seqlens = 0), so every lse of its rows is -inf: the merge uses 0 as the largest "
        "lse where it is -inf, and 1 as the sum of the weights where it is 0, so the row is 0, not "
        "-inf - (-inf) = NaN (TODO 1)",
        "序列 0 没有键（cache_seqlens = 0），所以它的行的每个 lse 都是 -inf：合并时最大的 lse 为 -inf 的地方用 0 代替，"
        "权重之和为 0 的地方用 1 代替，这样这一行是 0，而不是 -inf - (-inf) = NaN（TODO 1）"))


@lesson.check(2, "grouped-query attention: Hq / Hkv = 12 / 3, 16 / 2 and 80 / 1 (query head h reads KV head "
                 "h // (Hq/Hkv); a group of more than 64 rows takes two Q tiles)", needs=NEEDS, kernels=DECODE_KERNEL,
              zh="分组查询注意力：Hq / Hkv = 12 / 3、16 / 2 和 80 / 1（查询头 h 读 KV 头 h // (Hq/Hkv)；"
                 "超过 64 行的组要两个 Q tile）")
def gqa(ctx):
    # B, Hkv and the group all differ (a batch offset taken for a head offset shows), and a group of 80 query heads
    # is more rows than the largest Q tile (BLOCK_H = 64): the grid's third axis has two programs (at d = 128, so
    # that a third axis counted in tiles of BLOCK_D = 128 rows, one program, shows too)
    for B, HQ, HKV, n, d in ctx.pick(
            gpu=[(2, 16, 4, 1000, 128), (2, 32, 4, 777, 128), (1, 80, 1, 4097, 128), (3, 12, 2, 300, 64)],
            interpreter=[(2, 12, 3, 50, 16), (1, 16, 2, 40, 16), (1, 80, 1, 40, 128)]):
        expect_decode(ctx, *decode_inputs(ctx, B, HQ, HKV, 1, [n] * B, d),
                      depends=[basic_case(ctx), rows_written(ctx, B, HQ, HKV, 1, d)],
                      hint=ctx.t("TODO 2: row r of the Q tile is query head kv_head·GROUP + ⌊r / MQ⌋; TODO 7: BLOCK_H "
                                 "and the grid's third axis cover all GROUP·MQ rows",
                                 "TODO 2：Q tile 的第 r 行是查询头 kv_head·GROUP + ⌊r / MQ⌋；TODO 7：BLOCK_H 和 grid "
                                 "的第三维要覆盖全部 GROUP·MQ 行"))


@lesson.check(2, "a cache length per sequence (1, 17, 1000, 4097 in one batch); nothing read past cache_seqlens",
              needs=NEEDS, kernels=DECODE_KERNEL,
              zh="每个序列一个缓存长度（一个批里有 1、17、1000、4097）；不读 cache_seqlens 之后的任何东西")
def ragged_lengths(ctx):
    for lengths, capacity, H, d, dtype in ctx.pick(
            gpu=[([1, 17, 1000, 4097], 4200, 4, 128, F16), ([4097, 1], 4097, 2, 64, F16), ([5, 300, 129], 512, 2, 128, F32)],
            interpreter=[([1, 17, 100, 33], 110, 2, 16, F16), ([33, 1], 40, 1, 16, F32)]):
        expect_decode(ctx, *decode_inputs(ctx, len(lengths), H, H, 1, lengths, d, dtype, capacity=capacity),
                      depends=[basic_case(ctx)],
                      hint=ctx.t("each sequence's own cache_seqlens (TODO 3); loads past it must be masked",
                                 "每个序列自己的 cache_seqlens（TODO 3）；超出它的加载必须加掩码"))


@lesson.check(2, "Mq = 3 and 8 new tokens: bottom-right causal (query i sees keys j <= cache_seqlens - Mq + i), "
                 "every length modulo the tile", needs=NEEDS, kernels=DECODE_KERNEL, timeout=480,
              zh="Mq = 3 和 8 个新 token：右下对齐的因果掩码（查询 i 看到键 j <= cache_seqlens - Mq + i），"
                 "长度对 tile 取模的每个余数")
def causal(ctx):
    # One call per residue of the length modulo the tile (32 keys in the interpreter, up to 128 on a GPU), so that the
    # causal boundary falls on every position of a tile, plus a cache that holds only the new tokens.
    block, base, d = ctx.pick(gpu=(128, 1024, 64), interpreter=(32, 32, 16))
    for mq in (3, 8):
        for n in [mq] + [base + mq + r for r in range(block)]:
            expect_decode(ctx, *decode_inputs(ctx, 1, 1, 1, mq, [n], d),
                          depends=[basic_case(ctx), rows_written(ctx, 1, 1, 1, mq, d)],
                          hint=ctx.t("TODO 4 (mask_start) and TODO 5 (the causal mask)",
                                     "TODO 4（mask_start）和 TODO 5（因果掩码）"))
    d = ctx.pick(gpu=128, interpreter=16)
    # GQA rows with several new tokens; then 22 query heads × 3 tokens = 66 rows per KV head, more than the largest
    # Q tile (BLOCK_H = 64): two programs on the grid's third axis, whose count is cdiv(GROUP·MQ, BLOCK_H)
    for B, HQ, HKV, n in [(2, 8, 2, 45), (1, 22, 1, 45)]:
        expect_decode(ctx, *decode_inputs(ctx, B, HQ, HKV, 3, [n] * B, d),
                      depends=[basic_case(ctx), rows_written(ctx, B, HQ, HKV, 3, d)],
                      hint=ctx.t("with GQA rows: token = r % MQ (TODO 2), the mask per row (TODO 5)",
                                 "带 GQA 的行：token = r % MQ（TODO 2），每一行的掩码（TODO 5）"))


@lesson.check(2, "a paged cache: page sizes smaller and larger than a tile, shuffled page table with unused pages, "
                 "lengths ending mid-page; then every dimension above 1 at once", needs=PAGED_NEEDS,
              kernels=DECODE_KERNEL,
              zh="分页缓存：页比 tile 小和比 tile 大，页表打乱且有未使用的页，长度结束在页中间；"
                 "然后所有维度同时大于 1")
def paged(ctx):
    for page_size, B, n, d in ctx.pick(gpu=[(16, 3, 1000, 128), (256, 2, 4097, 128), (16, 1, 17, 64)],
                                       interpreter=[(8, 2, 77, 16), (48, 2, 130, 16)]):
        # room for twice the keys: the table's second half points at an unused (NaN) page
        q, k, v, seqlens = decode_inputs(ctx, B, 2, 2, 1, [n] * B, d, capacity=2 * n)
        k_pages, v_pages, table = to_paged(ctx, k, v, [n] * B, page_size)
        contiguous = (ctx.t("the same cache, contiguous", "同一个缓存的连续版本"),
                      lambda: expect_decode(ctx, q, k, v, seqlens))
        expect_decode(ctx, q, k_pages, v_pages, seqlens, block_table=table, depends=[contiguous],
                      hint=ctx.t("TODO 8: page block_table[b, key // page_size], row key % page_size, for every key",
                                 "TODO 8：对每个键，页 block_table[b, key // page_size]，行 key % page_size"))
        # A copy of the cache gathered through the whole table is larger than the pool. (The interpreter copies
        # every input, the pool included, so only a GPU sees a smaller gather.)
        limit = B * n * 2 * d if ctx.gpu else k_pages.numel() + 1
        if ctx.last_info["largest_numel"] >= limit:
            ctx.fail(ctx.t(f"{describe(ctx, q, k_pages, seqlens, table)}: `flash_decode` created a tensor of shape "
                           f"{ctx.last_info['largest_shape']}, as large as the cache itself: read the pages through "
                           "the page table inside the kernel (TODO 8), don't gather them into a contiguous copy",
                           f"{describe(ctx, q, k_pages, seqlens, table)}：`flash_decode` 创建了一个形状为 "
                           f"{ctx.last_info['largest_shape']} 的张量，和缓存本身一样大：要在 kernel 里通过页表读取各页"
                           "（TODO 8），不要把它们收集成一个连续的副本"))
    # Every indexed dimension above 1 and each of its own size (issue 24), so that an offset or a stride taken for
    # another's shows: B, Hkv, GROUP = Hq/Hkv, Mq, num_splits, pages per sequence, page size and d all differ (and
    # differ from BLOCK_N and the length). Every split gets whole tiles, none empty (n = 170 is 6 tiles of 32; 1000
    # is 16 of 64). On a GPU GROUP·Mq = 72 rows per KV head: two Q tiles of BLOCK_H = 64. The interpreter keeps 20
    # (more than 64 rows per KV head, with B and Hkv above 1, takes some 400 combine programs, 2 s there): gqa and
    # causal have its groups of more than 64 rows.
    B, HKV, group, mq, splits, page_size, n, d = ctx.pick(gpu=(3, 2, 12, 6, 4, 16, 1000, 128),
                                                          interpreter=(2, 3, 4, 5, 6, 7, 170, 16))
    q, k, v, seqlens = decode_inputs(ctx, B, HKV * group, HKV, mq, [n] * B, d, capacity=n + 5 * page_size)
    k_pages, v_pages, table = to_paged(ctx, k, v, [n] * B, page_size)
    contiguous = (ctx.t(f"the same cache, contiguous, with num_splits={splits} (what checks gqa, causal and split_kv "
                        "test, together)", f"同一个缓存的连续版本，num_splits={splits}（检查 gqa、causal 和 split_kv "
                        "合起来测的东西）"),
                  lambda: expect_decode(ctx, q, k, v, seqlens, num_splits=splits))
    expect_decode(ctx, q, k_pages, v_pages, seqlens, block_table=table, num_splits=splits, depends=[contiguous],
                  hint=ctx.t("the contiguous cache gives the right result: TODO 8, the page of each key of each "
                             "sequence b (block_table[b, key // page_size]), its row key % page_size, and the page "
                             "strides of K and V (stride_kb, stride_vb; a paged cache's head stride is not its page "
                             "stride)",
                             "连续缓存的结果是对的：问题在 TODO 8，每个序列 b 的每个键所在的页（block_table[b, key // "
                             "page_size]）、它的行 key % page_size，以及 K 和 V 的页步长（stride_kb、stride_vb；分页缓存的"
                             "头步长不是页步长）"))


@lesson.check(1, "head dims 64, 128 and ones that are not a power of two (padded to BLOCK_D and masked); q's own "
                 "head-dim stride", needs=NEEDS, kernels=DECODE_KERNEL,
              zh="头维度 64、128 以及不是 2 的幂的头维度（补齐到 BLOCK_D 并加掩码）；q 自己的头维度步长")
def head_dims(ctx):
    for d, n, dtype in ctx.pick(gpu=[(64, 1000, F16), (128, 1000, F16), (80, 777, F16), (96, 513, F16)],
                                interpreter=[(64, 40, F32), (40, 50, F16), (24, 33, F32)]):
        expect_decode(ctx, *decode_inputs(ctx, 2, 2, 2, 1, [n] * 2, d, dtype),
                      hint=ctx.t("every load and store of the head dim needs d_mask",
                                 "头维度上的每次加载和写入都需要 d_mask"))
    # q as every other column of a wider tensor (head-dim stride 2, NaN in the columns between), the cache
    # contiguous (stride 1): a q load that takes K's or V's head-dim stride for stride_qd reads NaN (issue 24)
    d, n = ctx.pick(gpu=(128, 1000), interpreter=(24, 33))
    q, k, v, seqlens = decode_inputs(ctx, 2, 4, 2, 1, [n] * 2, d)
    wide = torch.full((*q.shape[:3], 2 * d), float("nan"), dtype=q.dtype)
    wide[..., ::2] = q
    expect_decode(ctx, wide[..., ::2], k, v, seqlens, depends=[basic_case(ctx)],
                  hint=ctx.t("q here is a view whose head-dim elements are 2 apart (q.stride() = "
                             f"{wide[..., ::2].stride()}), the cache's are 1 apart: TODO 2's q pointers step through "
                             "the head dim by q's own stride, stride_qd",
                             "这里的 q 是一个视图，头维度上相邻元素相隔 2（q.stride() = "
                             f"{wide[..., ::2].stride()}），缓存的相隔 1：TODO 2 里 q 的指针沿头维度要按 q 自己的步长 "
                             "stride_qd 前进"))


@lesson.check(1, "fp32 and fp16 inputs; the output has q's dtype (TF32 error allowed on a GPU)", needs=NEEDS,
              kernels=DECODE_KERNEL, zh="fp32 和 fp16 输入；输出为 q 的 dtype（GPU 上允许 TF32 的误差）")
def dtypes(ctx):
    for B, H, n, d, dtype in ctx.pick(gpu=[(2, 4, 1000, 128, F32), (1, 2, 513, 64, F16), (1, 2, 300, 80, F32)],
                                      interpreter=[(1, 2, 70, 32, F32), (1, 2, 45, 32, F16)]):
        expect_decode(ctx, *decode_inputs(ctx, B, H, H, 1, [n] * B, d, dtype))


@lesson.check(1, "bf16 inputs (GPU only: the interpreter's bf16 tl.dot is broken)", needs=NEEDS, kernels=DECODE_KERNEL,
              modes=("gpu",), zh="bf16 输入（仅 GPU：解释器里 bf16 的 tl.dot 是坏的）")
def bf16(ctx):
    for B, H, n, d in [(2, 4, 1000, 128), (1, 2, 4097, 64)]:
        expect_decode(ctx, *decode_inputs(ctx, B, H, H, 1, [n] * B, d, BF16))


@lesson.check(1, "flash_decode launches both kernels and computes no attention, softmax or matrix product with "
                 "PyTorch", needs=NEEDS, kernels=KERNELS,
              zh="flash_decode 启动了两个 kernel，没有用 PyTorch 计算注意力、softmax 或矩阵乘法")
def anti_cheat(ctx):
    # 32 query heads on one KV head of d = 16: one score per (query, key) outnumbers the cache's elements, so a score
    # matrix or an expanded cache is the largest tensor created (the interpreter's copies of the inputs are smaller)
    B, HQ, HKV, n, d, dtype = ctx.pick(gpu=(1, 32, 1, 1000, 16, F16), interpreter=(1, 32, 1, 300, 16, F32))
    q, k, v, seqlens = decode_inputs(ctx, B, HQ, HKV, 1, [n], d, dtype)
    expect_decode(ctx, q, k, v, seqlens, num_splits=2)  # both kernels launched, nothing forbidden (ctx.call)
    scores = B * HQ * n
    if ctx.last_info["largest_numel"] >= scores:
        ctx.fail(ctx.t(f"{describe(ctx, q, k, seqlens, num_splits=2)}: `flash_decode` created a tensor of shape "
                       f"{ctx.last_info['largest_shape']} ({ctx.last_info['largest_numel']} elements, at least one per "
                       f"(query, key): {scores}): scores and expanded caches must stay inside your kernel",
                       f"{describe(ctx, q, k, seqlens, num_splits=2)}：`flash_decode` 创建了一个形状为 "
                       f"{ctx.last_info['largest_shape']} 的张量（{ctx.last_info['largest_numel']} 个元素，不少于每个"
                       f"（查询, 键）一个：{scores}）：分数和展开后的缓存都必须留在你的 kernel 里面"))


SPEED_NEEDED = 0.4  # at least this × the reference solution's speed


@lesson.check(1, f"speed: at least {SPEED_NEEDED:g}× the reference solution (B=1, 32k tokens and B=8 paged, GPU only)",
              needs=PAGED_NEEDS + ("choose_num_splits",), modes=("gpu",), timeout=480,
              zh=f"速度：至少为参考实现的 {SPEED_NEEDED:g} 倍（B=1、32k token，以及 B=8 分页缓存，仅 GPU）")
def speed(ctx):
    HQ, HKV, d = 32, 8, 128
    group = HQ // HKV
    ctx.load_reference()
    cases = []
    for B, n, page_size in [(1, 32768, None), (8, 8192, 16)]:
        q, k, v, seqlens = decode_inputs(ctx, B, HQ, HKV, 1, [n] * B, d)
        table = None
        if page_size:
            k, v, table = to_paged(ctx, k, v, [n] * B, page_size, spare_pages=1)
        kwargs = {"num_splits": None} if table is None else {"num_splits": None, "block_table": table}
        out = ctx.call("flash_decode", q, k, v, seqlens, **kwargs)  # correct first (one KV group), nothing forbidden
        ctx.kernels_launched_from_submission("flash_decode", ctx.last_info, KERNELS)
        if table is None:
            exact, same = reference(q[:, :group], k[:, :1], v[:, :1], seqlens)
        else:
            exact, same = reference(q[:, :group], k[:, :, :1], v[:, :, :1], seqlens, table)
        ctx.expect_close(out[:, :group], exact, same_precision=same, floor=floor_for(ctx, F16),
                         what=describe(ctx, q, k, seqlens, table, None) + ctx.t(", query heads of KV head 0",
                                                                                "，KV 头 0 的那些查询头"))
        ctx.warm_up("flash_decode", q, k, v, seqlens, key="reference", **kwargs)  # compiled now; timed below, alone
        cases.append((B, n, page_size, q, k, v, seqlens, kwargs))
    reports, problems = [], []
    for B, n, page_size, q, k, v, seqlens, kwargs in cases:
        student, reference_ms = ctx.bench_against_reference("flash_decode", q, k, v, seqlens,
                                                            slowdown_allowed=1 / SPEED_NEEDED, **kwargs)
        gbps = 2 * B * n * HKV * d * 2 / student / 1e6
        paged_note = ctx.t(f", paged {page_size}", f"，分页 {page_size}") if page_size else ""
        part = f"B={B}, N={n}{paged_note}"
        reports.append(ctx.t(f"{part}: {student * 1e3:.0f} µs ({gbps:.0f} GB/s) vs reference {reference_ms * 1e3:.0f} µs",
                             f"{part}：{student * 1e3:.0f} µs（{gbps:.0f} GB/s），参考实现 {reference_ms * 1e3:.0f} µs"))
        if reference_ms / student < SPEED_NEEDED:
            problems.append(ctx.t(f"{part} runs at {reference_ms / student:.2f}× the reference's speed",
                                  f"{part} 的速度是参考实现的 {reference_ms / student:.2f} 倍"))
    summary = "; ".join(reports)
    if problems:
        ctx.fail("; ".join(problems) + ctx.t(
            f" (at least {SPEED_NEEDED:g}× is needed: {summary}). A decode step with few "
            "sequences needs many programs: are the splits of num_splits=None (TODO 9) in the grid (TODO 7)? Are "
            "the K/V tiles loaded once per KV head (TODO 2)?",
            f"（至少需要 {SPEED_NEEDED:g} 倍：{summary}）。序列很少的解码步需要很多 program：num_splits=None 的段数"
            "（TODO 9）用在 grid 里了吗（TODO 7）？K/V tile 是不是每个 KV 头只加载一次（TODO 2）？"))
    return summary


DECODE_ARGS = (["Q", "K", "V", "Seqlens", "Block_table", "Out_part", "Lse_part", "qk_scale"]
               + [f"stride_{t}{a}" for t in "qkv" for a in ("b", "h", "m" if t == "q" else "n", "d")]
               + ["stride_btb", "HKV", "GROUP", "MQ"])
# The H200 table's configs: (dtype, HEAD_DIM, BLOCK_D, BLOCK_H, BLOCK_N, PAGED, PAGE_SIZE, num_warps, num_stages)
CONTIGUOUS_CONFIG = ("fp16", 128, 128, 16, 64, False, 1, 2, 2)
PAGED_CONFIG = ("bf16", 80, 128, 32, 64, True, 16, 4, 2)


def decode_signature(dtype, head_dim, block_d, block_h, block_n, paged, page_size):
    """(signature, constexprs) of flash_decode_kernel for an ahead-of-time compile, by the notebook's names."""
    signature = {name: "i32" for name in DECODE_ARGS}
    signature.update({"Q": f"*{dtype}", "K": f"*{dtype}", "V": f"*{dtype}", "Seqlens": "*i32",
                      "Block_table": "*i32", "Out_part": "*fp32", "Lse_part": "*fp32", "qk_scale": "fp32"})
    constexprs = {"HEAD_DIM": head_dim, "BLOCK_D": block_d, "BLOCK_H": block_h, "BLOCK_N": block_n,
                  "PAGED": paged, "PAGE_SIZE": page_size}
    signature.update({name: "constexpr" for name in constexprs})
    return signature, constexprs


def compile_decode_kernel(ctx, compile):
    """`compile()` (ctx.aot or ctx.ttir of flash_decode_kernel); a parameter name the check does not know is said
    in words."""
    try:
        return compile()
    except Exception as error:
        text = str(error)
        if re.search(r"KeyError|is\snot\sin\slist", text):   # a parameter name the check does not know
            ctx.fail(ctx.t(f"{text}\n(the check compiles the kernel with the notebook's parameter names "
                           f"{', '.join(DECODE_ARGS)}: keep the kernel's signature as given)",
                           f"{text}\n（这个检查用笔记本里的参数名 {', '.join(DECODE_ARGS)} 编译 kernel："
                           "请保持 kernel 的签名和给出的一样）"))
        raise


@lesson.check(1, "the kernels compile for sm_80 and sm_90 GPUs (fp16 and bf16, contiguous and paged)",
              needs=PAGED_NEEDS, modes=("gpu", "interpreter", "structure"), compile_only=True, timeout=400,
              zh="kernel 能为 sm_80 和 sm_90 GPU 编译（fp16 和 bf16，连续和分页）")
def compiles(ctx):
    notes = []
    for dtype, head_dim, block_d, block_h, block_n, paged, page_size, warps, stages in (CONTIGUOUS_CONFIG,
                                                                                         PAGED_CONFIG):
        signature, constexprs = decode_signature(dtype, head_dim, block_d, block_h, block_n, paged, page_size)
        shared = compile_decode_kernel(ctx, lambda: ctx.aot("flash_decode_kernel", signature, constexprs,
                                                            num_warps=warps, num_stages=stages))
        layout = ctx.t("paged", "分页") if paged else ctx.t("contiguous", "连续")
        notes.append(f"flash_decode_kernel {dtype} d={head_dim} {layout}" + ctx.t(": ", "：") + f"{shared[90] // 1024} KB")
    ctx.aot("combine_kernel", {"Out_part": "*fp32", "Lse_part": "*fp32", "Out": "*bf16", "NUM_SPLITS": "i32",
                               "HEAD_DIM": "constexpr", "BLOCK_D": "constexpr", "BLOCK_S": "constexpr"},
            {"HEAD_DIM": 80, "BLOCK_D": 128, "BLOCK_S": 64}, num_warps=4)
    return ctx.t("shared memory on sm_90: " + "; ".join(notes) + "; combine_kernel bf16 compiles",
                 "sm_90 上的共享内存：" + "；".join(notes) + "；combine_kernel bf16 能编译")


# ── 64-bit page offsets, read in the kernel's Triton IR ──────────────────────────────────────────────────────
# A pool whose offsets pass 2^31 elements (4 GiB of fp16) is more than a check can allocate, and the interpreter
# computes in numpy's int64 whatever the code says. What the GPU runs is in the TTIR (the kernel compiled for sm_90,
# inlined, before any lowering): one SSA op a line, e.g. (the reference, paged_row_offsets inlined)
#   %page_94 = tt.load %page_93, %key_mask_88, %cst_0 : tensor<64x!tt.ptr<i32>> loc(#loc295)
#   %offsets = arith.extsi %page_94 : tensor<64xi32> to tensor<64xi64> loc(#loc296)
#   %offsets_95 = arith.extsi %stride_kb : i32 to i64 loc(#loc297)
#   %offsets_96 = tt.splat %offsets_95 : i64 -> tensor<64xi64> loc(#loc297)
#   %offsets_97 = arith.muli %offsets, %offsets_96 : tensor<64xi64> loc(#loc297)
# and without the `.to(tl.int64)`: `%offsets_95 = arith.muli %page_94, %offsets : tensor<64xi32>`. The lines are
# followed in order (a name can be defined again in a sibling region: the second stage's loop), tracking for each
# value the kernel arguments it is computed from and whether it is computed from a page number (a value loaded
# through a pointer into Block_table); every integer product of a page number by a run-time value must be i64.
_TTIR_OP = re.compile(r"^\s*(%[\w.$-]+)(?::\d+)?\s*=\s*([\w.]+)\b(.*)$")
_TTIR_VALUE = re.compile(r"%[\w.$-]+")
_TTIR_LOC = re.compile(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$")


def ttir_source_line(ttir, loc):
    """The line of the program that `#locN` points at (through names and call sites: the callee's line), or None."""
    table = {m.group(1): m.group(2) for m in map(_TTIR_LOC.match, ttir.splitlines()) if m}
    for _ in range(100):
        body = table.get(loc)
        if body is None:
            return None
        place = re.match(r'^"[^"]*":(\d+):\d+$', body)
        if place:
            return int(place.group(1))
        inner = re.match(r'^(?:"[^"]*"\(|callsite\()(#loc\d*)', body)
        if not inner:
            return None
        loc = inner.group(1)
    return None


def page_products_in_32_bits(ttir, kernel, arguments):
    """[(TTIR op, program line or None, the kernel arguments of the other factor)] for each integer product of a
    page number (loaded from Block_table, or computed from one) by a run-time value that the kernel's TTIR computes
    in fewer than 64 bits. `arguments`: the kernel's run-time parameters in order (the TTIR function's operands)."""
    lines = ttir.splitlines()
    header = next((line for line in lines if re.search(rf"tt\.func\b.*@{re.escape(kernel)}\(", line)), None)
    if header is None:
        raise ValueError(f"tt.func @{kernel}: absent")  # the grader's own failure, not the learner's
    params = re.findall(r"(%[\w.$-]+):", header[header.index("(") + 1:])   # %Q or %arg0: by position
    sources = {name: {argument} for name, argument in zip(params, arguments)}
    page, found = set(), []
    for line in lines:
        match = _TTIR_OP.match(line)
        if not match:
            continue
        result, op, rest = match.groups()
        code = rest.split(" loc(")[0]
        operands = [value.split("#")[0] for value in _TTIR_VALUE.findall(code)]
        uses = set().union(*(sources.get(value, set()) for value in operands))
        if op == "tt.load":   # from the page table: a page number; any other load gives data, not an offset
            sources[result] = set()
            page.discard(result)
            if operands and "Block_table" in sources.get(operands[0], set()):
                page.add(result)
            continue
        sources[result] = uses
        if not any(value in page for value in operands):
            page.discard(result)
            continue
        page.add(result)
        width = re.search(r"i(\d+)>?$", code.strip())
        if op in ("arith.muli", "arith.shli") and uses and width and int(width.group(1)) < 64:
            loc = re.search(r"loc\((#loc\d*)\)\s*$", line)
            found.append((f"{result} = {op}{code}".strip(), ttir_source_line(ttir, loc.group(1)) if loc else None,
                          sorted(uses)))
    return found


@lesson.check(1, "page offsets in 64-bit integers: the page number times the page stride (read in the kernel's "
                 "Triton IR for sm_90)", needs=PAGED_NEEDS, modes=("gpu", "interpreter", "structure"),
              compile_only=True, timeout=400,
              zh="页偏移用 64 位整数：页号乘以页步长（从 kernel 为 sm_90 编译的 Triton IR 中读出）")
def page_offsets_64bit(ctx):
    from ..worker import cell_and_line
    dtype, head_dim, block_d, block_h, block_n, paged, page_size, warps, stages = PAGED_CONFIG  # as compiles: cached
    signature, constexprs = decode_signature(dtype, head_dim, block_d, block_h, block_n, paged, page_size)
    ttir = compile_decode_kernel(ctx, lambda: ctx.ttir("flash_decode_kernel", signature, constexprs, capability=90,
                                                       num_warps=warps, num_stages=stages))
    found = page_products_in_32_bits(ttir, "flash_decode_kernel", DECODE_ARGS)
    if not found:
        return None
    op, line, uses = found[0]
    program_lines = ctx.program.split("\n")
    code = program_lines[line - 1].strip() if line and line <= len(program_lines) else ""
    where = (cell_and_line(ctx.program, line, ctx.language) + ": `" + code + "`") if code else ""
    stride = ", ".join(uses)
    tensor = {"stride_kb": "K", "stride_vb": "V"}
    named = [tensor[u] for u in uses if u in tensor]
    what = (ctx.t(f"the page offset of {' and '.join(named)} (page number × {stride})",
                  f"{'、'.join(named)} 的页偏移（页号 × {stride}）") if named
            else ctx.t(f"a page number times {stride}", f"页号乘以 {stride}"))
    ctx.fail(ctx.t(
        f"{what} is computed in 32-bit integers{' (' + where + ')' if where else ''}; the kernel's Triton IR for "
        f"sm_90 has `{op}`. In a large pool a page number times the page stride passes 2^31 (from page 131072 on "
        "with 16 tokens, 8 KV heads and d = 128) and int32 wraps around to a wrong, negative offset: convert the "
        "page number with `.to(tl.int64)` before multiplying (TODO 8 in `paged_row_offsets`); converting the "
        "product afterwards is too late, it has wrapped already",
        f"{what} 是用 32 位整数计算的{'（' + where + '）' if where else ''}；kernel 为 sm_90 编译的 Triton IR 里是 "
        f"`{op}`。在大的页池里，页号乘以页步长会超过 2^31（16 个 token 一页、8 个 KV 头、d = 128 时从第 131072 页起），"
        "int32 会回绕成一个错误的负偏移：先用 `.to(tl.int64)` 转换页号再相乘（`paged_row_offsets` 中的 TODO 8）；"
        "相乘之后再转换乘积就太晚了，它已经回绕了"))


# ── memory safety (issue 24): every access inside the tensors, even one whose value is thrown away ──
def memory_calls(ctx, call):
    # the second sequence fills its cache (a read past it is outside), d = 12 padding lanes, GROUP·Mq = 9 rows of a
    # 16-row Q tile, splits of uneven length; then the same through a page table whose rows end mid-page
    lengths = [19, 45]
    q, k, v, seqlens = decode_inputs(ctx, 2, 6, 2, 3, lengths, 12)
    call("flash_decode", q, k, v, seqlens, num_splits=3)
    k_pages, v_pages, table = to_paged(ctx, k, v, lengths, 8)
    call("flash_decode", q, k_pages, v_pages, seqlens, block_table=table, num_splits=2)


add_memory_check(lesson, PAGED_NEEDS, KERNELS, memory_calls)

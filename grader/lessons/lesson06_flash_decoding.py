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
"""
import math
import re

import torch

from ..harness import TORCH_DOES_THE_WORK, CheckFailed, Lesson

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
    """A dependency of the checks with Mq > 1: the launch geometry. Every value row is the same vector c (finite well
    past the length, so a mask that reads a tile too far still finds c), so each output row is c whatever the causal
    mask, the chunks or the head mapping: a row that is not c was written by no program (a grid too small, TODO 7).
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


@lesson.check(2, "split-KV: num_splits = 2, 7 and 1 give the same result (partials merged by log-sum-exp)",
              needs=NEEDS, kernels=DECODE_KERNEL,
              zh="split-KV：num_splits = 2、7 和 1 的结果相同（部分结果按 log-sum-exp 合并）")
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
                 "contribute nothing, never NaN", needs=NEEDS, kernels=DECODE_KERNEL,
              zh="空段（tile 数少于 num_splits 的序列；看不到一段里任何键的行）不贡献任何东西，也绝不产生 NaN")
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


@lesson.check(2, "grouped-query attention: Hq / Hkv = 4, 8 and 32 / 1 (query head h reads KV head h // (Hq/Hkv))",
              needs=NEEDS, kernels=DECODE_KERNEL,
              zh="分组查询注意力：Hq / Hkv = 4、8 和 32 / 1（查询头 h 读 KV 头 h // (Hq/Hkv)）")
def gqa(ctx):
    for B, HQ, HKV, n, d in ctx.pick(
            gpu=[(2, 16, 4, 1000, 128), (2, 32, 4, 777, 128), (1, 32, 1, 4097, 64), (2, 8, 2, 300, 64)],
            interpreter=[(1, 8, 2, 50, 16), (1, 16, 2, 40, 16), (1, 32, 1, 40, 16)]):
        expect_decode(ctx, *decode_inputs(ctx, B, HQ, HKV, 1, [n] * B, d), depends=[basic_case(ctx)],
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
    expect_decode(ctx, *decode_inputs(ctx, 2, 8, 2, 3, [45, 45], d),
                  depends=[basic_case(ctx), rows_written(ctx, 2, 8, 2, 3, d)],
                  hint=ctx.t("with GQA rows: token = r % MQ (TODO 2), the mask per row (TODO 5)",
                             "带 GQA 的行：token = r % MQ（TODO 2），每一行的掩码（TODO 5）"))


@lesson.check(2, "a paged cache: page sizes smaller and larger than a tile, shuffled page table with unused pages, "
                 "lengths ending mid-page", needs=PAGED_NEEDS, kernels=DECODE_KERNEL,
              zh="分页缓存：页比 tile 小和比 tile 大，页表打乱且有未使用的页，长度结束在页中间")
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


@lesson.check(1, "head dims 64, 128 and ones that are not a power of two (padded to BLOCK_D and masked)", needs=NEEDS,
              kernels=DECODE_KERNEL, zh="头维度 64、128 以及不是 2 的幂的头维度（补齐到 BLOCK_D 并加掩码）")
def head_dims(ctx):
    for d, n, dtype in ctx.pick(gpu=[(64, 1000, F16), (128, 1000, F16), (80, 777, F16), (96, 513, F16)],
                                interpreter=[(64, 40, F32), (40, 50, F16), (24, 33, F32)]):
        expect_decode(ctx, *decode_inputs(ctx, 2, 2, 2, 1, [n] * 2, d, dtype),
                      hint=ctx.t("every load and store of the head dim needs d_mask",
                                 "头维度上的每次加载和写入都需要 d_mask"))


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
    reports, problems = [], []
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


@lesson.check(1, "the kernels compile for sm_80 and sm_90 GPUs (fp16 and bf16, contiguous and paged)",
              needs=PAGED_NEEDS, modes=("gpu", "interpreter", "structure"), compile_only=True, timeout=400,
              zh="kernel 能为 sm_80 和 sm_90 GPU 编译（fp16 和 bf16，连续和分页）")
def compiles(ctx):
    notes = []
    # (dtype, HEAD_DIM, BLOCK_D, BLOCK_H, BLOCK_N, PAGED, PAGE_SIZE, num_warps, num_stages): the H200 table's configs
    for dtype, head_dim, block_d, block_h, block_n, paged, page_size, warps, stages in (
            ("fp16", 128, 128, 16, 64, False, 1, 2, 2), ("bf16", 80, 128, 32, 64, True, 16, 4, 2)):
        signature = {name: "i32" for name in DECODE_ARGS}
        signature.update({"Q": f"*{dtype}", "K": f"*{dtype}", "V": f"*{dtype}", "Seqlens": "*i32",
                          "Block_table": "*i32", "Out_part": "*fp32", "Lse_part": "*fp32", "qk_scale": "fp32"})
        constexprs = {"HEAD_DIM": head_dim, "BLOCK_D": block_d, "BLOCK_H": block_h, "BLOCK_N": block_n,
                      "PAGED": paged, "PAGE_SIZE": page_size}
        signature.update({name: "constexpr" for name in constexprs})
        try:
            shared = ctx.aot("flash_decode_kernel", signature, constexprs, num_warps=warps, num_stages=stages)
        except Exception as error:
            text = str(error)
            if re.search(r"KeyError|is\snot\sin\slist", text):   # a parameter name the check does not know
                ctx.fail(ctx.t(f"{text}\n(the check compiles the kernel with the notebook's parameter names "
                               f"{', '.join(DECODE_ARGS)}: keep the kernel's signature as given)",
                               f"{text}\n（这个检查用笔记本里的参数名 {', '.join(DECODE_ARGS)} 编译 kernel："
                               "请保持 kernel 的签名和给出的一样）"))
            raise
        layout = ctx.t("paged", "分页") if paged else ctx.t("contiguous", "连续")
        notes.append(f"flash_decode_kernel {dtype} d={head_dim} {layout}" + ctx.t(": ", "：") + f"{shared[90] // 1024} KB")
    ctx.aot("combine_kernel", {"Out_part": "*fp32", "Lse_part": "*fp32", "Out": "*bf16", "NUM_SPLITS": "i32",
                               "HEAD_DIM": "constexpr", "BLOCK_D": "constexpr", "BLOCK_S": "constexpr"},
            {"HEAD_DIM": 80, "BLOCK_D": 128, "BLOCK_S": 64}, num_warps=4)
    return ctx.t("shared memory on sm_90: " + "; ".join(notes) + "; combine_kernel bf16 compiles",
                 "sm_90 上的共享内存：" + "；".join(notes) + "；combine_kernel bf16 能编译")

"""Checks of lesson 03: `per_query_attention_kernel` and `per_query_attention(q, k, v, sm_scale=None)`
for 2-D q (M, d), k and v (N, d): one Triton program per query row, K/V streamed in blocks of 32.

A failing check blames its own idea only after confirming what that idea rests on (issue 23): it runs every case,
then the plain input of `basic` at the size of the first failure (M = N, a multiple of 32 with two blocks at least,
d rounded up to a power of two, fp32, contiguous, the default scale). If that fails too, the message says so and
names the TODO the plain case points at (the same one in every check a single bug fails), never this check's idea;
only when it passes does the message look at the check's own idea (the key mask, the feature mask, …).

The online softmax's running max is the basic check's too: after its plain input it has scores of 150 that move by
120 from one block to a later one (large_scores_qkv), where exp overflows float32 unless the running max is
subtracted, and a missing rescale or a max that is not the running one is wrong or inf."""
import math
from dataclasses import dataclass

import torch

from ..harness import TORCH_DOES_THE_WORK, CheckFailed, Lesson
from .memory_safety import add_memory_check

lesson = Lesson(
    "03_per_query_kernel",
    graded=("per_query_attention_kernel", "per_query_attention"),
    kernels=("per_query_attention_kernel",),
    forbidden=TORCH_DOES_THE_WORK,
    structure_needs={"per_query_attention_kernel": ["tl.program_id", "tl.arange", "tl.load", "tl.store", "tl.max",
                                                    "tl.exp", "tl.sum"]},
)
NEEDS = ("per_query_attention_kernel", "per_query_attention")
KERNELS = ("per_query_attention_kernel",)
BLOCK_N = 32  # the lesson's block of keys (the wrapper's given BLOCK_N)


@dataclass
class Case:  # one call of the student's per_query_attention and what came of it
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    scale: float
    what: str
    out: object = None
    problem: str = None
    wrong_values: bool = False     # a tensor of the right shape came back, with wrong values (not a crash, a
    #                                refusal, torch's work, or a wrong type or shape)
    stored_past_end: bool = False  # the kernel wrote past the end of the output
    layout: tuple = None           # strided: (M, N, d, pad, v_pad, dtype)
    large: bool = False            # basic's large scores (large_scores_qkv)

    @property
    def shape(self):
        return self.q.shape[0], self.k.shape[0], self.q.shape[1]


def exact_attention(q, k, v, scale):
    return torch.softmax((q.double() @ k.double().T) * scale, dim=-1) @ v.double()


def run_case(ctx, q, k, v, sm_scale=None, what=None):
    """Call the student's per_query_attention and compare with float64 attention computed here; a Case."""
    M, d = q.shape
    N = k.shape[0]
    args = (q, k, v) if sm_scale is None else (q, k, v, sm_scale)
    what = what or ctx.t(f"per_query_attention for M={M}, N={N}, d={d}, {q.dtype}",
                         f"per_query_attention，M={M}，N={N}，d={d}，{q.dtype}") + (
        ctx.t(f", sm_scale={sm_scale}", f"，sm_scale={sm_scale}") if sm_scale is not None else "")
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    case = Case(q, k, v, scale, what)
    try:
        case.out = ctx.call("per_query_attention", *args)
    except CheckFailed as failure:
        case.problem = str(failure)
        case.stored_past_end = bool(ctx.last_info and ctx.last_info["stores_past_end"])
        return case
    # Torch doing the work in the wrapper shows as a tensor of at least M×N elements (the scores) that is larger
    # than anything a kernel launch creates: the output (M×d, which the worker allocates inside a NaN margin of
    # max(256, M×d) elements or so on each side), or the interpreter's byte copies of the inputs.
    info = ctx.last_info
    launch = max([M * d + 2 * (max(256, M * d) + 16)] + [t.untyped_storage().nbytes() for t in (q, k, v)])
    if info["largest_numel"] > launch and info["largest_numel"] >= M * N:
        case.problem = ctx.t(
            f"{what}: `per_query_attention` created a tensor of shape {info['largest_shape']} "
            f"({info['largest_numel']} elements, at least M×N = {M * N}): the attention must be computed by "
            "your kernel, one query row per program, not by torch in the wrapper",
            f"{what}：`per_query_attention` 创建了一个形状为 {info['largest_shape']} 的张量"
            f"（{info['largest_numel']} 个元素，不少于 M×N = {M * N}）：注意力必须由你的 kernel 计算，"
            "每个 program 一个查询行，而不是在包装函数里用 torch 计算")
        return case
    exact = exact_attention(q, k, v, scale)
    same = (torch.softmax((q.float() @ k.float().T) * scale, dim=-1) @ v.float()).to(q.dtype)
    try:
        ctx.expect_close(case.out, exact, same_precision=same, what=what)
    except CheckFailed as failure:  # wrong values (diagnosed further), or not a tensor of the right shape (not)
        case.problem = str(failure)
        case.wrong_values = isinstance(case.out, torch.Tensor) and tuple(case.out.shape) == tuple(exact.shape)
    return case


# ── what a wrong output looks like ──────────────────────────────────────────────────────────────
def looks_like(case, variant):
    """Whether the student's output is `variant` (a float64 output of a known mistake) and not the right one."""
    out = case.out
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(variant.shape) or torch.isnan(variant).any():
        return False
    got = out.detach().double().cpu()
    if torch.isnan(got).any():
        return False
    tol = 1e-2 if case.q.dtype == torch.float16 else 1e-3
    apart = (variant - exact_attention(case.q, case.k, case.v, case.scale)).abs().max().item()
    return apart > 10 * tol and (got - variant).abs().max().item() < min(0.1 * apart, 3 * tol)


def online_softmax(q, k, v, scale, rescale_l=True, rescale_acc=True, normalise=True, keys=None):
    """The kernel's loop in float64 with one of its steps left out (a known mistake); `keys`: how many keys the loop
    visits (default all)."""
    s = (q.double() @ k.double().T) * scale
    keys = s.shape[1] if keys is None else keys
    m = torch.full((s.shape[0],), -math.inf, dtype=torch.float64)
    l = torch.zeros(s.shape[0], dtype=torch.float64)
    acc = torch.zeros(s.shape[0], v.shape[1], dtype=torch.float64)
    for start in range(0, keys, BLOCK_N):
        block = s[:, start:min(start + BLOCK_N, keys)]
        m_new = torch.maximum(m, block.max(1).values)
        alpha = torch.exp(m - m_new)
        p = torch.exp(block - m_new[:, None])
        l = (l * alpha if rescale_l else l) + p.sum(1)
        acc = (acc * alpha[:, None] if rescale_acc else acc) + p @ v[start:start + block.shape[1]].double()
        m = m_new
    return acc / l[:, None] if normalise else acc


def plain_diagnosis(ctx, case):
    """What a wrong output of a plain input (N a multiple of 32, d a power of two, M = N) points at: '' when it
    looks like no known mistake. In a plain case no mask matters, so these are the mistakes left."""
    if not case.wrong_values:
        return ""
    out = case.out.detach().double().cpu()
    nan_rows = torch.isnan(out).all(1)
    if nan_rows.any() and not nan_rows.all() and not (torch.isnan(out).any(1) & ~nan_rows).any():
        rows = nan_rows.nonzero().flatten().tolist()
        shown = ", ".join(map(str, rows[:5])) + (", …" if len(rows) > 5 else "")
        return ctx.t(f"; whole rows of the output ({len(rows)} of {out.shape[0]}: {shown}) were never written, they "
                     "are still the NaN of torch.empty: the grid needs one program per query row, (M,) (TODO 6), and "
                     "each program stores its own row pid (TODO 5)",
                     f"；输出有整行从未写入（{out.shape[0]} 行中的 {len(rows)} 行：{shown}），仍是 torch.empty 的 NaN："
                     "网格要每个查询行一个 program，即 (M,)（TODO 6），每个 program 写自己的第 pid 行（TODO 5）")
    q, k, v, scale = case.q, case.k, case.v, case.scale
    variants = [
        (lambda: exact_attention(q, k, v, 1.0),
         ctx.t("; the output is attention without sm_scale: multiply the scores by sm_scale (TODO 2)",
               "；输出是没有乘 sm_scale 的注意力：分数要乘以 sm_scale（TODO 2）")),
        (lambda: online_softmax(q, k, v, scale, rescale_l=False, rescale_acc=False),
         ctx.t("; the output is what you get when a block that raises the running max does not rescale l_i and acc "
               "by alpha = exp(m_i − m_new) (TODO 3)",
               "；输出正是某个块抬高了运行最大值时，l_i 和 acc 没有乘以 alpha = exp(m_i − m_new) 的结果（TODO 3）")),
        (lambda: online_softmax(q, k, v, scale, rescale_l=False),
         ctx.t("; the output is what you get when acc is rescaled by alpha but l_i is not (TODO 3)",
               "；输出正是 acc 乘了 alpha、l_i 却没有乘的结果（TODO 3）")),
        (lambda: online_softmax(q, k, v, scale, rescale_acc=False),
         ctx.t("; the output is what you get when l_i is rescaled by alpha but acc is not (TODO 3)",
               "；输出正是 l_i 乘了 alpha、acc 却没有乘的结果（TODO 3）")),
        (lambda: exact_attention(q, k, v, scale * math.log(2)),
         ctx.t("; the output is what you get with tl.exp2 where the online softmax needs tl.exp (TODO 3)",
               "；输出正是在线 softmax 该用 tl.exp 的地方用了 tl.exp2 的结果（TODO 3）")),
        (lambda: online_softmax(q, k, v, scale, normalise=False),
         ctx.t("; the output is acc before the division: after the loop it must be divided by l_i (TODO 5)",
               "；输出是除法之前的 acc：循环结束后要除以 l_i（TODO 5）")),
    ]
    for variant, words in variants:
        if looks_like(case, variant()):
            return words
    return ""


def plain_case(ctx, case):
    """The plain input of `basic` at the size of `case`: M = N a multiple of 32 (two blocks at least; in the
    interpreter 64, `basic`'s size), d rounded up to a power of two, fp32, contiguous, the default scale."""
    M, N, d = case.shape
    n = max(64, -(-max(M, N) // BLOCK_N) * BLOCK_N) if ctx.gpu else 64
    return run_case(ctx, *random_qkv(ctx, n, n, 1 << (d - 1).bit_length()))


def verdict(ctx, cases, idea=None, concept=None):
    """Fail with the first failing case's message, blamed on what it rests on first (see the module's docstring)."""
    failed = [c for c in cases if c.problem]
    if not failed:
        return
    first = failed[0]
    if idea is None:  # basic: the plain case itself, or its large scores once the plain case is right
        raise CheckFailed(first.problem + (large_diagnosis if first.large else plain_diagnosis)(ctx, first))
    if not (first.wrong_values or first.stored_past_end):  # a crash, a refusal, torch's work: it says what it is
        raise CheckFailed(first.problem)
    plain = plain_case(ctx, first)
    if plain.problem:
        M, N, d = plain.shape
        if not plain.wrong_values:
            how = plain.problem
        elif torch.isnan(plain.out).any():
            how = ctx.t(f"{int(torch.isnan(plain.out).sum())} NaN values", f"{int(torch.isnan(plain.out).sum())} 个 NaN")
        else:
            error = (plain.out.double() - exact_attention(plain.q, plain.k, plain.v, plain.scale)).abs().max().item()
            how = ctx.t(f"max error {error:.3g}", f"最大误差 {error:.3g}")
        basic_title = next(c for c in ctx.lesson.checks if c.id == "basic").title_in(ctx.language)
        raise CheckFailed(first.problem + ctx.t(
            f". This says nothing yet about {idea}: the plain input of the basic check at this size, M = N = {N}, "
            f"d = {d}, float32, contiguous, the default scale, fails too ({how}{plain_diagnosis(ctx, plain)}). Fix "
            f"that first (the check “{basic_title}”).",
            f"。这还不能说明“{idea}”有没有问题：同样规模下基本检查的普通输入（M = N = {N}，d = {d}，float32，连续，"
            f"默认缩放）也不对（{how}{plain_diagnosis(ctx, plain)}）。先把它改对（检查“{basic_title}”）。"))
    raise CheckFailed(first.problem + concept(ctx, failed))


# One mistake, one check (COURSE_SPEC §5): each check tests its own idea on inputs that are easy in every other
# respect. Only `ragged_n` has an N that is not a multiple of BLOCK_N = 32 (a missing -inf or key mask costs its
# points only), only `odd_head_dim` a d that is not a power of two, only `m_ne_n` M ≠ N (a kernel given M where N
# belongs computes M = N right), only `custom_scale` a custom sm_scale. In the interpreter, where every (program,
# K block) visit costs milliseconds, the checks of other ideas use a single block (M = N = 32); `basic` has two, and
# 64 query rows: a row whose max sits in its first block hides a missing rescale, and with 2 to 6 rows all of them
# did so in a few seeds in a hundred, so the same mistake scored differently from student to student. `basic` then
# has scores of 150 (large_scores_qkv): a running max that is missing, not the running one, or not rescaled for
# overflows or goes wrong there, and only there.
def random_qkv(ctx, M, N, d, dtype=torch.float32):
    return ctx.randn(M, d, dtype=dtype), ctx.randn(N, d, dtype=dtype), ctx.randn(N, d, dtype=dtype)


LEVELS = (30.0, 150.0)  # the levels large_scores_qkv adds to the scores


def large_scores_qkv(ctx, n, d):
    """q, k, v (n rows each) whose scores are ordinary ones plus a level that changes halfway through the keys:
    rows 0..n/2-1 get +30 on the first half of the keys and +150 on the second, the other rows +150 then +30 (q's
    columns 0 and 1 pick the level, k's columns carry it; 16·(150·√d/16)·sm_scale = 150, exact in float32). exp(150)
    overflows float32 (exp(88.7) is its largest), so only the subtracted running max keeps the kernel finite. With
    n a multiple of 2·BLOCK_N each half of the keys is whole blocks, and the max moves by 120 from one block to a
    later one: in the first rows it jumps (a missing rescale by alpha leaves the first blocks e^120 too heavy), in
    the others it falls (a max that is only this block's, not the running one, makes alpha = e^120 = inf)."""
    q, k, v = random_qkv(ctx, n, n, d)
    column = 16.0
    low, high = (level * math.sqrt(d) / column for level in LEVELS)
    q[:, :2] = 0.0
    q[:n // 2, 0] = q[n // 2:, 1] = column
    k[:n // 2, 0], k[n // 2:, 0] = low, high
    k[:n // 2, 1], k[n // 2:, 1] = high, low
    return q, k, v


def large_diagnosis(ctx, case):
    """What a wrong output of large_scores_qkv's input points at, the plain input being right."""
    out = case.out.detach().double().cpu() if case.wrong_values else None
    if out is not None and not torch.isfinite(out).all():
        return ctx.t(f"; the plain input is right, but here the scores reach {LEVELS[1]:g} and the output has "
                     f"{int((~torch.isfinite(out)).sum())} inf or NaN values: exp overflows float32 above 88.7, so "
                     "every exp must take a score minus the running max, p = exp(s − m_new) and alpha = "
                     "exp(m_i − m_new), with m_new = max(m_i, max(s)) the max of every block so far (TODO 3); in the "
                     f"rows whose level falls from {LEVELS[1]:g} to {LEVELS[0]:g} in a later block, an m_new that is "
                     f"only that block's max makes alpha = e^{LEVELS[1] - LEVELS[0]:g}, which overflows too",
                     f"；普通输入是对的，但这里分数高达 {LEVELS[1]:g}，输出里有 {int((~torch.isfinite(out)).sum())} 个 inf "
                     "或 NaN：exp 在 88.7 以上就超出 float32 的范围，所以每个 exp 都必须先减去运行最大值：p = exp(s − m_new)，"
                     "alpha = exp(m_i − m_new)，其中 m_new = max(m_i, max(s)) 是到目前为止所有块的最大值（TODO 3）；"
                     f"在后面某块的水平从 {LEVELS[1]:g} 降到 {LEVELS[0]:g} 的那些行里，如果 m_new 只是这一块的最大值，"
                     f"alpha = e^{LEVELS[1] - LEVELS[0]:g}，同样会溢出")
    known = plain_diagnosis(ctx, case)
    if known or not case.wrong_values:
        return known
    return ctx.t(f"; the plain input is right, so look at what these scores change: in half of the rows the running "
                 f"max jumps by {LEVELS[1] - LEVELS[0]:g} in a later block, so l_i and acc must be rescaled by alpha, "
                 f"in the others it stays where the first blocks put it (m_new = max(m_i, max(s)), TODO 3)",
                 f"；普通输入是对的，所以看看这些分数改变了什么：一半的行里运行最大值在后面某块跳高了 "
                 f"{LEVELS[1] - LEVELS[0]:g}，所以 l_i 和 acc 都要乘以 alpha；另一半的行里它停在前面几块定下的值"
                 "（m_new = max(m_i, max(s))，TODO 3）")


@lesson.check(1, "attention with N a multiple of 32 and d a power of two", needs=NEEDS, kernels=KERNELS,
              zh="N 是 32 的倍数、d 是 2 的幂时的注意力")
def basic(ctx):
    cases = [run_case(ctx, *random_qkv(ctx, M, N, d))
             for M, N, d in ctx.pick(gpu=[(64, 64, 64), (256, 256, 128), (1024, 1024, 64), (96, 96, 16)],
                                     interpreter=[(64, 64, 16)])]
    # Then scores of 150 whose max moves from block to block (after the plain input: its diagnosis comes first).
    for n, d in ctx.pick(gpu=[(256, 64)], interpreter=[(64, 16)]):
        what = ctx.t(f"per_query_attention for M={n}, N={n}, d={d}, float32, scores up to {LEVELS[1]:g} (rows "
                     f"0..{n // 2 - 1}: +{LEVELS[0]:g} on keys 0..{n // 2 - 1}, +{LEVELS[1]:g} on the rest; the other "
                     f"rows the other way round)",
                     f"per_query_attention，M={n}，N={n}，d={d}，float32，分数高达 {LEVELS[1]:g}（第 0..{n // 2 - 1} "
                     f"行：键 0..{n // 2 - 1} 加 {LEVELS[0]:g}，其余的键加 {LEVELS[1]:g}；其余的行反过来）")
        cases.append(run_case(ctx, *large_scores_qkv(ctx, n, d), what=what))
        cases[-1].large = True
    verdict(ctx, cases)


def key_mask_concept(ctx, failed):
    """The plain case is right, only N differs: the keys of the last, partial block."""
    def padded(case):  # the mistake of a 0 score for the keys beyond N (their v masked to 0)
        M, N, d = case.shape
        pad = -(-N // BLOCK_N) * BLOCK_N - N
        s = torch.cat([(case.q.double() @ case.k.double().T) * case.scale, torch.zeros(M, pad, dtype=torch.float64)], 1)
        return torch.softmax(s, -1) @ torch.cat([case.v.double(), torch.zeros(pad, d, dtype=torch.float64)])

    if any(c.wrong_values and looks_like(c, padded(c)) for c in failed):
        return ctx.t("; the keys beyond N got a score of 0, which takes part in the max and the sum: set their scores "
                     "to -inf with tl.where, after the K load and before the max (TODO 2)",
                     "；N 之后的键得到的分数是 0，它会参与最大值和求和：在加载 K 之后、求最大值之前，用 tl.where 把它们的分数"
                     "设为 -inf（TODO 2）")
    long = [c for c in failed if c.shape[1] >= BLOCK_N]
    if long and all(c.wrong_values and looks_like(c, online_softmax(c.q, c.k, c.v, c.scale,
                                                                     keys=c.shape[1] // BLOCK_N * BLOCK_N))
                    for c in long):
        return ctx.t("; the output is attention over the full blocks only: the loop over K/V blocks must also visit "
                     "the last, partial one (the given `for start_n in range(0, N, BLOCK_N)`); the key mask switches "
                     "off its missing keys",
                     "；输出只是对完整分块做的注意力：对 K/V 分块的循环也必须走到最后那个不完整的分块（给定的 "
                     "`for start_n in range(0, N, BLOCK_N)`）；缺少的键由键掩码关掉")
    if any(c.wrong_values and torch.isnan(c.out).any() for c in failed):
        return ctx.t("; the same input with N a multiple of 32 is right, so the NaN comes from the keys beyond N: the "
                     "last block reads past the last key; the K and V loads need a mask with n_mask in it (kv_mask, "
                     "TODO 2), and the V load the same mask (TODO 4)",
                     "；N 为 32 的倍数时同样的输入是对的，所以 NaN 来自 N 之后的键：最后一个分块读到了最后一个键之外；"
                     "K 和 V 的加载需要含 n_mask 的掩码（kv_mask，TODO 2），V 的加载也要用同一个掩码（TODO 4）")
    return ctx.t("; the same input with N a multiple of 32 is right, so look at the keys of the last, partial block: "
                 "n_mask, kv_mask and the -inf scores (TODO 2), and the masked V load (TODO 4)",
                 "；N 为 32 的倍数时同样的输入是对的，所以检查最后那个不完整分块里的键：n_mask、kv_mask 和 -inf 分数"
                 "（TODO 2），以及带掩码的 V 加载（TODO 4）")


@lesson.check(2, "attention for any number of keys N (key mask, -inf scores)", needs=NEEDS, kernels=KERNELS,
              zh="任意键数 N 的注意力（键掩码，-inf 分数）")
def ragged_n(ctx):
    verdict(ctx, [run_case(ctx, *random_qkv(ctx, M, N, d)) for M, N, d in ctx.pick(
        gpu=[(1, 1, 64), (33, 33, 64), (100, 100, 64), (1000, 1000, 128), (4097, 4097, 64)],
        interpreter=[(1, 1, 16), (33, 33, 16), (50, 50, 32)])],
        ctx.t("the key mask", "键掩码"), key_mask_concept)


def feature_mask_concept(ctx, failed):
    """The plain case (d rounded up to a power of two) is right: the padding features."""
    if any(c.stored_past_end for c in failed):
        return ctx.t("; with d not a power of two the store wrote its padding features past the end of the output: "
                     "the store needs mask=d_mask (TODO 5)",
                     "；d 不是 2 的幂时，写入把填充特征写到了输出末尾之外：写入需要 mask=d_mask（TODO 5）")
    if any(c.wrong_values and torch.isnan(c.out).any() for c in failed):
        return ctx.t("; the same input with d a power of two is right, so the NaN comes from the padding features: a "
                     "load reads past the end of a row without d_mask, the q load (TODO 1) or the K and V loads "
                     "(kv_mask needs d_mask too, TODO 2; the V load uses it, TODO 4)",
                     "；d 为 2 的幂时同样的输入是对的，所以 NaN 来自填充特征：有一次加载没有 d_mask，读过了行尾，可能是 q 的"
                     "加载（TODO 1），也可能是 K 和 V 的加载（kv_mask 也要包含 d_mask，TODO 2；V 的加载用它，TODO 4）")
    return ctx.t("; the same input with d a power of two is right, so look at the padding features: d_mask in the q "
                 "load (TODO 1), in kv_mask for K and V (TODO 2, TODO 4) and in the store (TODO 5), and BLOCK_D, the "
                 "next power of two ≥ d (TODO 6)",
                 "；d 为 2 的幂时同样的输入是对的，所以检查填充特征：q 的加载（TODO 1）、K 和 V 的 kv_mask（TODO 2、"
                 "TODO 4）和写入（TODO 5）里的 d_mask，以及 BLOCK_D，即不小于 d 的下一个 2 的幂（TODO 6）")


@lesson.check(2, "attention for a head dimension d that is not a power of two (d mask)", needs=NEEDS,
              kernels=KERNELS, zh="头维度 d 不是 2 的幂时的注意力（特征掩码 d_mask）")
def odd_head_dim(ctx):
    verdict(ctx, [run_case(ctx, *random_qkv(ctx, M, N, d)) for M, N, d in ctx.pick(
        gpu=[(256, 256, 40), (320, 320, 100), (64, 64, 72), (32, 32, 24)],
        interpreter=[(32, 32, 40), (32, 32, 100)])],
        ctx.t("the feature mask", "特征掩码"), feature_mask_concept)


def queries_keys_concept(ctx, failed):
    """The plain case (M = N) is right: what tells the queries from the keys is the wrapper's launch."""
    fewer = [c for c in failed if c.shape[0] < c.shape[1]]
    if any(c.wrong_values and looks_like(c, exact_attention(c.q, c.k[:c.shape[0]], c.v[:c.shape[0]], c.scale))
           for c in fewer):
        return ctx.t("; the output is attention over the first M keys only: the kernel was given the number of "
                     "queries M where it needs the number of keys N (TODO 6)",
                     "；输出只是对前 M 个键做的注意力：kernel 需要键的个数 N 的地方，传进去的是查询的个数 M（TODO 6）")
    return ctx.t("; the same sizes with M = N are right, so look at what tells queries from keys: the grid has M "
                 "programs, one per query row, and the kernel's N is the number of keys, k.shape[0] (TODO 6)",
                 "；M = N 时同样规模是对的，所以检查区分查询和键的地方：网格有 M 个 program，每个查询行一个，kernel 的 N "
                 "是键的个数 k.shape[0]（TODO 6）")


@lesson.check(1, "attention with M ≠ N (more or fewer queries than keys)", needs=NEEDS, kernels=KERNELS,
              zh="M ≠ N 时的注意力（查询比键多或少）")
def m_ne_n(ctx):
    # (24, 96, 16): M, N and d all above 1, apart from each other and from BLOCK_N = 32 (issue 24), so that one of
    # them passed or used where another belongs gives a wrong result in some case.
    verdict(ctx, [run_case(ctx, *random_qkv(ctx, M, N, d)) for M, N, d in ctx.pick(
        gpu=[(1, 2048, 64), (1000, 32, 64), (5, 4096, 128), (2048, 96, 32)],
        interpreter=[(1, 96, 32), (40, 32, 16), (24, 96, 16)])],
        "M ≠ N", queries_keys_concept)


def fp16_hint(ctx):
    return ctx.t("every load converted to float32 (TODO 1, TODO 2, TODO 4), the sums in float32, and only the store "
                 "converting to Out's dtype (TODO 5)",
                 "每次加载都转换成 float32（TODO 1、TODO 2、TODO 4），求和用 float32，只有写入时才转换成 Out 的 dtype（TODO 5）")


def precision_concept(ctx, failed):
    return ctx.t("; the same input in float32 is right, so look at the precision: ",
                 "；同样的输入用 float32 是对的，所以检查精度：") + fp16_hint(ctx)


@lesson.check(1, "fp16 attention (fp16 output, fp32 accumulation)", needs=NEEDS, kernels=KERNELS,
              zh="fp16 注意力（fp16 输出，fp32 累加）")
def fp16(ctx):
    verdict(ctx, [run_case(ctx, *random_qkv(ctx, M, N, d, dtype=torch.float16)) for M, N, d in ctx.pick(
        gpu=[(1024, 1024, 64), (1024, 1024, 128), (320, 320, 32)],
        interpreter=[(32, 32, 64)])],
        "fp16", precision_concept)


def scale_concept(ctx, failed):
    """The plain case (the default scale) is right: the custom sm_scale."""
    if any(c.wrong_values and looks_like(c, exact_attention(c.q, c.k, c.v, 1.0 / math.sqrt(c.shape[2])))
           for c in failed):
        return ctx.t("; the output is attention with the default scale 1/sqrt(d): the sm_scale given to "
                     "per_query_attention was ignored; the wrapper must pass it to the kernel (TODO 6), and the "
                     "kernel multiply the scores by its sm_scale argument (TODO 2)",
                     "；输出是用默认缩放 1/sqrt(d) 算的注意力：传给 per_query_attention 的 sm_scale 被忽略了；包装函数要把它"
                     "传给 kernel（TODO 6），kernel 要用它的 sm_scale 参数乘分数（TODO 2）")
    return ctx.t("; the same input with the default scale is right, so look at where sm_scale goes: the wrapper "
                 "passes it (TODO 6), the kernel multiplies the scores by it (TODO 2)",
                 "；用默认缩放时同样的输入是对的，所以检查 sm_scale 的去向：包装函数传递它（TODO 6），kernel 用它乘分数（TODO 2）")


@lesson.check(1, "attention with a custom sm_scale", needs=NEEDS, kernels=KERNELS, zh="给定 sm_scale 时的注意力")
def custom_scale(ctx):
    verdict(ctx, [run_case(ctx, *random_qkv(ctx, M, N, d), sm_scale=scale) for M, N, d, scale in ctx.pick(
        gpu=[(512, 512, 64, 1.0), (320, 320, 128, 0.02), (64, 64, 32, 0.5)],
        interpreter=[(32, 32, 16, 1.0), (32, 32, 32, 0.05)])],
        ctx.t("the custom scale", "给定的缩放"), scale_concept)


def views(ctx, M, N, d, pad, v_pad, dtype, which="qkv"):
    """q, k, v of which those named in `which` are views whose rows are further apart than d: q's d + pad, k's 2·d
    (packed with another tensor), v's d + v_pad; the others contiguous."""
    q = ctx.randn(M, d + pad, dtype=dtype)[:, :d] if "q" in which else ctx.randn(M, d, dtype=dtype)
    k = ctx.randn(N, 2, d, dtype=dtype)[:, 0] if "k" in which else ctx.randn(N, d, dtype=dtype)
    v = ctx.randn(N, d + v_pad, dtype=dtype)[:, :d] if "v" in which else ctx.randn(N, d, dtype=dtype)
    return q, k, v


def strided_what(ctx, M, N, d, pad, v_pad, dtype, which="qkv"):
    en = {"q": f"q = x[:, :{d}] of a ({M}, {d + pad}) tensor", "k": f"k = kv[:, 0] of a ({N}, 2, {d}) tensor",
          "v": f"v = y[:, :{d}] of a ({N}, {d + v_pad}) tensor"}
    zh = {"q": f"q = x[:, :{d}]（x 的形状为 ({M}, {d + pad})）", "k": f"k = kv[:, 0]（kv 的形状为 ({N}, 2, {d})）",
          "v": f"v = y[:, :{d}]（y 的形状为 ({N}, {d + v_pad})）"}
    named = [en[t] for t in which]
    return ctx.t(f"per_query_attention for {', '.join(named[:-1]) + ' and ' if len(named) > 1 else ''}{named[-1]}"
                 + (f" ({'the others' if len(which) < 2 else 'the other'} contiguous)" if len(which) < 3 else "")
                 + f", {dtype}",
                 f"per_query_attention，{'，'.join(zh[t] for t in which)}" + ("（其余连续）" if len(which) < 3 else "")
                 + f"，{dtype}")


def strides_concept(ctx, failed):
    """The plain case (contiguous) is right: which tensor's rows are read wrong, one view at a time."""
    first = failed[0]
    M, N, d, pad, v_pad, dtype = first.layout
    if dtype != torch.float32:
        contiguous = run_case(ctx, *random_qkv(ctx, M, N, d, dtype=dtype))
        if contiguous.problem:
            return ctx.t(f"; the same input without views fails too in {dtype} ({contiguous.problem}): this is about "
                         "fp16, not strides (the fp16 check): ",
                         f"；同样的输入不用视图、用 {dtype} 也不对（{contiguous.problem}）：这是 fp16 的问题，不是 stride 的问题"
                         "（fp16 检查）：") + fp16_hint(ctx)
    if any(c.stored_past_end for c in failed):
        return ctx.t("; the store wrote past the end of the output: Out is a fresh contiguous tensor with rows of its "
                     "own, stride_om apart (TODO 5)",
                     "；写入写到了输出末尾之外：Out 是新分配的连续张量，它的行有自己的间距 stride_om（TODO 5）")
    wrong = [t for t in "qkv"
             if run_case(ctx, *views(ctx, M, N, d, pad, v_pad, dtype, t),
                         what=strided_what(ctx, M, N, d, pad, v_pad, dtype, t)).problem]
    if wrong == list("qkv"):
        return ctx.t("; each of q, k and v alone, as a view with rows further apart than d, gives a wrong result: "
                     "the kernel gets rows d apart for all of them; the wrapper must pass the row strides "
                     "q.stride(0), k.stride(0), v.stride(0), out.stride(0) (TODO 6)",
                     "；q、k、v 中任何一个单独作为行 stride 大于 d 的视图，结果都不对：kernel 拿到的每个张量的行 stride 都是 d；"
                     "包装函数要传入行 stride：q.stride(0)、k.stride(0)、v.stride(0)、out.stride(0)（TODO 6）")
    if wrong == ["k", "v"]:
        return ctx.t("; wrong when only k is a view and when only v is, right when only q is: K's and V's rows are "
                     "read with each other's row stride; K's pointers use stride_kn (TODO 2), V's stride_vn (TODO 4), "
                     "in the order the wrapper passes k.stride(0) and v.stride(0) (TODO 6)",
                     "；只有 k 是视图时不对，只有 v 是视图时也不对，只有 q 是视图时却是对的：K 和 V 的行用了对方的行 stride；"
                     "K 的指针用 stride_kn（TODO 2），V 的用 stride_vn（TODO 4），与包装函数传入 k.stride(0)、v.stride(0) 的"
                     "顺序一致（TODO 6）")
    where = {"q": ctx.t("q's rows, Q + pid·stride_qm (TODO 1)", "q 的行，Q + pid·stride_qm（TODO 1）"),
             "k": ctx.t("K's rows, stride_kn (TODO 2)", "K 的行，stride_kn（TODO 2）"),
             "v": ctx.t("V's rows, stride_vn (TODO 4)", "V 的行，stride_vn（TODO 4）")}
    if wrong:
        return ctx.t(f"; wrong when only {' and '.join(wrong)} {'is a view' if len(wrong) == 1 else 'are views'} "
                     f"with rows further apart than d: look at {', '.join(where[t] for t in wrong)}, and at the "
                     "stride the wrapper passes there (TODO 6)",
                     f"；只有 {'、'.join(wrong)} 是行 stride 大于 d 的视图时就不对：检查{'，'.join(where[t] for t in wrong)}，"
                     "以及包装函数在那个位置传入的 stride（TODO 6）")
    return ctx.t("; q, k and v are each read right when only one of them is a view, and wrong together: two of them "
                 "share a row stride in your code; each pointer must use its own (TODO 1, TODO 2, TODO 4), passed in "
                 "the order of the kernel's arguments (TODO 6)",
                 "；q、k、v 每次只有一个是视图时都读对了，一起时就不对：你的代码里有两个张量共用了一个行 stride；每个指针"
                 "都要用自己的（TODO 1、TODO 2、TODO 4），并按 kernel 参数的顺序传入（TODO 6）")


@lesson.check(1, "attention on views whose rows are further apart than d (row strides)", needs=NEEDS,
              kernels=KERNELS, zh="行 stride 大于 d 的视图上的注意力")
def strided(ctx):
    # Three different row strides: q's d + pad, k's 2·d (packed with another tensor), v's d + v_pad, so a kernel
    # that uses one tensor's stride for another's rows (stride_kn for V, say) reads the wrong rows.
    cases = []
    for layout in ctx.pick(gpu=[(256, 256, 64, 13, 5, torch.float32), (1024, 1024, 128, 64, 24, torch.float16)],
                           interpreter=[(32, 32, 32, 11, 5, torch.float32), (32, 32, 16, 3, 7, torch.float16)]):
        cases.append(run_case(ctx, *views(ctx, *layout), what=strided_what(ctx, *layout)))
        cases[-1].layout = layout
    verdict(ctx, cases, ctx.t("the row strides", "行 stride"), strides_concept)


@lesson.check(1, "per_query_attention_kernel compiles for sm_80 and sm_90 GPUs (fp32 and fp16)", needs=NEEDS,
              modes=("gpu", "interpreter", "structure"), compile_only=True,
              zh="per_query_attention_kernel 能为 sm_80 和 sm_90 GPU 编译（fp32 和 fp16）")
def compiles(ctx):
    for dtype, block_d in (("fp32", 64), ("fp16", 128)):
        signature = {"Q": f"*{dtype}", "K": f"*{dtype}", "V": f"*{dtype}", "Out": f"*{dtype}",
                     "stride_qm": "i32", "stride_kn": "i32", "stride_vn": "i32", "stride_om": "i32",
                     "N": "i32", "D": "i32", "sm_scale": "fp32", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr"}
        ctx.aot("per_query_attention_kernel", signature, {"BLOCK_N": 32, "BLOCK_D": block_d})


# ── memory safety (issue 24): every access inside the tensors, even one whose value is thrown away ──
def memory_calls(ctx, call):
    # head dims below a power of two (BLOCK_D lanes past d) and key counts that leave a ragged last block
    for m, n, d in ((5, 45, 12), (3, 7, 20)):
        call("per_query_attention", ctx.randn(m, d), ctx.randn(n, d), ctx.randn(n, d))


add_memory_check(lesson, NEEDS, KERNELS, memory_calls)

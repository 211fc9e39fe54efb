"""Checks of lesson 01: `stable_softmax(x, dim=-1)` and `naive_attention(q, k, v, causal=False, sm_scale=None)`.

Conventions the lesson teaches (and these checks hold the student to):
  - `stable_softmax` returns the input's dtype; a slice that is entirely -inf gives 0s (never NaN);
  - `naive_attention` takes q (..., M, d) and k, v (..., N, d); sm_scale defaults to 1/sqrt(d);
  - causal masks are aligned top-left, as torch's `scaled_dot_product_attention(is_causal=True)`:
    query i sees keys 0..i (so no row is ever fully masked when N >= 1). The judge builds its mask element by
    element from that definition (key j > query i), not with the `triu` formula the solution uses.
One mistake, one check (COURSE_SPEC §5): each check tests its own concept on inputs that are easy in every other
respect. Only softmax_rows and attention_shapes use fp16; only softmax_stable huge values, and attention_scale huge
scores (its sm_scale = 1 case: ±100 and more, so that an attention whose softmax does not subtract the max overflows;
a stable_softmax without it loses that case too, whose message then sends the learner to stable_softmax); only
softmax_any_dim a dim other than the last; only softmax_masked -inf entries; only attention_shapes the default scale
(the other attention checks pass sm_scale = 1/sqrt(d) explicitly, so a wrong default costs attention_shapes alone and
an ignored sm_scale attention_scale alone); only the two causal checks causal=True; only attention_causal_rect a
causal M != N; only attention_views non-contiguous inputs. (An input changed in place fails every call: the harness
checks that on each one.)
Everything here is plain PyTorch, so every mode (interpreter and structure too) runs the same checks, on the CPU
when there is no GPU.
"""
import math
import re

import torch

from ..harness import CheckFailed, Lesson
from ..messages import text
from ..notebook_checks import mismatch

lesson = Lesson(
    "01_pytorch_attention",
    graded=("stable_softmax", "naive_attention"),
    # The library calls that this lesson teaches; matmul is allowed (attention is two of them).
    # The worker records only the names in its FORBIDDEN_WATCH (softmax, log_softmax and the two SDPA names);
    # the others (softmin, special_softmax, _softmax, fused SDPA kernels) count once the worker watches them.
    forbidden=("softmax", "log_softmax", "softmin", "special_softmax", "_softmax", "_safe_softmax",
               "scaled_dot_product_attention", "_scaled_dot_product_attention_math",
               "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
               "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"),
    # Exact dotted names only (structure.used_expressions): the arguments every correct solution uses.
    # Used only if a check is ever limited to fewer modes: with pytorch_only every check runs for real.
    structure_needs={"stable_softmax": ["dim"], "naive_attention": ["stable_softmax", "sm_scale"]},
    pytorch_only=True,  # no Triton kernel: the checks need no interpreter, so they run in every mode
)
SOFTMAX = ("stable_softmax",)
ATTENTION = ("stable_softmax", "naive_attention")  # naive_attention is built on the student's softmax
NEG_INF = float("-inf")
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


# ── stable_softmax ───────────────────────────────────────────────────────────────────────────────

def softmax_reference(x, dim):
    """float64 softmax; a slice that is all -inf gives 0s (the lesson's rule)."""
    return torch.softmax(x.double(), dim=dim).nan_to_num(0.0)


def expect_softmax(ctx, x, dim=None):
    shown = "" if dim is None else f", dim={dim}"
    what = ctx.t(f"stable_softmax(x{shown}) for x of shape {tuple(x.shape)}, {x.dtype}",
                 f"stable_softmax(x{shown})，x 的形状为 {tuple(x.shape)}，{x.dtype}")
    try:
        out = ctx.call("stable_softmax", x) if dim is None else ctx.call("stable_softmax", x, dim=dim)
    except CheckFailed as failure:
        # torch's "The size of tensor a (10) must match the size of tensor b (4)": a broadcast that failed
        if not re.search(r"\(\d+\) must\W", str(failure)):
            raise
        # a max or a sum without keepdim: which one, the line of the error shows (both are reductions along dim)
        raise CheckFailed(f"{failure}\n" + ctx.t(
            "A size mismatch in stable_softmax: a max or a sum along `dim` without keepdim=True drops that dim, and "
            "the result no longer lines up with x (m of TODO 1 or s of TODO 3; the line above shows which)",
            "stable_softmax 中出现了形状不匹配：沿 `dim` 求最大值或求和时不加 keepdim=True，这一维就会消失，结果便无法与 x "
            "对齐（TODO 1 的 m 或 TODO 3 的 s；上面那一行会告诉你是哪一个）")) from None
    dim = -1 if dim is None else dim
    same = torch.softmax(x.float(), dim=dim).nan_to_num(0.0).to(x.dtype)
    try:
        ctx.expect_close(out, softmax_reference(x, dim), same_precision=same, what=what)
    except CheckFailed as failure:
        raise CheckFailed(f"{failure}{softmax_hint(ctx, x, dim, out)}") from None


def softmax_hint(ctx, x, dim, out):
    """A sentence naming the likely mistake, when the output looks like a known wrong answer."""
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return ""
    finite = torch.isfinite(x)
    masked = ~finite.any(dim=dim, keepdim=True).expand_as(x)  # slices that are entirely -inf
    if torch.isnan(out[masked]).any():
        # Two steps make such a slice 0s, and from the output alone one cannot tell which is missing: the guard of
        # its max (TODO 2) and the clamp of its sum (TODO 3) both leave NaN. Name both, each with what it does.
        return ctx.t(". A slice that is entirely -inf gave NaN; this lesson's rule is that such a slice gives 0s. "
                     "Two steps give them: its max, -inf, must become 0 (TODO 2; else x - m is -inf - (-inf) = NaN), "
                     "and its sum, then 0, must be raised to at least 1 before dividing (TODO 3; else 0/0 = NaN)",
                     "。一个全为 -inf 的切片得到了 NaN；本课的规则是这样的切片给出全 0。要做到这一点需要两步："
                     "它的最大值 -inf 必须换成 0（TODO 2；否则 x - m 是 -inf - (-inf) = NaN），"
                     "而它的和（这时是 0）在做除法之前必须提高到至少 1（TODO 3；否则 0/0 = NaN）")
    if torch.isnan(out).any() or torch.isinf(out).any():
        big = x[finite].abs().max().item() if finite.any() else 0.0
        if big > 80:
            # the max is computed in TODO 1 and subtracted in TODO 3: the output cannot say which one is off
            return ctx.t(f". The inputs reach ±{big:.3g}, and exp() overflows float32 above 88 (float16 above 11): "
                         "subtract the max of each slice before exponentiating (m is that max along `dim`, TODO 1; "
                         "the exponent is x - m, TODO 3)",
                         f"。输入的数值达到 ±{big:.3g}，而 exp() 在 float32 下超过 88（float16 下超过 11）就会溢出："
                         "取指数之前，先减去每个切片的最大值（m 是沿 `dim` 的最大值，TODO 1；指数是 x - m，TODO 3）")
    if x.dim() > 1 and dim % x.dim() != x.dim() - 1:
        wrong = softmax_reference(x, -1).to(out.dtype)
        if mismatch(out, wrong, atol=2e-3, rtol=2e-3) is None:
            return ctx.t(f". Your result is the softmax along the last dim: use the `dim` argument (dim={dim} here)",
                         f"。你的结果是沿最后一维的 softmax：请使用参数 `dim`（这里 dim={dim}）")
    return ""


@lesson.check(1, "stable_softmax of 2-D rows (any length), fp32 and fp16", needs=SOFTMAX, timeout=60,
              zh="二维的行（任意长度）上的 stable_softmax，fp32 和 fp16")
def softmax_rows(ctx):
    # fp16 (and bf16 on a GPU) at scale 1: a sum of exp(x) stays far below fp16's 65504 even without the max
    # subtraction, which softmax_stable grades
    cases = ctx.pick(gpu=[((1, 1), F32, 3.0), ((7, 3), F32, 3.0), ((64, 1000), F32, 3.0), ((300, 4097), F32, 3.0),
                          ((128, 1000), F16, 1.0), ((128, 1000), BF16, 1.0)],
                     interpreter=[((1, 1), F32, 3.0), ((5, 7), F32, 3.0), ((16, 100), F32, 3.0), ((3, 1000), F32, 3.0),
                                  ((8, 50), F16, 1.0)])
    for shape, dtype, scale in cases:
        x = ctx.randn(*shape, dtype=dtype, scale=scale)
        expect_softmax(ctx, x)           # the default dim=-1
        expect_softmax(ctx, x, dim=-1)


@lesson.check(1, "stable_softmax of huge values (±1e4) stays finite", needs=SOFTMAX, timeout=60,
              zh="超大数值（±1e4）的 stable_softmax 保持有限")
def softmax_stable(ctx):
    for shape in ctx.pick(gpu=[(64, 512), (8, 77)], interpreter=[(4, 37), (2, 9)]):
        expect_softmax(ctx, ctx.randn(*shape, scale=1e4))


@lesson.check(1, "stable_softmax along any dim (0, 1, -2) of 3-D and 4-D tensors", needs=SOFTMAX, timeout=60,
              zh="三维和四维张量沿任意 dim（0、1、-2）的 stable_softmax")
def softmax_any_dim(ctx):
    cases = ctx.pick(gpu=[((8, 77, 33), 1), ((4, 3, 50, 9), 0), ((6, 5, 40), -2), ((2, 30, 3, 20), 2)],
                     interpreter=[((3, 5, 7), 1), ((4, 3, 6, 2), 0), ((6, 5, 9), -2), ((2, 4, 3, 5), 2)])
    for shape, dim in cases:
        expect_softmax(ctx, ctx.randn(*shape, scale=3.0), dim=dim)


@lesson.check(1, "stable_softmax with -inf entries: an all -inf slice gives 0s, not NaN", needs=SOFTMAX,
              timeout=60, zh="含 -inf 元素的 stable_softmax：全为 -inf 的切片给出全 0，而不是 NaN")
def softmax_masked(ctx):
    # fp32 along the last dim (fp16 and other dims have their own checks)
    for shape in ctx.pick(gpu=[(64, 300), (16, 40, 77)], interpreter=[(6, 10), (5, 4, 9), (7, 8)]):
        x = ctx.randn(*shape, scale=3.0)
        drop = ctx.randn(*shape) > 0.5          # about 30% of the entries are masked
        x = x.masked_fill(drop, NEG_INF)
        x.view(-1, x.shape[-1])[1] = NEG_INF   # one whole row is masked
        expect_softmax(ctx, x, dim=-1)


# ── naive_attention ──────────────────────────────────────────────────────────────────────────────

def causal_mask(M, N, align="top-left", diagonal=1):
    """True where key j is hidden from query i: j > i (top-left), or j > i + N - M (bottom-right); `diagonal=0`
    also hides j = i (a usual mistake). Built element by element from that definition, not with `triu` (the
    solution's formula), so a mistake in the formula cannot hide in the reference."""
    offset = (0 if align == "top-left" else N - M) + diagonal - 1
    query = torch.arange(M).view(M, 1)
    key = torch.arange(N).view(1, N)
    return key > query + offset


def attention(q, k, v, causal=False, sm_scale=None, dtype=torch.float64, softmax_dim=-1, align="top-left",
              diagonal=1, fill=NEG_INF, mask_after=False):
    """softmax(q kᵀ · scale, masked) v computed in `dtype`; the keyword arguments make the usual mistakes."""
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * scale
    hidden = causal_mask(q.shape[-2], k.shape[-2], align, diagonal).to(q.device) if causal else None
    if hidden is not None and not mask_after:
        scores = scores.masked_fill(hidden, fill)
    p = torch.softmax(scores.float() if dtype == torch.float16 else scores, dim=softmax_dim).to(dtype)
    p = p.nan_to_num(0.0)  # the lesson's rule for a fully masked row
    if hidden is not None and mask_after:
        p = p.masked_fill(hidden, 0.0)
    return p @ v


def attention_hint(ctx, got, q, k, v, causal, sm_scale, atol):
    """Name the mistake when `got` matches a known wrong variant of attention."""
    d, M, N = q.shape[-1], q.shape[-2], k.shape[-2]
    if isinstance(got, torch.Tensor) and not torch.isfinite(got).all():
        # called once stable_softmax is right on these scores: an overflow is naive_attention's own softmax
        scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
        big = ((q.double() @ k.double().transpose(-2, -1)) * scale).abs().max().item()
        if big > 80:
            return ctx.t(f". The scores reach ±{big:.3g}, and exp() overflows float32 above 88: the probabilities must "
                         "come from your stable_softmax, which subtracts each row's max first (TODO 6)",
                         f"。分数达到 ±{big:.3g}，而 exp() 在 float32 下超过 88 就会溢出：概率必须由你的 stable_softmax "
                         "计算，它会先减去每行的最大值（TODO 6）")
    variants = [(ctx.t("the scores were not scaled (use sm_scale, 1/sqrt(d) by default; TODO 4)",
                       "分数没有缩放（要用 sm_scale，默认是 1/sqrt(d)；TODO 4）"),
                 dict(sm_scale=1.0)),
                (ctx.t("the scores were scaled by 1/d; the default is 1/sqrt(d) (TODO 4)",
                       "分数乘的是 1/d；默认应为 1/sqrt(d)（TODO 4）"), dict(sm_scale=1.0 / d)),
                (ctx.t("the scores were scaled by 1/sqrt(N), N the number of keys; the default is 1/sqrt(d), d the "
                       "head dimension q.shape[-1] (TODO 4)",
                       "分数乘的是 1/sqrt(N)，N 是键的个数；默认应为 1/sqrt(d)，d 是头维度 q.shape[-1]（TODO 4）"),
                 dict(sm_scale=1.0 / math.sqrt(N))),
                (ctx.t("the softmax ran over the queries (dim=-2); it must run over the keys, the last dim (TODO 6)",
                       "softmax 是沿查询（dim=-2）做的；它必须沿键，也就是最后一维来做（TODO 6）"),
                 dict(softmax_dim=-2))]
    if sm_scale is not None:
        variants.append((ctx.t("`sm_scale` was ignored: when it is given, use it instead of 1/sqrt(d) (TODO 4)",
                               "参数 `sm_scale` 被忽略了：给定它时，要用它代替 1/sqrt(d)（TODO 4）"),
                         dict(sm_scale=None)))
    if causal:
        variants += [(ctx.t("the causal mask is missing: with causal=True, query i may only see keys j <= i (TODO 5)",
                            "缺少因果掩码：causal=True 时，查询 i 只能看到 j <= i 的键（TODO 5）"),
                      dict(causal=False)),
                     (ctx.t("the causal mask also hides the diagonal: query i must see key i itself (TODO 5)",
                            "因果掩码把对角线也遮住了：查询 i 必须能看到键 i 本身（TODO 5）"),
                      dict(diagonal=0)),
                     (ctx.t("masked scores were set to 0 instead of -inf: exp(0) = 1 still gives them weight (TODO 5)",
                            "被掩码的分数设成了 0 而不是 -inf：exp(0) = 1，它们仍然有权重（TODO 5）"),
                      dict(fill=0.0)),
                     (ctx.t("the mask was applied after the softmax: the rows no longer sum to 1; mask the scores "
                            "with -inf before the softmax (TODO 5)",
                            "掩码是在 softmax 之后才加上的：各行之和不再是 1；要在 softmax 之前用 -inf 遮住分数（TODO 5）"),
                      dict(mask_after=True))]
        if M != N:
            variants.append((ctx.t("the causal mask is aligned to the bottom-right corner (query i sees keys up to "
                                   "i + N - M); this course aligns it top-left like torch's is_causal: query i sees "
                                   "keys 0..i (TODO 5)",
                                   "因果掩码是右下对齐的（查询 i 能看到直到 i + N - M 的键）；本课程和 torch 的 is_causal "
                                   "一样采用左上对齐：查询 i 看到键 0..i（TODO 5）"),
                             dict(align="bottom-right")))
    if not isinstance(got, torch.Tensor):
        return ""
    for sentence, change in variants:
        kwargs = dict(causal=causal, sm_scale=sm_scale)
        kwargs.update(change)
        wrong = attention(q, k, v, **kwargs)
        if wrong.shape == got.shape and mismatch(got, wrong.to(got.dtype), atol=atol, rtol=0.0) is None:
            return ctx.t(f". It looks like {sentence}", f"。看起来{' ' if sentence[:1].isascii() else ''}{sentence}")
    return ""


def expect_attention(ctx, q, k, v, causal=False, sm_scale=None, note=""):
    kwargs = {}
    if causal:
        kwargs["causal"] = True
    if sm_scale is not None:
        kwargs["sm_scale"] = sm_scale
    shown = "".join(f", {key}={value:g}" if isinstance(value, float) else f", {key}={value}"
                    for key, value in kwargs.items())
    what = ctx.t(f"naive_attention(q, k, v{shown}) with q {tuple(q.shape)}, k and v {tuple(k.shape)}, {q.dtype}",
                 f"naive_attention(q, k, v{shown})，q 的形状为 {tuple(q.shape)}，k 和 v 的形状为 {tuple(k.shape)}，"
                 f"{q.dtype}") + note
    exact = attention(q, k, v, causal, sm_scale)
    same = attention(q, k, v, causal, sm_scale, dtype=q.dtype)
    out = None
    try:
        # inside the try: a softmax that returns float32 for float16 scores makes `p @ v` raise (TODO 7's line)
        out = ctx.call("naive_attention", q, k, v, **kwargs)
        ctx.expect_close(out, exact, same_precision=same, what=what)
    except CheckFailed as failure:
        if out is None and not str(failure).startswith(text("raised", ctx.language, error="")):
            raise  # the call did not return: a crash, a hang, a forbidden call or a changed input says it all
        # naive_attention rests on the student's stable_softmax: name a TODO of naive_attention only once the
        # softmax is right on the scores this call makes (a softmax along the wrong dim looks like TODO 6's mistake)
        hint = softmax_of_scores_problem(ctx, q, k, causal, sm_scale)
        if not hint:
            atol = max(2e-3 if q.dtype != torch.float32 else 1e-4, 4 * (same.double() - exact).abs().max().item())
            hint = attention_hint(ctx, out, q, k, v, causal, sm_scale, atol)
        raise CheckFailed(f"{failure}{hint}") from None


def softmax_of_scores_problem(ctx, q, k, causal, sm_scale):
    """"" when the student's stable_softmax is right on the (masked) scores of this call, in q's dtype, along the
    last dim; else a sentence that sends the student to stable_softmax, naming none of naive_attention's TODOs."""
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = (q.double() @ k.double().transpose(-2, -1)) * scale
    if causal:
        scores = scores.masked_fill(causal_mask(q.shape[-2], k.shape[-2]).to(q.device), NEG_INF)
    try:
        expect_softmax(ctx, scores.to(q.dtype), dim=-1)
    except CheckFailed as failure:
        return ctx.t(f". Your stable_softmax is wrong on the scores of this call, so naive_attention cannot be right "
                     f"yet; fix stable_softmax first (its checks tell more): {failure}",
                     f"。你的 stable_softmax 在这次调用的分数上就已经不对，所以 naive_attention 还不可能正确；"
                     f"请先修好 stable_softmax（它的检查会说得更具体）：{failure}")
    return ""


def qkv(ctx, q_shape, n_keys, dtype=torch.float32, scale=1.0):
    """q, k of `scale` (the size of the scores), v of scale 1."""
    kv_shape = (*q_shape[:-2], n_keys, q_shape[-1])
    return (ctx.randn(*q_shape, dtype=dtype, scale=scale), ctx.randn(*kv_shape, dtype=dtype, scale=scale),
            ctx.randn(*kv_shape, dtype=dtype))


def usual_scale(q):
    """1/sqrt(d), passed explicitly by the checks that are not about the scale: a wrong default (attention_shapes
    grades it) or an ignored sm_scale (attention_scale) then costs only the check named for it."""
    return 1.0 / math.sqrt(q.shape[-1])


@lesson.check(2, "naive_attention: 2-D, batched and multi-head inputs, M != N, fp32 and fp16", needs=ATTENTION,
              timeout=60, zh="naive_attention：二维、批量和多头输入，M != N，fp32 和 fp16")
def attention_shapes(ctx):
    cases = ctx.pick(
        gpu=[((128, 64), 128, F32), ((300, 80), 777, F32), ((4, 1000, 64), 1000, F32),
             ((2, 8, 512, 64), 512, F16), ((2, 4, 333, 128), 1025, F16), ((1, 3, 700, 96), 200, BF16),
             ((1, 1, 1, 8), 1, F32)],
        interpreter=[((6, 16), 6, F32), ((5, 24), 9, F32), ((3, 11, 40), 7, F32), ((2, 3, 17, 64), 29, F32),
                     ((2, 2, 20, 32), 13, F16), ((1, 1, 1, 8), 1, F32)])
    for q_shape, n_keys, dtype in cases:
        expect_attention(ctx, *qkv(ctx, q_shape, n_keys, dtype))


@lesson.check(1, "naive_attention with a given sm_scale", needs=ATTENTION, timeout=60,
              zh="给定 sm_scale 的 naive_attention")
def attention_scale(ctx):
    # fp32 only (fp16 is attention_shapes'): with sm_scale=1 fp16 scores come near exp's overflow (exp(11) > 65504).
    # The last case gives sm_scale = 1 to q and k of scale 4 (d = 40): scores of about ±100 to ±400, where exp()
    # overflows float32 (above 88) unless the softmax subtracts each row's max, so an attention that exponentiates
    # the scores itself instead of calling stable_softmax (TODO 6) gives inf/NaN (the reference is float64).
    cases = ctx.pick(gpu=[((2, 4, 256, 64), 256, 0.5, 1.0), ((2, 4, 100, 64), 300, 0.03, 1.0),
                          ((3, 129, 40), 129, 1.0, 4.0)],
                     interpreter=[((2, 2, 9, 64), 9, 0.5, 1.0), ((2, 4, 10, 64), 30, 0.03, 1.0),
                                  ((3, 13, 40), 13, 1.0, 4.0)])
    for q_shape, n_keys, sm_scale, size in cases:
        expect_attention(ctx, *qkv(ctx, q_shape, n_keys, scale=size), sm_scale=sm_scale)


@lesson.check(2, "naive_attention with causal=True (square: M == N)", needs=ATTENTION, timeout=60,
              zh="causal=True 的 naive_attention（方阵：M == N）")
def attention_causal(ctx):
    for q_shape in ctx.pick(gpu=[(256, 64), (2, 8, 1000, 64), (2, 4, 512, 128), (4, 333, 80), (1, 1, 1, 16)],
                            interpreter=[(7, 16), (2, 3, 33, 24), (2, 2, 20, 32), (3, 13, 40), (1, 1, 1, 8)]):
        q, k, v = qkv(ctx, q_shape, q_shape[-2])
        expect_attention(ctx, q, k, v, causal=True, sm_scale=usual_scale(q))


@lesson.check(1, "naive_attention with causal=True and M != N (top-left alignment)", needs=ATTENTION, timeout=60,
              zh="causal=True 且 M != N 的 naive_attention（左上对齐）")
def attention_causal_rect(ctx):
    # fewer queries than keys and more, down to a single query or a single key (where top-left and bottom-right
    # differ most); compared with a mask built from the definition (causal_mask), not with the solution's triu
    cases = ctx.pick(gpu=[((2, 4, 100, 64), 300), ((2, 4, 300, 64), 100), ((1, 8, 77, 128), 1000),
                          ((1, 8, 1000, 64), 77), ((1, 64), 513), ((513, 64), 1)],
                     interpreter=[((2, 2, 5, 16), 12), ((2, 2, 12, 16), 5), ((9, 32), 4), ((2, 7, 32), 19),
                                  ((1, 16), 6), ((6, 16), 1)])
    for q_shape, n_keys in cases:
        q, k, v = qkv(ctx, q_shape, n_keys)
        expect_attention(ctx, q, k, v, causal=True, sm_scale=usual_scale(q),
                         note=ctx.t(" (top-left causal mask: query i sees keys 0..i)",
                                    "（左上对齐的因果掩码：查询 i 看到键 0..i）"))


@lesson.check(1, "naive_attention on transposed views (B, N, H, d) → (B, H, N, d); inputs unchanged",
              needs=ATTENTION, timeout=60, zh="转置视图 (B, N, H, d) → (B, H, N, d) 上的 naive_attention；输入保持不变")
def attention_views(ctx):
    # Models keep (batch, tokens, heads, d) and hand attention a transposed view; q, k, v must not be modified.
    # Not causal, fp32 (causal masks and fp16 have their own checks).
    for B, M, N, H, d in ctx.pick(gpu=[(2, 300, 300, 8, 64), (2, 128, 200, 4, 64)],
                                  interpreter=[(2, 11, 11, 3, 16), (2, 6, 9, 3, 24)]):
        q = ctx.randn(B, M, H, d).transpose(1, 2)
        k = ctx.randn(B, N, H, d).transpose(1, 2)
        v = ctx.randn(B, N, H, d).transpose(1, 2)
        expect_attention(ctx, q, k, v, sm_scale=usual_scale(q),
                         note=ctx.t(" (transposed views, not contiguous)", "（转置视图，非连续）"))

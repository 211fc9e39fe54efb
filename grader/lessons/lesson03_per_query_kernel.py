"""Checks of lesson 03: `per_query_attention_kernel` and `per_query_attention(q, k, v, sm_scale=None)`
for 2-D q (M, d), k and v (N, d): one Triton program per query row, K/V streamed in blocks of 32."""
import math

import torch

from ..harness import TORCH_DOES_THE_WORK, Lesson

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


def expect_attention(ctx, q, k, v, sm_scale=None, what=None):
    """Call the student's per_query_attention and compare with float64 attention computed here."""
    M, d = q.shape
    N = k.shape[0]
    args = (q, k, v) if sm_scale is None else (q, k, v, sm_scale)
    out = ctx.call("per_query_attention", *args)
    what = what or ctx.t(f"per_query_attention for M={M}, N={N}, d={d}, {q.dtype}",
                         f"per_query_attention，M={M}，N={N}，d={d}，{q.dtype}") + (
        ctx.t(f", sm_scale={sm_scale}", f"，sm_scale={sm_scale}") if sm_scale is not None else "")
    # Torch doing the work in the wrapper shows as a tensor of at least M×N elements (the scores) that is larger
    # than anything a kernel launch creates: the output (M×d, which the worker allocates inside a NaN margin of
    # max(256, M×d) elements or so on each side), or the interpreter's byte copies of the inputs.
    info = ctx.last_info
    launch = max([M * d + 2 * (max(256, M * d) + 16)] + [t.untyped_storage().nbytes() for t in (q, k, v)])
    if info["largest_numel"] > launch and info["largest_numel"] >= M * N:
        ctx.fail(ctx.t(f"{what}: `per_query_attention` created a tensor of shape {info['largest_shape']} "
                       f"({info['largest_numel']} elements, at least M×N = {M * N}): the attention must be computed by "
                       "your kernel, one query row per program, not by torch in the wrapper",
                       f"{what}：`per_query_attention` 创建了一个形状为 {info['largest_shape']} 的张量"
                       f"（{info['largest_numel']} 个元素，不少于 M×N = {M * N}）：注意力必须由你的 kernel 计算，"
                       "每个 program 一个查询行，而不是在包装函数里用 torch 计算"))
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    exact = torch.softmax((q.double() @ k.double().T) * scale, dim=-1) @ v.double()
    same = (torch.softmax((q.float() @ k.float().T) * scale, dim=-1) @ v.float()).to(q.dtype)
    ctx.expect_close(out, exact, same_precision=same, what=what)


# One mistake, one check (COURSE_SPEC §5): each check tests its own idea on inputs that are easy in every other
# respect. Only `ragged_n` has an N that is not a multiple of BLOCK_N = 32 (a missing -inf or key mask costs its
# points only), only `odd_head_dim` a d that is not a power of two, only `m_ne_n` M ≠ N (a kernel given M where N
# belongs computes M = N right), only `custom_scale` a custom sm_scale. In the interpreter, where every (program,
# K block) visit costs milliseconds, the checks of other ideas use a single block (M = N = 32); `basic` has two, and
# 64 query rows: a row whose max sits in its first block hides a missing rescale, and with 2 to 6 rows all of them
# did so in a few seeds in a hundred, so the same mistake scored differently from student to student.
def random_qkv(ctx, M, N, d, dtype=torch.float32):
    return ctx.randn(M, d, dtype=dtype), ctx.randn(N, d, dtype=dtype), ctx.randn(N, d, dtype=dtype)


@lesson.check(1, "attention with N a multiple of 32 and d a power of two", needs=NEEDS, kernels=KERNELS,
              zh="N 是 32 的倍数、d 是 2 的幂时的注意力")
def basic(ctx):
    for M, N, d in ctx.pick(gpu=[(64, 64, 64), (256, 256, 128), (1024, 1024, 64), (96, 96, 16)],
                            interpreter=[(64, 64, 16)]):
        expect_attention(ctx, *random_qkv(ctx, M, N, d))


@lesson.check(2, "attention for any number of keys N (key mask, -inf scores)", needs=NEEDS, kernels=KERNELS,
              zh="任意键数 N 的注意力（键掩码，-inf 分数）")
def ragged_n(ctx):
    for M, N, d in ctx.pick(gpu=[(1, 1, 64), (33, 33, 64), (100, 100, 64), (1000, 1000, 128), (4097, 4097, 64)],
                            interpreter=[(1, 1, 16), (33, 33, 16), (50, 50, 32)]):
        expect_attention(ctx, *random_qkv(ctx, M, N, d))


@lesson.check(2, "attention for a head dimension d that is not a power of two (d mask)", needs=NEEDS,
              kernels=KERNELS, zh="头维度 d 不是 2 的幂时的注意力（特征掩码 d_mask）")
def odd_head_dim(ctx):
    for M, N, d in ctx.pick(gpu=[(256, 256, 40), (320, 320, 100), (64, 64, 72), (32, 32, 24)],
                            interpreter=[(32, 32, 40), (32, 32, 100)]):
        expect_attention(ctx, *random_qkv(ctx, M, N, d))


@lesson.check(1, "attention with M ≠ N (more or fewer queries than keys)", needs=NEEDS, kernels=KERNELS,
              zh="M ≠ N 时的注意力（查询比键多或少）")
def m_ne_n(ctx):
    for M, N, d in ctx.pick(gpu=[(1, 2048, 64), (1000, 32, 64), (5, 4096, 128), (2048, 96, 32)],
                            interpreter=[(1, 96, 32), (40, 32, 16), (16, 128, 16)]):
        expect_attention(ctx, *random_qkv(ctx, M, N, d))


@lesson.check(1, "fp16 attention (fp16 output, fp32 accumulation)", needs=NEEDS, kernels=KERNELS,
              zh="fp16 注意力（fp16 输出，fp32 累加）")
def fp16(ctx):
    for M, N, d in ctx.pick(gpu=[(1024, 1024, 64), (1024, 1024, 128), (320, 320, 32)],
                            interpreter=[(32, 32, 64)]):
        expect_attention(ctx, *random_qkv(ctx, M, N, d, dtype=torch.float16))


@lesson.check(1, "attention with a custom sm_scale", needs=NEEDS, kernels=KERNELS, zh="给定 sm_scale 时的注意力")
def custom_scale(ctx):
    for M, N, d, scale in ctx.pick(gpu=[(512, 512, 64, 1.0), (320, 320, 128, 0.02), (64, 64, 32, 0.5)],
                                   interpreter=[(32, 32, 16, 1.0), (32, 32, 32, 0.05)]):
        expect_attention(ctx, *random_qkv(ctx, M, N, d), sm_scale=scale)


@lesson.check(1, "attention on views whose rows are further apart than d (row strides)", needs=NEEDS,
              kernels=KERNELS, zh="行间距大于 d 的视图上的注意力（行 stride）")
def strided(ctx):
    # Three different row strides: q's d + pad, k's 2·d (packed with another tensor), v's d + v_pad, so a kernel
    # that uses one tensor's stride for another's rows (stride_kn for V, say) reads the wrong rows.
    for M, N, d, pad, v_pad, dtype in ctx.pick(
            gpu=[(256, 256, 64, 13, 5, torch.float32), (1024, 1024, 128, 64, 24, torch.float16)],
            interpreter=[(32, 32, 32, 11, 5, torch.float32), (32, 32, 16, 3, 7, torch.float16)]):
        q = ctx.randn(M, d + pad, dtype=dtype)[:, :d]    # rows d + pad apart
        k = ctx.randn(N, 2, d, dtype=dtype)[:, 0]        # k packed with another tensor: rows 2·d apart
        v = ctx.randn(N, d + v_pad, dtype=dtype)[:, :d]  # rows d + v_pad apart
        expect_attention(ctx, q, k, v, what=ctx.t(
            f"per_query_attention for q = x[:, :{d}] of a ({M}, {d + pad}) tensor, k = kv[:, 0] of a ({N}, 2, {d}) "
            f"tensor and v = y[:, :{d}] of a ({N}, {d + v_pad}) tensor, {dtype}",
            f"per_query_attention，q = x[:, :{d}]（x 的形状为 ({M}, {d + pad})），k = kv[:, 0]（kv 的形状为 "
            f"({N}, 2, {d})），v = y[:, :{d}]（y 的形状为 ({N}, {d + v_pad})），{dtype}"))


@lesson.check(1, "per_query_attention_kernel compiles for sm_80 and sm_90 GPUs (fp32 and fp16)", needs=NEEDS,
              modes=("gpu", "interpreter", "structure"), compile_only=True,
              zh="per_query_attention_kernel 能为 sm_80 和 sm_90 GPU 编译（fp32 和 fp16）")
def compiles(ctx):
    for dtype, block_d in (("fp32", 64), ("fp16", 128)):
        signature = {"Q": f"*{dtype}", "K": f"*{dtype}", "V": f"*{dtype}", "Out": f"*{dtype}",
                     "stride_qm": "i32", "stride_kn": "i32", "stride_vn": "i32", "stride_om": "i32",
                     "N": "i32", "D": "i32", "sm_scale": "fp32", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr"}
        ctx.aot("per_query_attention_kernel", signature, {"BLOCK_N": 32, "BLOCK_D": block_d})

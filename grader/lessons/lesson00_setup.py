"""Checks of lesson 00: `softmax_kernel` and `softmax(x)` for 2-D input."""
import torch

from ..harness import Lesson
from .memory_safety import add_memory_check

lesson = Lesson(
    "00_setup",
    graded=("softmax_kernel", "softmax"),
    kernels=("softmax_kernel",),
    forbidden=("softmax", "log_softmax", "scaled_dot_product_attention"),
    structure_needs={"softmax_kernel": ["tl.load", "tl.store", "tl.max", "tl.exp", "tl.sum", "tl.arange"]},
)
NEEDS = ("softmax_kernel", "softmax")
# One mistake, one check (COURSE_SPEC §5): each check tests its own concept on inputs that are easy in every other
# respect. Only softmax_ragged has rows whose length is not a power of two (so a mask mistake costs its points and no
# others), only softmax_strided a row stride, only softmax_stable huge values, only softmax_fp16 fp16.


def expect_softmax(ctx, x, what=None):
    out = ctx.call("softmax", x)
    ctx.expect_close(out, torch.softmax(x.double(), dim=-1), same_precision=torch.softmax(x.float(), -1).to(x.dtype),
                     what=what or ctx.t(f"softmax(x) for x of shape {tuple(x.shape)}, {x.dtype}",
                                        f"softmax(x)，x 的形状为 {tuple(x.shape)}，{x.dtype}"))


def rows_for_softmax(ctx, *shape, dtype=torch.float32):
    """Random rows (scale 3), every other one shifted 20 below zero. Softmax ignores the shift, but a padding
    lane that loads 0 instead of -inf becomes such a row's max: the mistake then shows in every run, where
    with rows around zero it hid in a few seeds out of a thousand (a regrade could change the score)."""
    x = ctx.randn(*shape, dtype=torch.float64, scale=3.0)
    x[1::2] -= 20.0
    return x.to(dtype)


@lesson.check(1, "softmax of rows whose length is a power of two", needs=NEEDS, kernels=("softmax_kernel",),
              zh="行长为 2 的幂时的 softmax")
def softmax_power_of_two(ctx):
    for shape in ctx.pick(gpu=[(1, 128), (64, 1024), (4096, 256)], interpreter=[(4, 16), (3, 64)]):
        expect_softmax(ctx, ctx.randn(*shape, scale=3.0))


@lesson.check(2, "softmax of rows of any length (masks)", needs=NEEDS, kernels=("softmax_kernel",),
              zh="任意行长的 softmax（掩码）")
def softmax_ragged(ctx):
    for shape in ctx.pick(gpu=[(1, 1), (7, 3), (33, 1000), (300, 4097)], interpreter=[(1, 1), (5, 7), (3, 130)]):
        expect_softmax(ctx, rows_for_softmax(ctx, *shape))


@lesson.check(1, "softmax of a view with a row stride", needs=NEEDS, kernels=("softmax_kernel",),
              zh="带行 stride 的视图上的 softmax")
def softmax_strided(ctx):
    # Rows of a power-of-two length, `pad` elements further apart than their length: the gaps hold NaN (ctx.call
    # frames every input), so a kernel that assumes rows n_cols apart reads NaN.
    for rows, cols, pad in ctx.pick(gpu=[(64, 1024, 24), (17, 32, 95)], interpreter=[(6, 32, 11)]):
        x = ctx.randn(rows, cols + pad, scale=3.0)[:, :cols]  # rows are cols+pad apart in memory
        expect_softmax(ctx, x, what=ctx.t(
            f"softmax(x[:, :{cols}]) of a ({rows}, {cols + pad}) tensor (row stride {cols + pad})",
            f"softmax(x[:, :{cols}])，x 是一个 ({rows}, {cols + pad}) 张量的视图（行 stride 为 {cols + pad}）"))


@lesson.check(1, "softmax of huge values (±1e4) stays finite", needs=NEEDS, kernels=("softmax_kernel",),
              zh="超大数值（±1e4）的 softmax 保持有限")
def softmax_stable(ctx):
    for shape in ctx.pick(gpu=[(16, 512), (8, 2048)], interpreter=[(4, 32)]):  # rows of a power-of-two length
        expect_softmax(ctx, ctx.randn(*shape, scale=1e4))


@lesson.check(1, "softmax of fp16 input", needs=NEEDS, kernels=("softmax_kernel",), zh="fp16 输入的 softmax")
def softmax_fp16(ctx):
    for shape in ctx.pick(gpu=[(128, 1024), (9, 256)], interpreter=[(4, 64)]):  # rows of a power-of-two length
        expect_softmax(ctx, ctx.randn(*shape, dtype=torch.float16, scale=3.0))


@lesson.check(1, "softmax_kernel compiles with Triton's compiler for a real GPU (sm_80 and sm_90), even on a "
                 "machine without one", needs=NEEDS, modes=("gpu", "interpreter", "structure"), compile_only=True,
              zh="softmax_kernel 能用 Triton 的编译器为真实的 GPU（sm_80 和 sm_90）编译，即使所在机器没有 GPU")
def softmax_compiles(ctx):
    for dtype in ("fp32", "fp16"):
        signature = {"out_ptr": f"*{dtype}", "in_ptr": f"*{dtype}", "in_row_stride": "i32",
                     "out_row_stride": "i32", "n_cols": "i32", "BLOCK_SIZE": "constexpr"}
        ctx.aot("softmax_kernel", signature, {"BLOCK_SIZE": 1024})


# ── memory safety (issue 24): every access inside the tensors, even one whose value is thrown away ──
def memory_calls(ctx, call):
    call("softmax", ctx.randn(5, 37, scale=3.0))  # rows of 37: the last 27 lanes of a 64-wide block are past the end


add_memory_check(lesson, NEEDS, ("softmax_kernel",), memory_calls)

"""The memory check that every Triton lesson has (issue 24): the learner's kernels run on a small shape in Triton's
interpreter with every load, store and atomic bounds-checked (grader/worker.py MemoryGuard), in every mode, on a
GPU machine too, so that the verdict is the same everywhere. An access outside every tensor of the launch costs
this check, with the learner's line and the block positions that need a mask; what the values are is the other
checks' business.

A masked-off read whose value is thrown away gives right results, so no other check can see it; on a GPU it can
stop the kernel with an illegal memory access when the tensor ends at a page boundary.

The inputs are `gapped`: views with gaps after every row, head and batch, so that a read past the end of a row (or
of a head's rows) lands in a gap, in every program, not only past the end of the last one."""
import torch


def gapped(x):
    """A copy of x whose every dimension is followed in memory by a gap at least as long (16 elements at least):
    rows of d elements lie 2d apart, a head's N rows are followed by N spare ones, and so on. Nothing but x's elements
    is in any tensor, so an access that runs past the end of a row, a head or a batch, by up to its length, lands
    in a gap, in every program (not only past the end of the last one)."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.numel() == 0:
        return x
    fill = float("nan") if x.is_floating_point() else -1
    storage = torch.full([n + max(n, 16) for n in x.shape], fill, dtype=x.dtype, device=x.device)
    view = storage[tuple(slice(0, n) for n in x.shape)]
    view.copy_(x)
    return view


class AsGiven:
    """An argument that `call` passes without gaps: a buffer whose layout the lesson fixes (lesson 05's lse)."""
    def __init__(self, tensor):
        self.tensor = tensor


def _prepared(x):
    return x.tensor if isinstance(x, AsGiven) else gapped(x)


def add_memory_check(lesson, needs, kernels, run, points=1):
    """Register the check `memory_safety` of `lesson`. `run(ctx, call)` makes the calls: `call(name, *args,
    **kwargs)` is ctx.call with every tensor argument `gapped` (but those wrapped in AsGiven) and every kernel access bounds-checked (backward=…
    too), and returns what ctx.call returns."""
    @lesson.check(points, "memory safety: no kernel reads or writes outside its tensors (in the interpreter, on a "
                          "small shape with ragged lengths, in every mode)",
                  needs=needs, kernels=kernels, interpreted=True,
                  zh="内存安全：kernel 不读写它的张量之外的内存（在解释器里，用一个长度不整齐的小形状，所有模式都查）")
    def memory_safety(ctx):
        shown = []

        def call(name, *args, backward=None, **kwargs):
            shapes = [tuple(getattr(a, "tensor", a).shape) for a in args if isinstance(getattr(a, "tensor", a),
                                                                                          torch.Tensor)]
            shown.append(f"{name}(" + ", ".join(map(str, shapes)) + ")")
            return ctx.call(name, *[_prepared(a) for a in args], sanitize=True, backward=_prepared(backward),
                            **{k: _prepared(v) for k, v in kwargs.items()})
        run(ctx, call)
        return ctx.t("every access inside its tensors: ", "所有访问都在张量之内：") + "; ".join(shown)
    return memory_safety

from . import Mutant

ALL_NUMERIC = {"softmax_power_of_two", "softmax_ragged", "softmax_strided", "softmax_stable", "softmax_fp16"}

MUTANTS = [
    Mutant("torch_does_the_work",
           [("BLOCK_SIZE=BLOCK_SIZE)\n    return out", "BLOCK_SIZE=BLOCK_SIZE)\n    return torch.softmax(x, dim=-1)")],
           {"softmax_power_of_two"}, "the wrapper launches the kernel but returns torch.softmax"),
    Mutant("kernel_never_launched",
           [("    softmax_kernel[(n_rows,)]", "    out = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)\n    0 and softmax_kernel[(n_rows,)]")],
           {"softmax_power_of_two"}, "computes the result with torch and never launches the kernel"),
    Mutant("masked_lanes_load_zero",
           [('other=-float("inf")', "other=0.0")],
           {"softmax_ragged"}, "padding lanes load 0 instead of -inf", passes={"softmax_power_of_two"}),
    Mutant("no_store_mask",
           [("y.to(out_ptr.dtype.element_ty), mask=mask)", "y.to(out_ptr.dtype.element_ty), mask=offsets < BLOCK_SIZE // 2)")],
           {"softmax_ragged"}, "stores only part of the row: unwritten (poisoned) elements show as NaN"),
    Mutant("no_max_subtraction",
           [("    x = x - tl.max(x, axis=0)\n    numerator = tl.exp(x)\n    y", "    numerator = tl.exp(x)\n    y")],
           {"softmax_stable"}, "exp overflows for large inputs"),
    Mutant("contiguous_row_stride",
           [("(out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=BLOCK_SIZE)", "(out, x, n_cols, n_cols, n_cols, BLOCK_SIZE=BLOCK_SIZE)")],
           {"softmax_strided"}, "assumes rows are n_cols apart"),
    Mutant("fp16_accumulation_lost",
           [("    out = torch.empty_like(x)\n", "    out = torch.empty_like(x, dtype=torch.float32)\n")],
           {"softmax_fp16"}, "returns float32 for fp16 input"),
    Mutant("compile_error_on_gpu",
           [("    row = tl.program_id(0)  # one program per row\n", "    row = tl.program_id(0)  # one program per row\n    tl.static_assert(BLOCK_SIZE < 512)\n")],
           {"softmax_compiles"}, "a static assert that the interpreter never meets at small sizes"),
]

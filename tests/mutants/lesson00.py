from . import SEGFAULT, Mutant

ALL_NUMERIC = {"softmax_power_of_two", "softmax_ragged", "softmax_strided", "softmax_stable", "softmax_fp16"}
# One mistake, one check (COURSE_SPEC §5): a mistake of one concept keeps the points of the other checks. `passes`
# names the checks that such a mistake used to cost too, or that share its inputs. Every check was run once on every
# mutant (but the hangs) to confirm the rest; running them all here would cost CI minutes for little more evidence.

LAUNCH = "softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=BLOCK_SIZE)"
LOAD = 'x = tl.load(in_ptr + row * in_row_stride + offsets, mask=mask, other=-float("inf")).to(tl.float32)'

MUTANTS = [
    # ── cheats: every numeric check refuses them (the wrapper must launch the kernel and not call torch.softmax) ─
    Mutant("torch_does_the_work",
           [("BLOCK_SIZE=BLOCK_SIZE)\n    return out", "BLOCK_SIZE=BLOCK_SIZE)\n    return torch.softmax(x, dim=-1)")],
           {"softmax_power_of_two"}, "the wrapper launches the kernel but returns torch.softmax (every check refuses "
           "it, the compile check too: it reads the wrapper's calls)"),
    Mutant("kernel_never_launched",
           [("    softmax_kernel[(n_rows,)]", "    out = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)\n    0 and softmax_kernel[(n_rows,)]")],
           {"softmax_power_of_two"}, "computes the result with torch and never launches the kernel"),
    # ── one mistake, one check: each loses the check named for its concept and keeps every other ────────────
    Mutant("masked_lanes_load_zero",
           [('other=-float("inf")', "other=0.0")],
           {"softmax_ragged"}, "padding lanes load 0 instead of -inf",
           passes={"softmax_power_of_two", "softmax_strided", "softmax_fp16"}, not_blamed={1, 3, 4, 5, 6}),
    Mutant("mask_off_by_one",
           [("mask = offsets < n_cols", "mask = offsets <= n_cols")],
           {"softmax_ragged"}, "TODO 1's mask lets one lane past the row through: it reads the next row's first "
           "element (or the NaN past the tensor) and writes into it; rows of a power-of-two length have no such lane",
           passes={"softmax_power_of_two", "softmax_strided", "softmax_stable", "softmax_fp16"},
           not_blamed={2, 3, 4, 5, 6}),
    Mutant("no_load_mask",
           [(LOAD, "x = tl.load(in_ptr + row * in_row_stride + offsets).to(tl.float32)")],
           {"softmax_ragged"}, "the load has no mask: lanes past a row read the next row, or NaN past the tensor",
           passes={"softmax_power_of_two", "softmax_strided"}),
    Mutant("block_size_is_n_cols",
           [("BLOCK_SIZE = triton.next_power_of_2(n_cols)", "BLOCK_SIZE = n_cols")],
           {"softmax_ragged"}, "BLOCK_SIZE = n_cols: tl.arange needs a power of two",
           passes={"softmax_strided", "softmax_stable", "softmax_fp16"}),
    Mutant("grid_counts_blocks_not_rows",
           [(LAUNCH, LAUNCH.replace("[(n_rows,)]", "[(triton.cdiv(n_rows * n_cols, BLOCK_SIZE),)]"))],
           {"softmax_ragged"}, "one program per BLOCK_SIZE elements instead of per row: the last rows are never "
           "written when n_cols is not a power of two (the poisoned output shows NaN)",
           passes={"softmax_strided", "softmax_fp16"}),
    Mutant("no_store_mask",
           [("y.to(out_ptr.dtype.element_ty), mask=mask)", "y.to(out_ptr.dtype.element_ty), mask=offsets < BLOCK_SIZE // 2)")],
           {"softmax_ragged"}, "the store's mask covers only half of each block: unwritten (poisoned) elements show "
           "as NaN in every check (a store with no mask at all writes past the output, which neither the interpreter "
           "nor a check can see)", passes={"softmax_compiles"}),
    Mutant("no_max_subtraction",
           [("    x = x - tl.max(x, axis=0)\n    numerator = tl.exp(x)\n    y", "    numerator = tl.exp(x)\n    y")],
           {"softmax_stable"}, "exp overflows for large inputs (the compile check fails too: it also reads the kernel's "
           "structure, and the lesson's structure needs tl.max)", passes={"softmax_ragged", "softmax_fp16"},
           not_blamed={1, 2, 4, 5, 6}),
    Mutant("max_added_not_subtracted",
           [("    x = x - tl.max(x, axis=0)\n", "    x = x + tl.max(x, axis=0)\n")],
           {"softmax_stable"}, "TODO 3 shifts the row by +max instead of -max: the same softmax for ordinary values "
           "(a shift cancels), exp(2·max) overflows for huge ones (every exponent must be ≤ 0)",
           passes={"softmax_power_of_two", "softmax_ragged", "softmax_fp16"}, not_blamed={1, 2, 4, 5, 6}),
    Mutant("block_size_from_rows",
           [("BLOCK_SIZE = triton.next_power_of_2(n_cols)", "BLOCK_SIZE = triton.next_power_of_2(n_rows)")],
           {"softmax_power_of_two"}, "the block size from the number of rows (dims swapped): right only when the "
           "rows are as many as the columns; the (4, 16) rows show it (12 of the 16 columns are never written)"),
    Mutant("contiguous_row_stride",
           [(LAUNCH, LAUNCH.replace("x.stride(0), out.stride(0)", "n_cols, n_cols"))],
           {"softmax_strided"}, "assumes rows are n_cols apart", passes={"softmax_power_of_two", "softmax_ragged"},
           not_blamed={1, 2, 3, 4, 5}),
    Mutant("fp16_accumulation_lost",
           [("    out = torch.empty_like(x)\n", "    out = torch.empty_like(x, dtype=torch.float32)\n")],
           {"softmax_fp16"}, "returns float32 for fp16 input", passes={"softmax_power_of_two"}),
    Mutant("compile_error_on_gpu",
           [("    row = tl.program_id(0)  # one program per row\n", "    row = tl.program_id(0)  # one program per row\n    tl.static_assert(BLOCK_SIZE < 512)\n")],
           {"softmax_compiles"}, "a static assert that the interpreter never meets at small sizes (on a GPU the "
           "larger rows of the other checks meet it too)"),
]

# ── crashes, hangs, noise and a missing name: each costs only the checks that meet it (COURSE_SPEC §5) ──────
STORE = "tl.store(out_ptr + row * out_row_stride + offsets,"
MUTANTS += [
    Mutant("out_of_bounds_store",
           [(STORE, "tl.store(out_ptr + row * out_row_stride + offsets + row.to(tl.int64) * 1073741824 * 16,")],
           ALL_NUMERIC,
           "rows after the first are stored 64 GB past the output: an illegal memory access on a GPU, a crash in "
           "the interpreter", passes={"softmax_compiles"}),
    Mutant("kernel_hangs",
           [("    row = tl.program_id(0)  # one program per row\n",
             "    row = tl.program_id(0)  # one program per row\n"
             "    spin = tl.load(in_ptr + row * in_row_stride, volatile=True)\n    while spin == spin:\n"
             "        spin = tl.load(in_ptr + row * in_row_stride, volatile=True)\n")],
           {"softmax_ragged"}, "a kernel that never ends: it re-reads the same element until it changes (volatile loads "
           "cannot be optimised away; a counter that only grows ended on the H200 after about a second)", passes={"softmax_compiles"},
           timeout=20),
    Mutant("megabytes_of_output",
           [("    n_rows, n_cols = x.shape\n",
             "    n_rows, n_cols = x.shape\n    print('debug ' * 1_000_000)\n    " + SEGFAULT + "\n")],
           {"softmax_ragged"}, "prints 6 MB then dies: the message shows only the last lines",
           passes={"softmax_compiles"}),
    Mutant("stub_left_under_the_code",
           [("y.to(out_ptr.dtype.element_ty), mask=mask)",
             'y.to(out_ptr.dtype.element_ty), mask=mask)\n    raise NotImplementedError("TODO: replace this line with your '
             'code")')],
           {"softmax_power_of_two", "softmax_compiles"}, "TODO 4's line is written but its stub line was left under "
           "it: every check names TODO 4, and only TODO 4", not_blamed={1, 2, 3, 5, 6}),
    Mutant("graded_function_renamed",
           [("def softmax(", "def my_softmax(")],
           ALL_NUMERIC, "the graded name `softmax` no longer exists: every check that needs it says so"),
]

# The memory check's (issue 24): reads whose values are thrown away, which no comparison can see.
MUTANTS += [
    Mutant("row_read_unmasked",
           [('x = tl.load(in_ptr + row * in_row_stride + offsets, mask=mask, other=-float("inf")).to(tl.float32)',
             'x = tl.where(mask, tl.load(in_ptr + row * in_row_stride + offsets), -float("inf")).to(tl.float32)')],
           {"memory_safety"}, "loads all BLOCK_SIZE lanes of a row and drops those past its end with tl.where: right values, but a read outside the tensor, which a GPU may answer with an illegal memory access: only memory_safety sees it",
           passes={"softmax_ragged", "softmax_power_of_two"}),
]

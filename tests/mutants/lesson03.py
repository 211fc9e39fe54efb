from . import SEGFAULT, Mutant

LAUNCH = "    per_query_attention_kernel[(M,)]("
TORCH_ELEMENTWISE = ("    s = (q[:, None, :].float() * k[None, :, :].float()).sum(-1) * sm_scale\n"
                     "    w = torch.exp(s - s.amax(-1, keepdim=True))\n"
                     "    out = ((w / w.sum(-1, keepdim=True))[:, :, None] * v[None].float()).sum(1).to(q.dtype)\n")

# One mistake, one check: every check but `ragged_n` has N a multiple of 32, every check but `odd_head_dim` d a power
# of two, every check but `m_ne_n` M = N, every check but `custom_scale` the default scale; the `passes` sets hold
# the checks a mutant must not cost (in interpreter and gpu mode alike).
ALL = {"basic", "ragged_n", "odd_head_dim", "m_ne_n", "fp16", "custom_scale", "strided"}

MUTANTS = [
    Mutant("missing_rescale",
           [("        l_i = l_i * alpha + tl.sum(p, axis=0)\n        acc = acc * alpha\n",
             "        l_i = l_i + tl.sum(p, axis=0)\n")],
           {"basic", "ragged_n", "m_ne_n"}, "l_i and acc are not rescaled by alpha when a later block raises the max: "
           "every check with two blocks or more fails, and each message must name TODO 3 (the instructor trial: the "
           "checks named the key mask and M ≠ N instead)", not_blamed={1, 2, 4, 5, 6}),
    Mutant("exp2_for_exp",
           [("        alpha = tl.exp(m_i - m_new)", "        alpha = tl.exp2(m_i - m_new)"),
            ("        p = tl.exp(s - m_new)", "        p = tl.exp2(s - m_new)")],
           ALL, "tl.exp2 where the online softmax needs tl.exp (a softmax of the scores times ln 2): every check "
           "fails, and each message must name TODO 3 (a new-learner trial: check (a) named no TODO)",
           not_blamed={1, 2, 4, 5, 6}),
    Mutant("masked_keys_zero",
           [('s = tl.where(n_mask, s, float("-inf"))', "s = tl.where(n_mask, s, 0.0)")],
           {"ragged_n"}, "the scores of keys beyond N are 0 instead of -inf", passes=ALL - {"ragged_n"},
           not_blamed={1, 3, 4, 5, 6}),
    Mutant("no_scale",
           [("s = tl.sum(k * q[None, :], axis=1) * sm_scale", "s = tl.sum(k * q[None, :], axis=1)")],
           ALL, "the scores are not multiplied by sm_scale: every check fails, and each must blame TODO 2's scale, "
           "not its own idea", not_blamed={1, 3, 4, 5, 6}),
    Mutant("ignores_custom_scale",
           [("sm_scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)", "sm_scale = 1.0 / math.sqrt(d)")],
           {"custom_scale"}, "the wrapper always uses 1/sqrt(d), whatever sm_scale it is given",
           passes=ALL - {"custom_scale"}, not_blamed={1, 3, 4, 5}),
    Mutant("missing_d_mask",
           [("tl.load(Q + pid * stride_qm + offs_d, mask=d_mask, other=0.0)", "tl.load(Q + pid * stride_qm + offs_d)"),
            ("kv_mask = n_mask[:, None] & d_mask[None, :]", "kv_mask = n_mask[:, None]")],
           {"odd_head_dim"}, "the loads are masked on keys only: padding features read the next row's values",
           passes=ALL - {"odd_head_dim"}, not_blamed={3, 5, 6}),
    Mutant("torch_does_the_work",
           [("    return out", "    return torch.softmax(q @ k.T * sm_scale, dim=-1) @ v")],
           {"basic"}, "launches the kernel but returns torch's attention"),
    Mutant("kernel_never_launched",
           [(LAUNCH, TORCH_ELEMENTWISE + "    0 and " + LAUNCH.lstrip())],
           {"basic"}, "computes attention with elementwise torch ops and never launches the kernel"),
    Mutant("torch_elementwise_after_launch",
           [("    return out", TORCH_ELEMENTWISE + "    return out")],
           {"basic"}, "launches the kernel, then overwrites its result with attention from elementwise torch ops "
                      "(no forbidden call, but an M×N×d tensor)"),
    Mutant("contiguous_rows",
           [("q.stride(0), k.stride(0), v.stride(0), out.stride(0)", "d, d, d, d")],
           {"strided"}, "assumes rows are d elements apart", passes=ALL - {"strided"}, not_blamed={1, 2, 3, 4, 5}),
    Mutant("v_rows_at_k_stride",
           [("V + offs_kn[:, None] * stride_vn", "V + offs_kn[:, None] * stride_kn")],
           {"strided"}, "the V block is loaded with K's row stride (stride_kn for stride_vn): right only when k and v "
                        "have the same row stride", passes=ALL - {"strided"}, not_blamed={1, 3, 5}),
    Mutant("loop_one_block_short",
           [("for start_n in range(0, N, BLOCK_N):", "for start_n in range(0, N // BLOCK_N * BLOCK_N, BLOCK_N):")],
           {"ragged_n"}, "the K/V loop (given code) stops before the last, partial block: no TODO is to blame",
           passes=ALL - {"ragged_n"}, not_blamed={1, 2, 3, 4, 5, 6}),
    Mutant("kv_loads_unmasked_on_keys",
           [("kv_mask = n_mask[:, None] & d_mask[None, :]", "kv_mask = d_mask[None, :]")],
           {"ragged_n"}, "K and V loads masked on features only: the last block reads past the last key (NaN around the "
                         "inputs: a missing key's v, weighted 0, gives 0·NaN = NaN)", passes=ALL - {"ragged_n"},
           not_blamed={1, 3, 5, 6}),
    Mutant("int_loop_state",
           [("l_i = tl.full([], 0.0, dtype=tl.float32)", "l_i = 0")],
           {"compiles"}, "l_i starts as an int: the interpreter accepts it, the compiler rejects the type change",
           passes={"basic"},
           on_gpu={"caught_by": {"compiles", "basic"}, "passes": set()}),  # on a GPU no launch compiles
    Mutant("keys_counted_by_queries",
           [("out.stride(0), N, d,", "out.stride(0), M, d,")],
           {"m_ne_n"}, "passes the number of queries M where the kernel needs the number of keys N",
           passes=ALL - {"m_ne_n"}, not_blamed={1, 2, 3, 4, 5}),
    Mutant("crash_on_single_key",
           [("    out = torch.empty((M, d)", "    if N == 1:\n        " + SEGFAULT + "\n    out = torch.empty((M, d)")],
           {"ragged_n"}, "the process dies on one input: only the checks that reach it lose points",
           passes={"basic"}),
    # Issue 23: a check blames its own idea only once the plain input at its size passes; a mistake that breaks the
    # plain input is blamed where the basic check blames it, in every check it fails, never on that check's idea.
    Mutant("never_normalised",
           [("    out = acc / l_i\n", "    out = acc\n")],
           {"basic", "ragged_n", "odd_head_dim", "m_ne_n"}, "acc is stored without the division by l_i: the key mask, "
           "the feature mask and M ≠ N must not be blamed, TODO 5 is", not_blamed={1, 2, 3, 4, 6}),
    Mutant("alpha_upside_down",
           [("alpha = tl.exp(m_i - m_new)", "alpha = tl.exp(m_new - m_i)")],
           {"basic", "ragged_n", "odd_head_dim", "m_ne_n"}, "alpha = exp(m_new − m_i) is inf on the first block, so "
           "every output is NaN: the ragged-N check must not call it a missing key mask (TODO 2), nor the head-dimension "
           "check a missing d_mask (TODO 1)", not_blamed={1, 2, 4, 5, 6}),
    # Issue 24: basic's scores of 150 (large_scores_qkv), where only the running max keeps exp finite. Each of these
    # is right on ordinary scores, so it costs the basic check only, and its message names TODO 3.
    Mutant("max_not_subtracted",
           [("        m_new = tl.maximum(m_i, tl.max(s, axis=0))\n",
             "        m_new = tl.full([], 0.0, dtype=tl.float32)  # no max: p = exp(s), alpha = 1\n")],
           {"basic"}, "the online softmax subtracts no max (p = exp(s)): exact for ordinary scores, inf/inf = NaN "
           "once a score passes 88.7", passes=ALL - {"basic"}, not_blamed={1, 2, 4, 5, 6}),
    Mutant("block_max_not_running",
           [("m_new = tl.maximum(m_i, tl.max(s, axis=0))", "m_new = tl.max(s, axis=0)")],
           {"basic"}, "m_new is this block's max, not the running one: alpha and p still agree, so ordinary scores come "
           "out right, but where the max falls by 120 in a later block alpha = e^120 overflows",
           passes=ALL - {"basic"}, not_blamed={1, 2, 4, 5, 6}),
    Mutant("running_max_from_l_i",
           [("m_new = tl.maximum(m_i, tl.max(s, axis=0))", "m_new = tl.maximum(l_i, tl.max(s, axis=0))")],
           {"basic"}, "m_new takes the running sum l_i for the running max m_i (a one-token survivor of issue 24's "
           "mutation sample): right on ordinary scores, alpha = e^120 where the max falls", passes=ALL - {"basic"},
           not_blamed={1, 2, 4},  # on a GPU its NaN rows read as rows never written: TODOs 5 and 6 are named there
           on_gpu={"passes": set()}),  # the GPU's longer rows (N up to 2048) overflow l_i itself: every check fails
    Mutant("store_at_q_stride",
           [("tl.store(Out + pid * stride_om", "tl.store(Out + pid * stride_qm")],
           {"strided"}, "the store uses q's row stride for Out: right while q is contiguous, past the end of the "
           "output when q's rows are further apart", passes=ALL - {"strided"}, not_blamed={1, 2, 3, 4, 6}),
]

# The memory check's (issue 24): reads whose values are thrown away, which no comparison can see.
MUTANTS += [
    Mutant("key_rows_read_unmasked",
           [("k = tl.load(K + offs_kn[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0).to(tl.float32)",
             "k = tl.where(kv_mask, tl.load(K + offs_kn[:, None] * stride_kn + offs_d[None, :]), 0.0).to(tl.float32)")],
           {"memory_safety"}, "loads whole K blocks, the rows past N and the lanes past d included, and zeroes them "
           "with tl.where: right values, but a read outside the tensor, which a GPU may answer with an illegal memory access: only memory_safety sees it", passes={"ragged_n"}),
]

from . import Mutant

# The causal bounds of TODO 2, as the reference writes them.
HI = "hi = tl.minimum(start_m * BLOCK_M + BLOCK_M + diag, N_CTX_K)"
MASK_START = "mask_start = tl.maximum(tl.minimum(start_m * BLOCK_M + 1 + diag, N_CTX_K), 0) // BLOCK_N * BLOCK_N"
NOT_CAUSAL = {"forward_divisible", "forward_ragged"}

MUTANTS = [
    Mutant("no_rescale_of_acc",
           [("            acc = acc * alpha[:, None]\n", "")],
           {"forward_divisible"},
           "acc is not rescaled by alpha when the running max grows: earlier blocks keep too much weight"),
    Mutant("masked_scores_zero",
           [('qk = tl.where(visible, qk, float("-inf"))', "qk = tl.where(visible, qk, 0.0)")],
           {"forward_ragged"},
           "masked scores set to 0 instead of -inf: padding keys and future keys get weight exp2(0 - m)",
           passes={"forward_divisible", "head_dim_padded", "strided_inputs", "fp32_inputs"}),
    Mutant("causal_off_by_one",
           [("keys[None, :] <= offs_m[:, None] + (N_CTX_K - N_CTX_Q)", "keys[None, :] < offs_m[:, None] + (N_CTX_K - N_CTX_Q)")],
           {"causal"},
           "a query does not see its own key (< instead of <=)", passes=NOT_CAUSAL),
    Mutant("strides_assumed_contiguous",
           [("""    q_ptrs = (Q + off_z * stride_qz + off_h * stride_qh
              + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk)
    k_ptrs = (K + off_z * stride_kz + off_h * stride_kh
              + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kk)
    v_ptrs = (V + off_z * stride_vz + off_h * stride_vh
              + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk)""",
             """    q_ptrs = Q + off_hz * N_CTX_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    k_ptrs = K + off_hz * N_CTX_K * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    v_ptrs = V + off_hz * N_CTX_K * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]""")],
           {"strided_inputs"},
           "pointers computed as if q, k, v were contiguous (B, H, N, d): transposed or packed views read wrong data",
           passes={"forward_divisible", "fp32_inputs"}),
    Mutant("d_mask_missing",
           [("q = tl.load(q_ptrs, mask=(offs_m[:, None] < N_CTX_Q) & d_mask[None, :], other=0.0)",
             "q = tl.load(q_ptrs, mask=offs_m[:, None] < N_CTX_Q, other=0.0)"),
            ("kv_mask = d_mask[None, :]  ", "kv_mask = offs_n[:, None] >= 0  "),
            ("kv_mask = ((start_n + offs_n)[:, None] < N_CTX_K) & d_mask[None, :]",
             "kv_mask = (start_n + offs_n)[:, None] < N_CTX_K")],
           {"head_dim_padded"},
           "loads without the head-dim mask: for d = 40 the padding columns read the next row's numbers",
           passes={"forward_divisible", "forward_ragged", "strided_inputs", "fp32_inputs"}),
    Mutant("wrapper_calls_sdpa",
           [("IS_CAUSAL=bool(causal))\n    return out",
             "IS_CAUSAL=bool(causal))\n"
             "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)")],
           {"forward_divisible"},
           "launches the kernel, then returns PyTorch's scaled_dot_product_attention"),
    Mutant("causal_without_block_skipping",
           [("hi = tl.minimum(start_m * BLOCK_M + BLOCK_M + diag, N_CTX_K)", "hi = N_CTX_K")],
           {"causal_skips_blocks"},
           "causal loop runs over every K block and masks them: correct numbers, twice the work",
           passes={"causal"} | NOT_CAUSAL),
    Mutant("causal_top_left",
           [("diag = N_CTX_K - N_CTX_Q                      # query i sees keys j <= i + diag", "diag = 0"),
            ("keys[None, :] <= offs_m[:, None] + (N_CTX_K - N_CTX_Q)", "keys[None, :] <= offs_m[:, None]")],
           {"causal_unequal_lengths"},
           "causal mask aligned top-left (like is_causal=True) instead of bottom-right", passes={"causal"} | NOT_CAUSAL),
    Mutant("empty_rows_nan",
           [('m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)    # a row that has seen no key yet',
             "m_safe = m_new")],
           {"causal_unequal_lengths"},
           "no guard for rows that have seen only masked keys: exp2(-inf - (-inf)) = NaN",
           passes=NOT_CAUSAL | {"causal_skips_blocks"}, not_blamed={2}),
    # NaN made by the online update (TODO 5) is not blocks loaded above the diagonal (TODO 2): the skip check first
    # confirms that the same input without NaN keys gives the right output
    Mutant("p_against_old_max",
           [("p = tl.math.exp2(qk * qk_scale - m_safe[:, None])", "p = tl.math.exp2(qk * qk_scale - m_i[:, None])")],
           {"forward_divisible", "causal_skips_blocks"},
           "p subtracts the old running max (-inf in the first block): 2^inf overflows and the output is NaN",
           not_blamed={2}),
    Mutant("p_against_block_max",
           [("p = tl.math.exp2(qk * qk_scale - m_safe[:, None])",
             "p = tl.math.exp2((qk - tl.max(qk, 1)[:, None]) * qk_scale)")],
           {"forward_divisible", "causal", "causal_skips_blocks"},
           "p subtracts this block's row max instead of the running max: blocks are weighted inconsistently, and in "
           "a causal diagonal block a row whose scores are all masked gets exp2(-inf - (-inf)) = NaN",
           not_blamed={2}),
    Mutant("grid_floor_division",
           [('grid = lambda META: (triton.cdiv(N_CTX_Q, META["BLOCK_M"]), B * H)',
             'grid = lambda META: (N_CTX_Q // META["BLOCK_M"], B * H)')],
           {"forward_ragged"},
           "the grid rounds the number of Q blocks down: the last rows are never written (poisoned NaN)",
           passes={"forward_divisible"}),
    Mutant("causal_break_does_not_compile",
           [("        for start_n in range(lo, stage_end, BLOCK_N):\n",
             "        for start_n in range(lo, N_CTX_K, BLOCK_N):\n            if start_n >= stage_end:\n"
             "                break\n")],
           {"compiles"},
           "leaves the K loop with `break`: the interpreter runs it, Triton's compiler rejects it"),
    # Causal bounds off by one key: wrong only when seqlen_k - seqlen_q falls on particular remainders modulo the
    # blocks (never for seqlen_q = seqlen_k), so only the remainder-covering causal check sees them.
    Mutant("causal_hi_one_key_short",
           [(HI, HI.replace("BLOCK_M + BLOCK_M + diag", "BLOCK_M + BLOCK_M - 1 + diag"))],
           {"causal_unequal_lengths"},
           "the K loop stops one key early: the last row of a Q block misses its last key when that key starts a "
           "new K block", passes={"causal"} | NOT_CAUSAL),
    Mutant("causal_mask_start_one_key_late",
           [(MASK_START, MASK_START.replace("+ 1 + diag", "+ 2 + diag"))],
           {"causal_unequal_lengths"},
           "the unmasked stage runs one key too far: a K block whose last key the Q block's first row must not see "
           "is loaded without the mask", passes={"causal"} | NOT_CAUSAL),
    Mutant("causal_mask_start_not_clamped",
           [(MASK_START, "mask_start = tl.minimum(start_m * BLOCK_M + 1 + diag, N_CTX_K) // BLOCK_N * BLOCK_N")],
           {"causal_unequal_lengths"},
           "mask_start not clamped at 0: for the top Q blocks of seqlen_q > seqlen_k far enough below the first "
           "visible key it is negative (Triton's // rounds toward zero) and the masked stage reads keys before the "
           "first; the message names mask_start (TODO 2), not the -inf guard of TODO 5",
           passes={"causal"} | NOT_CAUSAL, not_blamed={5}),
    # BLOCK_M where BLOCK_N belongs, or the other way: right with square tiles, wrong with a tall or a wide one
    Mutant("causal_hi_uses_block_n",
           [(HI, HI.replace("BLOCK_M + BLOCK_M + diag", "BLOCK_M + BLOCK_N + diag"))],
           {"causal"}, "hi counts the Q block's rows with BLOCK_N: a tall tile (BLOCK_M > BLOCK_N) stops too early",
           passes=NOT_CAUSAL),
    Mutant("causal_mask_start_uses_block_n",
           [(MASK_START, MASK_START.replace("start_m * BLOCK_M + 1", "start_m * BLOCK_N + 1"))],
           {"causal"}, "the Q block's first row taken as start_m * BLOCK_N: with a wide tile (BLOCK_M < BLOCK_N) blocks "
                       "that need the mask run without it", passes=NOT_CAUSAL),
    Mutant("grid_uses_block_n",
           [('grid = lambda META: (triton.cdiv(N_CTX_Q, META["BLOCK_M"]), B * H)',
             'grid = lambda META: (triton.cdiv(N_CTX_Q, META["BLOCK_N"]), B * H)')],
           {"forward_divisible"}, "the grid counts Q blocks of BLOCK_N rows: with a wide tile the last rows are never "
                                  "computed"),
    # Batch offsets: invisible with B = 1
    Mutant("v_without_batch_offset",
           [("v_ptrs = (V + off_z * stride_vz + off_h * stride_vh", "v_ptrs = (V + off_h * stride_vh")],
           {"forward_divisible"}, "V's pointers leave out the batch offset: every batch element reads batch 0's values"),
    Mutant("q_batch_offset_with_k_stride",
           [("q_ptrs = (Q + off_z * stride_qz + off_h * stride_qh", "q_ptrs = (Q + off_z * stride_kz + off_h * stride_qh")],
           {"forward_ragged"}, "Q's batch offset uses K's batch stride: the same when seqlen_q = seqlen_k, wrong "
                               "otherwise (and only for batch elements after the first)",
           passes={"forward_divisible", "causal"}),
    # Issue 24: heads above 1 (B ≠ H) and every dimension apart from the others in some check; feature strides of
    # their own in strided_inputs.
    Mutant("q_without_head_offset",
           [("q_ptrs = (Q + off_z * stride_qz + off_h * stride_qh", "q_ptrs = (Q + off_z * stride_qz")],
           {"forward_divisible"}, "Q's pointers leave out the head offset: every head reads head 0's queries (invisible "
                                  "with H = 1)"),
    Mutant("grid_without_heads",
           [('grid = lambda META: (triton.cdiv(N_CTX_Q, META["BLOCK_M"]), B * H)',
             'grid = lambda META: (triton.cdiv(N_CTX_Q, META["BLOCK_M"]), B)')],
           {"forward_divisible"}, "the grid has B programs along its second axis, not B·H: with H > 1 most (batch, "
                                  "head) pairs are never computed (right with H = 1)"),
    Mutant("q_head_offset_with_k_stride",
           [("q_ptrs = (Q + off_z * stride_qz + off_h * stride_qh", "q_ptrs = (Q + off_z * stride_qz + off_h * stride_kh")],
           {"forward_ragged"}, "Q's head offset uses K's head stride: the same when seqlen_q = seqlen_k or H = 1, wrong "
                               "otherwise", passes={"forward_divisible", "causal"}),
    Mutant("out_head_stride_of_q",
           [("o_ptrs = (Out + off_z * stride_oz + off_h * stride_oh", "o_ptrs = (Out + off_z * stride_oz + off_h * stride_qh")],
           {"strided_inputs"}, "the output's head offset uses q's head stride: the same while q is contiguous, wrong "
                               "(heads stored over each other) for a transposed (B, N, H, d) q with H > 1",
           passes={"forward_divisible", "forward_ragged", "fp32_inputs"}),
    Mutant("k_features_at_q_stride",
           [("+ offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kk)", "+ offs_n[:, None] * stride_kn + offs_d[None, :] * stride_qk)")],
           {"strided_inputs"}, "K's features are read with q's feature stride: the same while both are 1, wrong for a k "
                               "whose features are apart", passes={"forward_divisible", "forward_ragged", "fp32_inputs"}),
    # Issue 24: forward_divisible's scores of 150 (large_scores), where only the running max keeps exp2 finite. Each
    # of these is right on ordinary scores, so it costs that check only, and its message names TODO 5.
    Mutant("max_not_subtracted",
           [("m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)", "m_new = tl.zeros([BLOCK_M], dtype=tl.float32)")],
           {"forward_divisible"}, "the online softmax subtracts no max (p = 2^(qk·qk_scale), alpha = 1): exact for "
           "ordinary scores, inf/inf = NaN once a base-2 score passes 128",
           passes={"forward_ragged", "head_dim_padded", "strided_inputs", "fp32_inputs", "causal",
                   "causal_unequal_lengths", "causal_skips_blocks"}, not_blamed={1, 2, 3, 4, 6, 7},
           on_gpu={"passes": set()}),  # on a GPU fp16 sums of 2^score over 1537 keys overflow too (forward_ragged)
    Mutant("block_max_not_running",
           [("m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)", "m_new = tl.max(qk, 1) * qk_scale")],
           {"forward_divisible", "causal_unequal_lengths"}, "m_new is this block's row max, not the running one: alpha "
           "and p still agree, so ordinary non-causal scores come out right, but where the max falls by 120 in a later "
           "block alpha = 2^173 overflows; and in a causal row whose last two K blocks are both all masked, the second "
           "gets alpha = 2^(-inf - 0) = 0, which wipes l_i and acc (some rows of a tall tile when seqlen_q ≠ seqlen_k)",
           passes={"forward_ragged", "head_dim_padded", "strided_inputs", "fp32_inputs", "causal",
                   "causal_skips_blocks"}, not_blamed={1, 2, 3, 4, 6, 7}),
    # Reads past a row that are multiplied by zero: visible because the checks put NaN around every input
    Mutant("d_mask_missing_in_unmasked_stage",
           [("kv_mask = d_mask[None, :]  ", "kv_mask = offs_n[:, None] >= 0  ")],
           {"head_dim_padded"},
           "the unmasked stage loads K and V without the head-dim mask: the padding columns read the next row, and "
           "past the last row the memory around the tensor; q's zero padding hides it, except 0·NaN = NaN",
           passes=NOT_CAUSAL),
]

# The memory check's (issue 24): reads whose values are thrown away, which no comparison can see.
MUTANTS += [
    Mutant("q_rows_read_unmasked",
           [("q = tl.load(q_ptrs, mask=(offs_m[:, None] < N_CTX_Q) & d_mask[None, :], other=0.0)",
             "q = tl.load(q_ptrs, mask=d_mask[None, :], other=0.0)")],
           {"memory_safety"}, "loads the Q tile without its row mask: rows past N_CTX_Q are read, then never stored; "
           "right values, but a read outside the tensor, which a GPU may answer with an illegal memory access: only memory_safety sees it" , passes={"forward_ragged"}),
    Mutant("kv_rows_read_unmasked",
           [("k = tl.load(k_ptrs + start_n * stride_kn, mask=kv_mask, other=0.0)",
             "k = tl.where(kv_mask, tl.load(k_ptrs + start_n * stride_kn), 0.0)")],
           {"memory_safety"}, "loads whole K blocks and zeroes the keys past N_CTX_K and the lanes past d with "
           "tl.where: right values, but a read outside the tensor, which a GPU may answer with an illegal memory access: only memory_safety sees it", passes={"forward_ragged"}),
    Mutant("kv_mask_without_d_mask",
           [("kv_mask = ((start_n + offs_n)[:, None] < N_CTX_K) & d_mask[None, :]",
             "kv_mask = (start_n + offs_n)[:, None] < N_CTX_K")],
           {"memory_safety"}, "the masked stage's K/V mask keeps the key rows but drops the head-dim lanes: with d "
           "not a power of two the last key's padding lanes are read past the end of K and V; q's zero padding and "
           "the masked store discard them, so only memory_safety sees it", passes={"forward_ragged"}),
]

"""Wrong submissions of lesson 05. Each loses the check named for its mistake (`caught_by`) and keeps the checks it has
nothing to do with (`passes`): the forward checks never run the backward, the backward checks get an exact o and
log-sum-exp (so a wrong forward costs no backward points), only the ragged and causal checks use lengths that end
inside a block, and `autograd` judges the glue alone."""
from . import Mutant

# The forward's and the dQ kernel's key ranges are the same code (TODO 4 and TODO 11); what follows tells them apart.
FWD_RANGES_END = "        masked_hi = N_CTX\n    acc, l_i, m_i = _attn_fwd_inner("
DQ_RANGES_END = "        masked_hi = N_CTX\n    dq = _attn_bwd_dq_inner("
CAUSAL_RANGES = ("        full_hi = start_m\n        masked_hi = tl.minimum(start_m + BLOCK_M, N_CTX)\n    else:\n"
                 "        full_hi = (N_CTX // BLOCK_N) * BLOCK_N\n")
# The forward's head offsets (q, then K and V): given code, which a learner may rewrite with a flat head index.
FWD_HEAD = ("    q = _load_rows(Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm"
            " + offs_d[None, :] * stride_qd,\n                   offs_m, N_CTX, offs_d, HEAD_DIM, BLOCK_D, True)\n"
            "    K += off_z * stride_kz + off_h * stride_kh  # this head's keys and values\n"
            "    V += off_z * stride_vz + off_h * stride_vh\n")

MUTANTS = [
    # ── the forward ──────────────────────────────────────────────────────────────────────────────────
    Mutant("running_max_not_carried",
           [("        m_i = m_ij\n", "")],
           {"forward"}, "TODO 2 never stores the new max into m_i: right for rows of one block, and the lse of those "
                        "rows is wrong; the output must be judged (and found wrong) before the lse of TODO 5",
           passes={"backward_dkdv"},
           not_blamed={5}),
    Mutant("lse_in_base_e",
           [("lse = m_i + tl.math.log2(l_i)", "lse = m_i + tl.log(l_i)")],
           {"forward"}, "saves the log-sum-exp with a natural log while the backward rebuilds P with exp2",
           passes={"forward_ragged", "forward_causal", "backward_dkdv", "autograd"}),
    Mutant("forward_without_rescale",
           [("acc = acc * alpha[:, None]", "acc = acc")],
           {"forward"}, "never rescales the accumulator when the running max grows",
           passes={"backward_dkdv", "backward_causal", "autograd"}),
    Mutant("alpha_not_broadcast",
           [("acc = acc * alpha[:, None]", "acc = acc * alpha")],
           {"forward"}, "the hint's old `acc = acc*alpha` typed literally: alpha lined up with acc's columns (an error "
                        "when BLOCK_M ≠ BLOCK_D, silently wrong when they are equal)",
           passes={"backward_dq"}),
    Mutant("max_not_broadcast_in_masked_block",
           [("            qk = qk - m_ij[:, None]\n", "            qk = qk - m_ij\n")],
           {"forward_ragged", "forward_causal"},
           "the hint's old `qk -= m_ij` typed literally in the masked stage: with square tiles it runs and subtracts "
           "each column's max; with BLOCK_M ≠ BLOCK_N it is a shape error",
           passes={"forward", "backward_causal"},
           # a GPU's forward tiles are never square: the forward kernel does not compile, whatever the lengths
           on_gpu={"caught_by": {"forward", "forward_ragged", "forward_causal"}, "passes": {"backward_causal"}}),
    Mutant("forward_without_max",
           [("            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)\n"
             "            qk = qk * qk_scale - m_ij[:, None]\n",
             "            m_ij = tl.zeros_like(m_i)\n            qk = qk * qk_scale\n"),
            ("            m_ij = tl.maximum(m_i, tl.max(qk, 1))\n            qk = qk - m_ij[:, None]\n",
             "            m_ij = tl.zeros_like(m_i)\n")],
           {"forward", "forward_causal"}, "the online softmax without its running max (m stays 0, in both stages): "
           "exact for ordinary scores, 2^(s·log2 e) overflows (and underflows) for the large scores of forward and "
           "forward_causal",
           passes={"forward_ragged", "forward_dtypes", "backward_dkdv"}),
    Mutant("forward_assumes_contiguous_heads",
           [(FWD_HEAD, FWD_HEAD.replace("Q + off_z * stride_qz + off_h * stride_qh", "Q + off_hz * N_CTX * HEAD_DIM")
             .replace("off_z * stride_kz + off_h * stride_kh", "off_hz * N_CTX * HEAD_DIM")
             .replace("off_z * stride_vz + off_h * stride_vh", "off_hz * N_CTX * HEAD_DIM"))],
           {"forward", "autograd"}, "each head found at off_hz·N·d, as in a contiguous (B, H, N, d) tensor: right "
           "for contiguous inputs and for a strided view with one head, so only autograd's NaN guard saw it until "
           "forward's strided (2, 3, 96, 40) view (its message sends the learner to forward)",
           passes={"forward_ragged", "forward_causal", "backward_dkdv"}),
    Mutant("ragged_keys_not_masked",
           [("keep = cols[None, :] < N_CTX\n            if CAUSAL", "keep = cols[None, :] >= 0\n            if CAUSAL")],
           {"forward_ragged"}, "the masked stage forgets keys past N_CTX: they load as 0 and still add 2^(0 − m) to l_i",
           passes={"forward", "forward_causal", "backward_ragged"}),
    Mutant("ragged_keys_read_unmasked",
           [("        full_hi = (N_CTX // BLOCK_N) * BLOCK_N\n" + FWD_RANGES_END,
             "        full_hi = N_CTX\n" + FWD_RANGES_END)],
           {"forward_ragged"}, "every key block in the unmasked stage: the last one reads past the end of K and V",
           passes={"forward", "forward_causal"}),
    Mutant("forward_diagonal_starts_at_block_n",
           [(CAUSAL_RANGES + FWD_RANGES_END,
             CAUSAL_RANGES.replace("full_hi = start_m\n        masked_hi = tl.minimum(start_m + BLOCK_M, N_CTX)",
                                   "full_hi = pid_m * BLOCK_N\n        masked_hi = tl.minimum(full_hi + BLOCK_M, N_CTX)", 1)
             + FWD_RANGES_END)],
           {"forward_causal"}, "BLOCK_N where BLOCK_M belongs at the start of the forward's diagonal block, and its end "
                               "BLOCK_M after that start: right with square tiles only",
           passes={"forward", "forward_ragged", "backward_causal"}),
    Mutant("forward_diagonal_clipped_one_short",
           [("masked_hi = tl.minimum(start_m + BLOCK_M, N_CTX)\n    else:\n        full_hi = (N_CTX // BLOCK_N) * BLOCK_N\n"
             + FWD_RANGES_END,
             "masked_hi = tl.minimum(start_m + BLOCK_M, N_CTX - 1)\n    else:\n"
             "        full_hi = (N_CTX // BLOCK_N) * BLOCK_N\n" + FWD_RANGES_END)],
           {"forward_causal"}, "the diagonal block clipped to N_CTX − 1: wrong only when N mod BLOCK_N = 1",
           passes={"forward_ragged", "backward_causal"}),
    Mutant("hard_coded_fp16",
           [("acc = tl.dot(p.to(v.dtype), v, acc", "acc = tl.dot(p.to(tl.float16), v, acc")],
           {"compiles"}, "rounds P to fp16 whatever the input dtype (fp32 loses its precision; bf16 does not compile)",
           passes={"backward_dkdv"}),
    Mutant("p_not_converted",
           [("acc = tl.dot(p.to(v.dtype), v, acc", "acc = tl.dot(p, v, acc")],
           {"compiles"}, "multiplies fp32 P by fp16/bf16 V: the interpreter's fp32 checks pass, the GPU compiler refuses",
           passes={"backward_dq"}),
    # ── the backward ─────────────────────────────────────────────────────────────────────────────────
    Mutant("delta_missing",
           [("delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)",
             "delta = tl.zeros([BLOCK_M], dtype=tl.float32)")],
           {"backward_dkdv", "backward_dq"}, "the pre-pass writes delta = 0: dS = P ∘ dP instead of P ∘ (dP − delta)",
           passes={"forward", "autograd"},
           # dK and dQ are wrong, dV right: the message must point at the pre-pass, not at the kernels' TODOs
           not_blamed={7, 8, 9, 10, 11, 12}),
    Mutant("dsT_adds_delta",
           [("dsT = pT * (dpT - delta[None, :])", "dsT = pT * (dpT + delta[None, :])")],
           {"backward_dkdv"}, "dS = P ∘ (dP + delta) in the dK/dV kernel: a wrong use of a right delta",
           passes={"backward_dq", "forward"},
           # right when delta is 0 (o = 0) while dQ reads the same delta without trouble: TODO 7, not the pre-pass
           not_blamed={6, 8, 9}),
    Mutant("ds_precedence",
           [("ds = p * (dp - delta[:, None])", "ds = p * dp - delta[:, None]")],
           {"backward_dq"}, "ds = p·dp − delta without the parentheses: delta subtracted from every pair, seen or not",
           passes={"backward_dkdv", "forward"},
           not_blamed={6, 11, 12}),
    Mutant("both_scales_forgotten",
           [("    dk = dk * sm_scale\n", "    dk = dk\n"), ("    dq = dq * sm_scale\n", "    dq = dq\n")],
           {"backward_dkdv", "backward_dq"}, "neither dK nor dQ multiplied by sm_scale: dK and dQ wrong, dV right, as "
                                             "with a wrong delta; the o = 0 run must not blame the pre-pass",
           passes={"forward"},
           not_blamed={6}),
    Mutant("dk_dv_swapped",
           [("dk.to(DK.dtype.element_ty), offs_n", "dv.to(DK.dtype.element_ty), offs_n"),
            ("dv.to(DV.dtype.element_ty), offs_n", "dk.to(DV.dtype.element_ty), offs_n")],
           {"backward_dkdv"}, "stores dK into dV and dV into dK",
           passes={"backward_dq", "autograd"}),
    Mutant("lse_broadcast_down_the_keys",
           [("pT = tl.math.exp2(qkT * qk_scale - lse[None, :])", "pT = tl.math.exp2(qkT * qk_scale - lse[:, None])")],
           {"backward_dkdv"}, "the forward's lse[:, None] in the transposed dK/dV tile: one value per query must run "
                              "along its columns; right shape only with square tiles",
           passes={"forward", "forward_causal"}),
    Mutant("dkdv_p_without_lse_shift",
           [("pT = tl.math.exp2(qkT * qk_scale - lse[None, :])",
             "pT = tl.math.exp2(qkT * qk_scale) / tl.math.exp2(lse[None, :])")],
           {"backward_dkdv", "backward_causal"}, "pT = 2^s / 2^lse: the same numbers as 2^(s − lse) for ordinary "
           "scores, inf / inf = NaN for the large ones",
           passes={"backward_dq", "backward_ragged", "forward"}),
    Mutant("dq_p_without_lse_shift",
           [("p = tl.math.exp2(qk * qk_scale - lse[:, None])",
             "p = tl.math.exp2(qk * qk_scale) * tl.math.exp2(-lse[:, None])")],
           {"backward_dq", "backward_causal"}, "p = 2^s · 2^−lse: the same numbers as 2^(s − lse) for ordinary scores, "
           "inf · 0 = NaN for the large ones",
           passes={"backward_dkdv", "backward_ragged", "forward"}),
    Mutant("dkdv_assumes_contiguous_heads",
           [("    Q += off_z * stride_qz + off_h * stride_qh\n    DO += off_z * stride_doz + off_h * stride_doh\n",
             "    Q += off_hz * N_CTX * HEAD_DIM\n    DO += off_hz * N_CTX * HEAD_DIM\n")],
           {"backward_dkdv", "autograd"}, "the dK/dV kernel finds each head of q and dO at off_hz·N·d, as in "
           "contiguous tensors: the other backward checks pass contiguous inputs, so only autograd's NaN guard saw it "
           "until backward_dkdv's strided (2, 3, 96, 40) case",
           passes={"backward_dq", "backward_ragged", "backward_causal"}),
    Mutant("noncausal_dkdv_starts_at_diagonal",
           [("        full_lo = 0\n        tail_lo = m_full\n",
             "        full_lo = start_n\n        tail_lo = tl.maximum(full_lo, m_full)\n")],
           {"backward_dkdv"},
           "the widely copied bug: the dK/dV loop starts at the diagonal even without a causal mask",
           passes={"backward_causal", "backward_dq"}),
    Mutant("dq_not_scaled",
           [("    dq = dq * sm_scale\n", "    dq = dq\n")],
           {"backward_dq"}, "forgets the sm_scale of dQ = sm_scale·dS·K",
           passes={"backward_dkdv"}),
    Mutant("causal_mask_missing_in_backward",
           [("keep = keep & (rows[None, :] >= offs_n[:, None])", "keep = keep"),
            ("keep = keep & (offs_m[:, None] >= cols[None, :])  # [BLOCK_M, BLOCK_N]: key at or before query",
             "keep = keep")],
           {"backward_causal"}, "the diagonal blocks of the backward ignore the causal mask",
           passes={"backward_dkdv", "backward_ragged", "forward_causal"}),
    Mutant("dq_diagonal_ends_at_block_n",
           [(CAUSAL_RANGES + DQ_RANGES_END,
             CAUSAL_RANGES.replace("start_m + BLOCK_M", "start_m + BLOCK_N", 1) + DQ_RANGES_END)],
           {"backward_causal"}, "BLOCK_N where BLOCK_M belongs at the end of the diagonal block in the dQ loop: right "
                                "with square tiles only",
           passes={"backward_dq", "forward_causal"}),
    Mutant("dkdv_diagonal_rows_block_m",
           [("diag_hi = tl.minimum(start_n + BLOCK_N, N_CTX)", "diag_hi = tl.minimum(start_n + BLOCK_M, N_CTX)")],
           {"backward_causal"}, "the diagonal rows of a key block end after BLOCK_M rows instead of BLOCK_N",
           passes={"backward_dkdv", "backward_ragged"}),
    Mutant("dkdv_tail_overlaps_diagonal",
           [("tail_lo = tl.maximum(full_lo, m_full)", "tail_lo = m_full")],
           {"backward_causal"}, "causal stage 3 starts at m_full even when stage 1 already covered those rows: the "
                                "ragged last rows count twice when the last key block ends past m_full",
           passes={"backward_dkdv", "backward_ragged"}),
    Mutant("dkdv_diagonal_clipped_one_short",
           [("diag_hi = tl.minimum(start_n + BLOCK_N, N_CTX)", "diag_hi = tl.minimum(start_n + BLOCK_N, N_CTX - 1)")],
           {"backward_causal"}, "the diagonal rows clipped to N_CTX − 1: wrong only when N mod BLOCK_M = 1",
           passes={"backward_ragged", "forward_causal"}),
    Mutant("dq_ragged_keys_read_unmasked",
           [("        full_hi = (N_CTX // BLOCK_N) * BLOCK_N\n" + DQ_RANGES_END,
             "        full_hi = N_CTX\n" + DQ_RANGES_END)],
           {"backward_ragged"}, "every key block in dQ's unmasked stage: the last one reads past the end of K and V",
           passes={"backward_dq", "backward_causal", "forward_ragged"}),
    # ── the glue and the rest ────────────────────────────────────────────────────────────────────────
    Mutant("autograd_glue_unfinished",
           [("        q, k, v, o, lse = ctx.saved_tensors\n",
             "        raise NotImplementedError(\"TODO: replace this line with your code\")\n")],
           {"autograd", "deterministic", "anti_cheat"}, "TODO 14 left undone: the message must name it",
           passes={"forward", "backward_dkdv"}),
    Mutant("backward_returns_three_gradients",
           [("        return dq, dk, dv, None, None\n", "        return dq, dk, dv\n")],
           {"autograd", "deterministic", "anti_cheat"},
           "TODO 14 returns dq, dk, dv only: autograd wants one gradient per input of forward (5), and PyTorch's "
           "RuntimeError names no line of the submission; the message must name TODO 14",
           passes={"forward", "backward_dkdv"},
           not_blamed=set(range(1, 13))),  # the kernels, never; TODO 13 is named by the autograd check's own title
    Mutant("backward_forgets_causal",
           [("attention_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale)",
             "attention_backward(do, q, k, v, o, lse, False, ctx.sm_scale)")],
           {"autograd"}, "FlashAttention.backward always computes the gradients of attention without a mask",
           passes={"forward_causal", "backward_causal"}),
    Mutant("backward_default_scale",
           [("attention_backward(do, q, k, v, o, lse, ctx.causal, ctx.sm_scale)",
             "attention_backward(do, q, k, v, o, lse, ctx.causal, 1.0 / math.sqrt(q.shape[-1]))")],
           {"autograd"}, "FlashAttention.backward ignores the sm_scale that forward was given",
           passes={"forward", "backward_dkdv", "deterministic"}),
    Mutant("forward_keeps_default_scale",
           [("ctx.causal, ctx.sm_scale = causal, sm_scale", "ctx.causal, ctx.sm_scale = causal, 1.0 / math.sqrt(q.shape[-1])")],
           {"autograd"}, "FlashAttention.forward keeps the default scale instead of the sm_scale it was given (TODO 13; "
                         "TODO 14 is right)",
           passes={"forward", "backward_dkdv", "deterministic"},
           not_blamed=set(range(1, 13))),  # the glue, never the kernels
    Mutant("sdpa_does_the_work",
           [("    return FlashAttention.apply(q, k, v, bool(causal), sm_scale)",
             "    FlashAttention.apply(q, k, v, bool(causal), sm_scale)\n"
             "    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), scale=sm_scale)")],
           {"anti_cheat"}, "launches the kernels but returns PyTorch's scaled_dot_product_attention",
           passes={"forward", "backward_dq"}),
    Mutant("blocks_past_diagonal_not_skipped",
           [(CAUSAL_RANGES + FWD_RANGES_END,
             CAUSAL_RANGES.replace("tl.minimum(start_m + BLOCK_M, N_CTX)", "N_CTX", 1) + FWD_RANGES_END)],
           {"speed"}, "correct, but the causal forward visits every key block (masked): no faster than the full one",
           gpu_only=True, passes={"forward_causal"}),
]

# The memory check's (issue 24): reads whose values are thrown away, which no comparison can see.
MUTANTS += [
    Mutant("lse_rows_read_unmasked",
           [("lse = tl.load(LSE + off_hz.to(tl.int64) * N_CTX + offs_m, mask=offs_m < N_CTX, other=0.0)",
             "lse = tl.where(offs_m < N_CTX, tl.load(LSE + off_hz.to(tl.int64) * N_CTX + offs_m), 0.0)")],
           {"memory_safety"}, "the dq kernel loads the lse of a whole Q block, the rows past N included, and zeroes "
           "them with tl.where: right values, but a read outside the tensor, which a GPU may answer with an illegal memory access: only memory_safety sees it"),
]

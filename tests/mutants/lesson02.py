from . import Mutant

FULL_MATRIX = '''    *batch, M, d = q.shape
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).triu(1), -math.inf)
    m = s.amax(dim=-1, keepdim=True)
    p = torch.exp(s - m)
    l = p.sum(dim=-1, keepdim=True)
    return ((p / l) @ v.float()).to(q.dtype), (m + torch.log(l)).squeeze(-1)
'''

# The forward and the backward share lines (the dQ loop's bound is the forward's TODO 4): the context makes each
# replaced text occur in one solution cell only.
FORWARD_START = "    *batch, M, d = q.shape\n    N = k.shape[-2]\n    out = torch.empty("
FORWARD_STOP = "for the whole block)\n        stop_n = min(N, end_m) if causal else N"
BACKWARD_STOP = "at most N)\n        stop_n = min(N, end_m) if causal else N"
BACKWARD_BY_AUTOGRAD = """    scale = 1 / math.sqrt(d)
    with torch.enable_grad():
        leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
        o, _ = tiled_attention(*leaves, block_m, block_n, causal)
        grads = torch.autograd.grad(o, leaves, dout.float())
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v)))
"""
DELTA = "delta = (dout.float() * out.float()).sum(dim=-1)"
SCORES = "s = (q_blk @ k_blk.transpose(-1, -2)) * scale"
P_FROM_LSE = "        p = torch.exp(s - lse[..., start_m:end_m, None])"
DS = "        ds = p * (dp - delta[..., start_m:end_m, None])"
DK = "dk_acc += (ds.transpose(-1, -2) @ q_blk) * scale"
DQ = "dq_acc += (ds @ k_blk) * scale"
FIRST_M = "first_m = start_n if causal else 0"

MUTANTS = [
    Mutant("online_softmax_no_rescale",
           [("l = l * torch.exp(m - m_new) + torch.exp(", "l = l + torch.exp(")],
           {"online_softmax_blocks"},
           "the old running sum is not rescaled when the max grows"),
    Mutant("online_softmax_no_running_max",
           [("m_new = torch.maximum(m, blk.amax(dim=-1))", "m_new = torch.zeros_like(m)")],
           {"online_softmax_stable"}, "exp(x - 0): right for small values, overflows for huge ones"),
    Mutant("online_softmax_drops_last_partial_block",
           [("    for start in range(0, n, block):  # pass 1", "    for start in range(0, n - block + 1, block):  # pass 1")],
           {"online_softmax_ragged"}, "pass 1 never sees the last, partial block"),
    Mutant("online_softmax_calls_torch_softmax",
           [("    out = torch.empty_like(x)\n", "    return torch.softmax(x, dim=-1)\n")],
           {"online_softmax_blocks"}, "returns torch.softmax (forbidden)"),
    Mutant("tiled_softmax_without_max",
           [("            alpha = torch.exp(m_i - m_safe)\n            p = torch.exp(s - m_safe[..., None])\n",
             "            alpha = torch.ones_like(m_i)\n            p = torch.exp(s)\n"),
            ("torch.where(seen, m_i + torch.log(l_i), -math.inf)", "torch.where(seen, torch.log(l_i), -math.inf)")],
           {"attention_divisible"}, "TODO 7 sums exp(s) as it is, with no max subtracted (and lse = log l): right "
           "for scores of a few units, inf/NaN for attention_divisible's huge ones (±300)",
           passes={"attention_ragged", "attention_lse", "attention_causal", "attention_causal_ragged"}),
    Mutant("running_max_starts_at_zero",
           [("m_i = torch.full((*batch, rows), -math.inf, device=q.device)",
             "m_i = torch.full((*batch, rows), 0.0, device=q.device)")],
           {"attention_divisible"}, "TODO 3 starts the running max at 0, not -inf: still a valid shift while some "
           "score is above -88, but a row whose scores are all about -300 (huge_scores) has every exp underflow to 0",
           passes={"attention_ragged", "attention_lse", "attention_causal", "attention_causal_ragged"}),
    Mutant("acc_not_rescaled",
           [("acc = acc * alpha[..., None] + p @ v_blk\n", "acc = acc + p @ v_blk\n")],
           {"attention_divisible"}, "acc keeps terms measured against an old max"),
    Mutant("wrong_scale",
           [("s = (q_blk @ k_blk.transpose(-1, -2)) / math.sqrt(d)", "s = (q_blk @ k_blk.transpose(-1, -2)) / d")],
           {"attention_divisible"}, "scores scaled by 1/d instead of 1/sqrt(d)"),
    Mutant("masked_keys_zero",
           [("s = s.masked_fill(k_pos > q_pos, -math.inf)", "s = s.masked_fill(k_pos > q_pos, 0.0)")],
           {"attention_causal"}, "future keys get score 0 (weight exp(-m) > 0) instead of -inf"),
    Mutant("full_score_matrix",
           [(FORWARD_START, FULL_MATRIX + FORWARD_START.split("\n", 1)[1])],
           {"no_full_score_matrix"},
           "right answer from the whole M×N score matrix (and an M×N causal mask): only the memory check (and the "
           "skip check) can tell", passes={"attention_causal"}),
    Mutant("lse_base_2",
           [("m_i + torch.log(l_i)", "(m_i + torch.log(l_i)) / math.log(2)")],
           {"attention_lse"}, "log-sum-exp in base 2: the output is right, only lse is off"),
    Mutant("causal_without_skipping",
           [(FORWARD_STOP, FORWARD_STOP.replace("min(N, end_m) if causal else N", "N"))],
           {"causal_skips_blocks"}, "masks correctly but computes the fully masked tiles too",
           passes={"attention_causal"}),
    Mutant("causal_skip_by_block_index",
           [(FORWARD_STOP, FORWARD_STOP.replace("min(N, end_m)", "min(N, start_m + block_n)"))],
           {"attention_causal"}, "stops at the Q block's first key + block_n: wrong when block_m != block_n"),
    Mutant("last_partial_kv_block_dropped",
           [(FORWARD_STOP + "\n        for start_n in range(0, stop_n, block_n):",
             FORWARD_STOP + "\n        for start_n in range(0, stop_n - block_n + 1, block_n):")],
           {"attention_ragged"}, "the K/V loop misses the last, partial block", passes={"attention_divisible"}),
    Mutant("last_partial_q_block_dropped",
           [("for start_m in range(0, M, block_m):\n        end_m = min(start_m + block_m, M)\n        q_blk = q[..., start_m:end_m, :].float()\n        rows",
             "for start_m in range(0, M - block_m + 1, block_m):\n        end_m = min(start_m + block_m, M)\n        q_blk = q[..., start_m:end_m, :].float()\n        rows")],
           {"attention_ragged"}, "the last query rows are never written (poisoned output shows NaN)"),

    Mutant("causal_bound_off_by_one",
           [(FORWARD_STOP, FORWARD_STOP.replace("min(N, end_m)", "min(N, end_m - 1)"))],
           {"attention_causal"}, "stops one key early: the block's last query misses its own key whenever end_m - 1 "
           "starts a K/V block (with 4×3 blocks: M = N = 12)", passes={"attention_divisible"}),
    Mutant("causal_bound_ragged_off_by_one",
           [(FORWARD_STOP, FORWARD_STOP.replace("min(N, end_m)", "min(N - 1, end_m)"))],
           {"attention_causal_ragged"}, "N - 1 as the bound: the last key is lost when N - 1 starts a K/V block, i.e. "
           "only for N ≡ 1 modulo block_n with M >= N", passes={"attention_causal"}),
    # ── tiled_attention_backward ──
    Mutant("backward_delta_missing",
           [(DS, "        ds = p * dp")],
           {"backward_dk", "backward_dq"}, "dS = P∘dP without delta: dv is still right", passes={"backward_dv"}),
    Mutant("backward_delta_from_tile",
           [(DS, "        ds = p * (dp - (p * dp).sum(dim=-1, keepdim=True))")],
           {"backward_dk", "backward_dq"}, "delta = rowsum(P∘dP) over this tile's keys only, not the whole row",
           passes={"backward_dv"}),
    Mutant("backward_ds_sign",
           [(DS, "        ds = p * (delta[..., start_m:end_m, None] - dp)")],
           {"backward_dk", "backward_dq"}, "dS with the wrong sign: dk and dq are -1 times the right ones, which "
           "the message calls a sign (TODO 12), not delta", passes={"backward_dv"}, not_blamed={9}),
    Mutant("backward_scale_forgotten",
           [(DK, "dk_acc += ds.transpose(-1, -2) @ q_blk"), (DQ, "dq_acc += ds @ k_blk")],
           {"backward_dk", "backward_dq"}, "no scale in dk and dq (TODOs 14 and 16): dv is right and dk, dq are "
           "√d times the right ones, which the message calls the scale, not ds or delta", passes={"backward_dv"},
           not_blamed={9}),
    Mutant("backward_scale_in_ds",
           [(DS, DS + " * scale")],
           {"backward_dk", "backward_dq"}, "the scale in ds too (TODO 12): dk and dq carry it twice, 1/√d times the "
           "right ones: the message says where the scale belongs, not delta", passes={"backward_dv"},
           not_blamed={9}),
    Mutant("backward_p_base_2",
           [(P_FROM_LSE, "        p = torch.exp2(s - lse[..., start_m:end_m, None])")],
           {"backward_dv"}, "P recomputed in base 2 from a natural-log lse (lesson 05's base, this lesson's lse)"),
    Mutant("backward_p_exp_over_exp",
           [(P_FROM_LSE, "        p = torch.exp(s) / torch.exp(lse[..., start_m:end_m, None])")],
           {"backward_dv"}, "P = exp(s) / exp(lse): the same number for scores of a few units, inf/inf or 0/0 = NaN "
           "for backward_dv's huge ones (±300); the point of the saved lse is exp(s - lse), which never overflows",
           passes={"backward_dk", "backward_dq", "backward_ragged", "backward_causal"}),
    Mutant("backward_p_without_lse",
           [(P_FROM_LSE, "        p = torch.exp(s - s.amax(dim=-1, keepdim=True))\n        p = p / p.sum(dim=-1, keepdim=True)")],
           {"backward_dv"}, "P as the softmax of the tile alone: right only when one K/V block holds every key"),
    Mutant("backward_causal_mask_off_by_one",
           [("            p = p.masked_fill(k_pos > q_pos, 0.0)", "            p = p.masked_fill(k_pos >= q_pos, 0.0)")],
           {"backward_causal"}, "hides the diagonal too (key i from query i)", passes={"backward_dv"}),
    Mutant("backward_dkdv_loop_not_skipping",
           [(FIRST_M, "first_m = 0")],
           {"backward_causal_skips"}, "the dK/dV loop visits every Q block (masking gives the right numbers): "
           "the shapes of its products name the dK/dV loop, not the dQ loop's bound", passes={"backward_causal"},
           not_blamed={15}),
    Mutant("backward_dq_loop_not_skipping",
           [(BACKWARD_STOP, BACKWARD_STOP.replace("min(N, end_m) if causal else N", "N"))],
           {"backward_causal_skips"}, "the dQ loop visits every K/V block (masking gives the right numbers): "
           "the shapes of its products name the dQ loop, not the dK/dV loop's start", passes={"backward_causal"},
           not_blamed={13}),
    Mutant("backward_dkdv_bound_block_index",
           [(FIRST_M, "first_m = start_n // block_n * block_m if causal else 0")],
           {"backward_causal"}, "the K/V block's index times block_m: past row start_n when block_m > block_n",
           passes={"backward_dv"}),
    Mutant("backward_dq_bound_ragged_off_by_one",
           [(BACKWARD_STOP, BACKWARD_STOP.replace("min(N, end_m)", "min(N - 1, end_m)"))],
           {"backward_causal_ragged"}, "N - 1 as the dQ loop's bound: wrong only for N ≡ 1 modulo block_n, M >= N",
           passes={"backward_causal"}),
    Mutant("backward_dq_from_dkdv_bound",
           [("for start_n in range(0, stop_n, block_n):\n            end_n = min(start_n + block_n, N)\n"
             "            k_blk = k[..., start_n:end_n, :].float()\n            v_blk = v[..., start_n:end_n, :].float()\n"
             "            p, ds = recompute(",
             "for start_n in range(start_m if causal else 0, stop_n, block_n):\n            end_n = min(start_n + block_n, N)\n"
             "            k_blk = k[..., start_n:end_n, :].float()\n            v_blk = v[..., start_n:end_n, :].float()\n"
             "            p, ds = recompute(")],
           {"backward_causal"}, "the dQ loop starts at key start_m (the dK/dV loop's bound turned around): dq misses "
           "the keys before its block", passes={"backward_dq"}),
    Mutant("backward_dq_last_tile_only",
           [("dq_acc += (ds @ k_blk) * scale", "dq_acc = (ds @ k_blk) * scale")],
           {"backward_dq"}, "dq from the last K/V tile only (= instead of +=)", passes={"backward_dk", "backward_dv"},
           not_blamed={9, 12, 14}),
    Mutant("backward_dk_unscaled",
           [("dk_acc += (ds.transpose(-1, -2) @ q_blk) * scale", "dk_acc += ds.transpose(-1, -2) @ q_blk")],
           {"backward_dk"}, "dK without the softmax scale", passes={"backward_dq", "backward_dv"},
           not_blamed={9, 12, 16}),
    Mutant("backward_last_partial_kv_block_dropped",
           [("for start_n in range(0, N, block_n):", "for start_n in range(0, N - block_n + 1, block_n):")],
           {"backward_ragged"}, "the dK/dV loop never visits the last, partial K/V block (its dk, dv stay NaN)",
           passes={"backward_dv"}),
    Mutant("backward_full_score_matrix",
           [(DELTA, DELTA + "\n    s_full = (q.float() @ k.float().transpose(-1, -2)) * scale"),
            (SCORES, "s = s_full[..., start_m:end_m, start_n:end_n]")],
           {"backward_no_full_matrix"}, "right gradients from an M×N score matrix sliced tile by tile",
           passes={"backward_causal"}),
    Mutant("backward_by_autograd",
           [("    scale = 1 / math.sqrt(d)\n", BACKWARD_BY_AUTOGRAD)],
           {"backward_dv", "backward_dk", "backward_dq"},
           "autograd through the learner's tiled forward: right, no M×N tensor, skips tiles; only the autograd rule "
           "catches it"),
    Mutant("rows_without_keys_nan",
           [("torch.where(seen[..., None], acc / l_i[..., None], 0.0)", "(acc / l_i[..., None])")],
           {"attention_ragged"}, "a row that sees no key (N = 0) gets 0/0 = NaN instead of 0 (TODO 8)",
           passes={"attention_divisible", "attention_lse"}),
    Mutant("rows_without_keys_lse_zero",
           [("torch.where(seen, m_i + torch.log(l_i), -math.inf)", "torch.where(seen, m_i + torch.log(l_i), 0.0)")],
           {"attention_lse"}, "a row that sees no key (N = 0) gets lse 0, the log of 1, instead of -inf, the log of "
           "an empty sum (TODO 8)", passes={"attention_divisible", "attention_ragged"}),
]

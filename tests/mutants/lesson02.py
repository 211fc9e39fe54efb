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

MUTANTS = [
    Mutant("online_softmax_no_rescale",
           [("l = l * torch.exp(m - m_new) + ", "l = l + ")],
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
    Mutant("acc_not_rescaled",
           [("acc = acc * alpha[..., None] + p @ v_blk", "acc = acc + p @ v_blk")],
           {"attention_divisible"}, "acc keeps terms measured against an old max"),
    Mutant("wrong_scale",
           [("/ math.sqrt(d)", "/ d")],
           {"attention_divisible"}, "scores scaled by 1/d instead of 1/sqrt(d)"),
    Mutant("masked_keys_zero",
           [("s = s.masked_fill(k_pos > q_pos, -math.inf)", "s = s.masked_fill(k_pos > q_pos, 0.0)")],
           {"attention_causal"}, "future keys get score 0 (weight exp(-m) > 0) instead of -inf"),
    Mutant("full_score_matrix",
           [("    *batch, M, d = q.shape\n", FULL_MATRIX)],
           {"no_full_score_matrix"},
           "right answer from the whole M×N score matrix (and an M×N causal mask): only the memory check (and the "
           "skip check) can tell", passes={"attention_causal"}),
    Mutant("lse_base_2",
           [("m_i + torch.log(l_i)", "(m_i + torch.log(l_i)) / math.log(2)")],
           {"attention_lse"}, "log-sum-exp in base 2: the output is right, only lse is off"),
    Mutant("causal_without_skipping",
           [("stop_n = min(N, end_m) if causal else N", "stop_n = N")],
           {"causal_skips_blocks"}, "masks correctly but computes the fully masked tiles too",
           passes={"attention_causal"}),
    Mutant("causal_skip_by_block_index",
           [("stop_n = min(N, end_m) if causal else N", "stop_n = min(N, start_m + block_n) if causal else N")],
           {"attention_causal"}, "stops at the Q block's first key + block_n: wrong when block_m != block_n"),
    Mutant("last_partial_kv_block_dropped",
           [("for start_n in range(0, stop_n, block_n):", "for start_n in range(0, stop_n - block_n + 1, block_n):")],
           {"attention_ragged"}, "the K/V loop misses the last, partial block", passes={"attention_divisible"}),
    Mutant("last_partial_q_block_dropped",
           [("for start_m in range(0, M, block_m):", "for start_m in range(0, M - block_m + 1, block_m):")],
           {"attention_ragged"}, "the last query rows are never written (poisoned output shows NaN)"),
]

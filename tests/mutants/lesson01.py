from . import SEGFAULT, Mutant

SOFTMAX_CHECKS = {"softmax_rows", "softmax_stable", "softmax_any_dim", "softmax_masked"}
# One mistake, one check (COURSE_SPEC §5): a mistake of one concept keeps the points of the other checks. `passes`
# names the checks that such a mistake used to cost too, or that share its inputs. Every check was run once on every
# mutant (but the hangs) to confirm the rest; running them all here would cost CI minutes for little more evidence.

SCORES = ("    if sm_scale is None:\n        sm_scale = 1.0 / math.sqrt(d)\n"
          "    scores = (q @ k.transpose(-2, -1)) * sm_scale\n")
SOFTMAX_BODY = ("    e = torch.exp(x - m)\n    s = e.sum(dim=dim, keepdim=True)\n    out = e / s.clamp_min(1.0)\n")
ATTENTION_START = "    M, N, d = q.shape[-2], k.shape[-2], q.shape[-1]\n"

MUTANTS = [
    # ── cheats: the library call the lesson teaches ──────────────────────────────────────────────
    Mutant("torch_softmax_in_stable_softmax",
           [(SOFTMAX_BODY, "    out = torch.softmax(x, dim=dim)\n")],
           {"softmax_rows"}, "stable_softmax returns torch.softmax"),
    Mutant("sdpa_in_naive_attention",
           [("    out = p @ v\n", "    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)\n")],
           {"attention_shapes"}, "naive_attention returns scaled_dot_product_attention",
           passes={"softmax_rows"}),
    # ── stable_softmax mistakes ──────────────────────────────────────────────────────────────────
    Mutant("no_max_subtraction",
           [(SOFTMAX_BODY, "    e = torch.exp(x)\n    out = e / e.sum(dim=dim, keepdim=True)\n")],
           {"softmax_stable", "softmax_masked", "attention_scale"}, "the softmax as written, exp(x) / sum: exp "
           "overflows for huge inputs, and a fully -inf slice gives 0/0 (the clamp of TODO 3 needs the max "
           "subtraction); fine for ordinary values. attention_scale's huge scores (sm_scale = 1 on inputs of scale 4) "
           "overflow it too: that message sends the learner to stable_softmax, naming no TODO of naive_attention",
           passes={"softmax_rows", "softmax_any_dim", "attention_shapes", "attention_causal_rect"},
           not_blamed={4, 5, 6, 7}),
    Mutant("fully_masked_slice_gives_nan",
           [('    m = m.masked_fill(m == float("-inf"), 0.0)\n', "")],
           {"softmax_masked"}, "no guard for a slice that is all -inf: -inf - (-inf) = NaN",
           passes={"softmax_rows", "attention_causal", "attention_causal_rect"}, not_blamed={1, 4, 5, 6, 7}),
    Mutant("no_clamp_of_the_sum",
           [("    out = e / s.clamp_min(1.0)\n", "    out = e / s\n")],
           {"softmax_masked"}, "TODO 2 is right but TODO 3 divides by the plain sum: an all -inf slice gives 0/0 = NaN; "
           "the message names both steps (guard and clamp), never TODO 1",
           passes={"softmax_rows", "softmax_stable", "softmax_any_dim", "attention_causal", "attention_causal_rect"},
           not_blamed={1, 4, 5, 6, 7}),
    Mutant("exp_without_the_shift",
           [("    e = torch.exp(x - m)\n", "    e = torch.exp(x)\n")],
           {"softmax_stable", "attention_causal", "attention_scale"},
           "TODO 1 computes the max but TODO 3 exponentiates x, not x - m: "
           "exp overflows for huge inputs (the message names TODO 1 and TODO 3, which hold the max and the shift, never "
           "TODO 2), and a slice whose exponentials sum below 1 stays unnormalised by the clamp (row 0 of a causal mask: "
           "the attention message sends the learner to stable_softmax, naming no TODO of naive_attention; so do "
           "attention_scale's huge scores)", not_blamed={2, 4, 5, 6, 7}),
    Mutant("max_without_keepdim",
           [("m = x.amax(dim=dim, keepdim=True)", "m = x.amax(dim=dim)")],
           {"softmax_rows", "softmax_any_dim", "softmax_masked", "attention_causal"}, "TODO 1 drops the reduced dim: "
           "`x - m` raises a size mismatch on TODO 3's line; the message says a reduction lost its dim (TODO 1 or "
           "TODO 3, the line shows which), the attention checks send the learner to stable_softmax",
           not_blamed={2, 4, 5, 6, 7}),
    Mutant("softmax_returns_float32",
           [("    out = e / s.clamp_min(1.0)\n", "    out = (e / s.clamp_min(1.0)).float()\n")],
           {"softmax_rows", "attention_shapes"}, "TODO 3 returns float32 for a float16 input: `p @ v` then raises on "
           "TODO 7's line (float32 @ float16); the attention message sends the learner to stable_softmax (its dtype)",
           passes={"softmax_stable", "softmax_any_dim", "softmax_masked", "attention_scale", "attention_causal"},
           not_blamed={1, 2, 4, 5, 6, 7}),
    Mutant("softmax_along_dim_1_always",
           [("m = x.amax(dim=dim, keepdim=True)", "m = x.amax(dim=1, keepdim=True)"),
            ("s = e.sum(dim=dim, keepdim=True)", "s = e.sum(dim=1, keepdim=True)")],
           {"softmax_any_dim", "attention_shapes"}, "stable_softmax normalises dim 1 (the rows of a 2-D input) "
           "whatever `dim` says: right for 2-D rows, wrong for the (..., M, N) scores, where along a 3-D tensor it is "
           "the softmax over the queries; the attention message must send the learner to stable_softmax, not to "
           "TODO 6 (the softmax over the queries) or any other TODO of naive_attention",
           passes={"softmax_rows", "softmax_stable"}, not_blamed={4, 5, 6, 7}),
    Mutant("softmax_ignores_dim",
           [("m = x.amax(dim=dim, keepdim=True)", "m = x.amax(dim=-1, keepdim=True)"),
            ("s = e.sum(dim=dim, keepdim=True)", "s = e.sum(dim=-1, keepdim=True)")],
           {"softmax_any_dim"}, "always normalises the last dim",
           passes={"softmax_rows", "softmax_stable", "softmax_masked"}),
    # ── naive_attention mistakes ─────────────────────────────────────────────────────────────────
    Mutant("scale_one_over_d",
           [("sm_scale = 1.0 / math.sqrt(d)", "sm_scale = 1.0 / d")],
           {"attention_shapes"}, "default scale 1/d instead of 1/sqrt(d); a given sm_scale still works",
           passes={"attention_scale", "attention_causal", "attention_causal_rect", "attention_views"},
           not_blamed={1, 2, 3, 5, 6, 7}),
    Mutant("scale_one_over_sqrt_n",
           [("sm_scale = 1.0 / math.sqrt(d)", "sm_scale = 1.0 / math.sqrt(N)")],
           {"attention_shapes"}, "default scale 1/sqrt(N), the number of keys, instead of 1/sqrt(d), the head dim",
           passes={"attention_scale", "attention_causal", "attention_causal_rect", "attention_views"},
           not_blamed={1, 2, 3, 5, 6, 7}),
    Mutant("given_sm_scale_ignored",
           [(SCORES, "    sm_scale = 1.0 / math.sqrt(d)\n    scores = (q @ k.transpose(-2, -1)) * sm_scale\n")],
           {"attention_scale"}, "always scales by 1/sqrt(d), whatever sm_scale the caller gives",
           passes={"attention_shapes", "attention_causal", "attention_causal_rect", "attention_views"}),
    Mutant("attention_softmax_without_max",
           [("    p = stable_softmax(scores, dim=-1)\n",
             "    p = torch.exp(scores)\n    p = p / p.sum(dim=-1, keepdim=True)\n")],
           {"attention_scale"}, "TODO 6 writes its own softmax, exp(scores) / sum, instead of calling stable_softmax: "
           "right for ordinary scores, inf/NaN for the huge ones of attention_scale (±100 and more), whose message "
           "names TODO 6", passes={"softmax_stable", "attention_shapes", "attention_causal", "attention_causal_rect",
                                   "attention_views"}, not_blamed={1, 2, 3, 4, 5, 7}),
    Mutant("lengths_from_dim_1",
           [(ATTENTION_START, "    M, N, d = q.shape[1], k.shape[1], q.shape[-1]\n")],
           {"attention_causal", "attention_causal_rect"}, "M and N read from dim 1, as for a 3-D (B, N, d) input: "
           "right there, but dim 1 of a (B, H, M, d) input is the heads (3, not M) and of a 2-D one d: the causal "
           "mask has the wrong size (only causal uses M and N)",
           passes={"attention_shapes", "attention_scale", "attention_views"}),
    Mutant("softmax_over_queries",
           [("p = stable_softmax(scores, dim=-1)", "p = stable_softmax(scores, dim=-2)")],
           {"attention_shapes"}, "softmax over dim -2 (the queries) instead of the keys",
           passes={"softmax_rows"}, not_blamed={1, 2, 3, 4, 5, 7}),
    Mutant("causal_hides_diagonal",
           [("triu(diagonal=1)", "triu(diagonal=0)")],
           {"attention_causal", "attention_causal_rect"}, "off by one: query i cannot see key i (row 0 sees nothing)",
           passes={"attention_shapes", "attention_views"}, not_blamed={1, 2, 3, 4, 6, 7}),
    Mutant("causal_mask_after_softmax",
           [('.triu(diagonal=1)\n        scores = scores.masked_fill(hidden, float("-inf"))\n', ".triu(diagonal=1)\n"),
            ("    p = stable_softmax(scores, dim=-1)\n",
             "    p = stable_softmax(scores, dim=-1)\n    if causal:\n        p = p.masked_fill(hidden, 0.0)\n")],
           {"attention_causal", "attention_causal_rect"}, "zeroes the future after the softmax: rows no longer sum to 1",
           passes={"attention_shapes", "attention_views"}, not_blamed={1, 2, 3, 4, 6, 7}),
    Mutant("causal_bottom_right",
           [("triu(diagonal=1)", "triu(diagonal=1 + N - M)")],
           {"attention_causal_rect"}, "bottom-right alignment (flash-attn's) instead of top-left (torch's is_causal)",
           passes={"attention_causal"}, not_blamed={1, 2, 3, 4, 6, 7}),
    Mutant("causal_mask_n_by_n",
           [("torch.ones(M, N, dtype=torch.bool", "torch.ones(N, N, dtype=torch.bool")],
           {"attention_causal_rect"}, "the mask is (N, N), as if there were as many queries as keys: fine while M == N",
           passes={"attention_causal"}),
    Mutant("q_scaled_in_place",
           [(SCORES, "    if sm_scale is None:\n        sm_scale = 1.0 / math.sqrt(d)\n    q *= sm_scale\n"
                     "    scores = q @ k.transpose(-2, -1)\n")],
           {"attention_views"}, "q *= sm_scale changes the caller's tensor (every call checks its inputs, so every "
           "attention check fails)", passes={"softmax_rows"}),
    Mutant("causal_mask_on_cpu",
           [("dtype=torch.bool, device=q.device)", "dtype=torch.bool)")],
           {"attention_causal", "attention_causal_rect"}, "the mask is built on the CPU: fails only when q is on a GPU",
           gpu_only=True, passes={"attention_shapes", "attention_views"}),
    # ── isolation: a crash, a hang or a monkey-patch costs only naive_attention's points ────────
    Mutant("crash_in_naive_attention",
           [(ATTENTION_START, "    " + SEGFAULT + "\n" + ATTENTION_START)],
           {"attention_shapes"}, "the worker process dies inside naive_attention", passes=SOFTMAX_CHECKS),
    Mutant("naive_attention_hangs",
           [(ATTENTION_START, "    while True:\n        pass\n" + ATTENTION_START)],
           {"attention_shapes"}, "an endless loop inside naive_attention (killed at the time limit, 15 s here)",
           passes=SOFTMAX_CHECKS, timeout=15),
    Mutant("patched_comparisons",
           [("def naive_attention(", "torch.allclose = lambda *a, **k: True\n"
                                     "torch.testing.assert_close = lambda *a, **k: None\n\n\ndef naive_attention("),
            ("    out = p @ v\n", "    out = (p @ v) * 1.1\n")],
           {"attention_shapes"}, "patches torch's comparisons at the top of the cell and returns a wrong result (the "
           "static guard refuses the whole submission: every check fails)"),
]

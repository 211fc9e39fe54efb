"""Mutants of the reference solutions that no check can kill, because they compute the same thing on every input
the lesson allows (tests/mutation.py lists them in its report and leaves them out of the score).

Only a mutant that really is equivalent belongs here, with the reason in one or two sentences. A survivor that a
learner's input could expose is not equivalent: it needs a new or sharper check in grader/lessons/ instead.

Each entry: the mutant's id as tests/mutation.py prints it (`lesson:cell:line:column:old→new`), the reference
line it changes (so that the entry still matches after lines above it move; an entry whose line changed is
reported as stale), and why it is equivalent.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Equivalent:
    id: str
    line: str
    why: str


EQUIVALENTS = [
    Equivalent("05_flash_attention_v2:_attn_fwd_inner:21:24:keep&(offs_m[:,None]>=cols[None,:])→offs_m[:,None]>=cols[None,:]",
               "keep = keep & (offs_m[:, None] >= cols[None, :])",
               "In the causal case the key mask is implied: a query row i < N sees keys j <= i < N only, and rows past N "
               "are never stored, so dropping `cols < N_CTX` changes no stored value."),
    Equivalent("05_flash_attention_v2:_attn_bwd_dkdv:39:30:full_lo→diag_hi",
               "tail_lo = tl.maximum(full_lo, m_full)",
               "diag_hi = min(start_n + BLOCK_N, N) differs from full_lo = start_n + BLOCK_N only in the last key block, "
               "where both bounds are >= N (m_full <= N): the tail loop range(tail_lo, N) is empty either way."),
    Equivalent("05_flash_attention_v2:_attn_fwd:34:24:minimum→maximum",
               "masked_hi = tl.minimum(start_m + BLOCK_M, N_CTX)",
               "The extra key blocks up to max(start_m + BLOCK_M, N) lie past the diagonal or past N, where every score "
               "is masked to -inf and every load masked: p = 0 there, so no value changes (only time; the GPU speed "
               "check sees the forward's, as the mutant blocks_past_diagonal_not_skipped)."),
    Equivalent("05_flash_attention_v2:_attn_bwd_dq:35:24:minimum→maximum",
               "masked_hi = tl.minimum(start_m + BLOCK_M, N_CTX)",
               "As in the forward: the extra key blocks are fully masked, p = 0, ds = 0; dq gets nothing from them."),
    Equivalent("05_flash_attention_v2:_attn_fwd:36:29:BLOCK_N→BLOCK_M",
               "full_hi = (N_CTX // BLOCK_N) * BLOCK_N",
               "The kernel asserts BLOCK_M % BLOCK_N == 0, so (N // BLOCK_M)·BLOCK_N <= (N // BLOCK_N)·BLOCK_N: whole key "
               "blocks move from the unmasked stage to the masked one, which computes them exactly the same."),
    Equivalent("05_flash_attention_v2:_attn_bwd_dq:37:29:BLOCK_N→BLOCK_M",
               "full_hi = (N_CTX // BLOCK_N) * BLOCK_N",
               "As in the forward: BLOCK_M % BLOCK_N == 0, so only whole key blocks move to the masked stage."),
]

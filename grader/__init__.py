"""FlashAttention in Triton: the grader (mode detection, isolation, checks, build)."""

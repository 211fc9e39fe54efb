"""FlashAttention in Triton: the grader (mode detection, isolation, checks, build)."""

from . import bytecode as _bytecode

_bytecode.use()  # where the environment has no Python bytecode, keep the judge's own (grader/bytecode.py)

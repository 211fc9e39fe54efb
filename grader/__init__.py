"""FlashAttention in Triton: the grader (mode detection, isolation, checks, build)."""

from . import bytecode as _bytecode

_bytecode.use()  # where the environment has no Python bytecode, keep the judge's own (grader/bytecode.py)


def _skip_iri_grammar():
    """nbformat imports jsonschema, which, where rfc3987-syntax is installed (jupyter_events brings it with
    nbgrader), builds that package's IRI grammar at import: 1.3 s of every judge's 3.3 s start on the H200. Nothing
    the grader or nbgrader does validates an IRI (jsonschema skips a format whose checker is missing), so a process
    that imports the grader before jsonschema goes without it."""
    import sys
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)  # `import rfc3987_syntax` raises ImportError: skipped


_skip_iri_grammar()

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
]

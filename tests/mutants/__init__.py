"""Wrong submissions: the reference-filled notebook with one realistic mistake or cheat edited in.

Each lesson has a module `lessonNN.py` with `MUTANTS = [Mutant(...), ...]`. A mutant is a list of
(old, new) text replacements applied to the filled notebook's code cells (each `old` must occur), and
`caught_by`: the checks that must fail for it. tests/test_lessons.py runs exactly those checks.
"""
import importlib
from dataclasses import dataclass, field

from grader import notebook
from grader.__main__ import reference_notebook


# A hard crash that needs nothing the judge's static guard refuses (os._exit would be refused before it ran):
# a read a terabyte past a numpy array kills the process with SIGSEGV, as a wild pointer in a kernel would.
SEGFAULT = "import numpy as np; np.lib.stride_tricks.as_strided(np.zeros(1), (2,), (1 << 40,)).sum()"


@dataclass
class Mutant:
    name: str
    replace: list
    caught_by: set
    why: str = ""
    gpu_only: bool = False  # needs a real GPU to show (e.g. an illegal memory access)
    passes: set = field(default_factory=set)  # checks that must still pass (isolation)
    timeout: float = None  # a shorter time limit per check (for mutants that hang)
    # where a GPU sees the mistake differently (a kernel the interpreter runs but the compiler rejects fails every
    # check that launches it there): {"caught_by": …, "passes": …} in gpu mode
    on_gpu: dict = None
    # TODOs the messages must not blame (issue 23): a mistake in TODO 5 that makes the output NaN must not be
    # reported as "TODO 2 should stop the loop at `hi`"; each entry is a TODO number
    not_blamed: set = field(default_factory=set)

    def expected(self, mode):
        """(caught_by, passes) in `mode`."""
        if mode == "gpu" and self.on_gpu:
            return set(self.on_gpu.get("caught_by", self.caught_by)), set(self.on_gpu.get("passes", self.passes))
        return set(self.caught_by), set(self.passes)


def load(lesson_id):
    """The lesson's mutants; [] when it has none yet (tests/test_lessons.py then fails for that lesson)."""
    try:
        module = importlib.import_module(f"tests.mutants.lesson{lesson_id[:2]}")
    except ModuleNotFoundError:
        return []
    return module.MUTANTS


def write(lesson_id, mutant, path):
    nb = reference_notebook(lesson_id)
    for old, new in mutant.replace:
        cells = [c for c in nb.cells if notebook.is_solution(c) and old in c.source]  # the student's cells
        assert len(cells) == 1, f"mutant {mutant.name}: {old!r} must occur in exactly one solution cell, found {len(cells)}"
        cells[0].source = cells[0].source.replace(old, new)
    notebook.write(nb, path)
    return path

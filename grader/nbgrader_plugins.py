"""nbgrader plug-ins of the course (named in nbgrader_config.py)."""
import re

from nbgrader.preprocessors import Execute, NbGraderPreprocessor, OverwriteCells

from . import notebook


class GradingKernelFailed(RuntimeError):
    """A hidden test cell raised something other than a check's verdict: the grading itself is broken (the grader is
    not importable by the grading kernel, say). nbgrader then reports an error for this submission and exits non-zero
    instead of recording a zero that looks like the student's."""


class ExecuteGradedCellsOnly(Execute):
    """Autograde runs only the graded (test) cells, never the student's own cells.

    Each graded cell grades the submission file in a separate worker process (grader.hidden), so the
    student's code has no need to run in the grading kernel, and must not: code run there could patch the
    grader or torch in that kernel, or crash it, before the graded cells run. Skipping it also skips
    the benchmarks and plots a submission may contain.
    """

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and not notebook.is_test(cell):
            cell.outputs, cell.execution_count = [], None
            return cell, resources
        cell, resources = super().preprocess_cell(cell, resources, index)
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and output.get("ename") != "CheckFailed":
                raise GradingKernelFailed(
                    f"the hidden test `{notebook.grade_id(cell)}` raised {output.get('ename')}: {output.get('evalue')}"
                    + (" — the grading kernel cannot import the course's grader: run `make setup` (it installs the "
                       "grader into .venv) and grade with that environment (README, 'Instructors')"
                       if "grader" in str(output.get("evalue")) and output.get("ename") in ("ModuleNotFoundError",
                                                                                          "ImportError") else ""))
        return cell, resources


class DropSolutionNotes(NbGraderPreprocessor):
    """generate_assignment: the markdown cells tagged `solution-notes` explain the reference solution; they belong to
    solutions/ only, never to a student's release."""

    def preprocess(self, nb, resources):
        nb.cells = [cell for cell in nb.cells if "solution-notes" not in notebook.tags(cell)]
        return nb, resources


HIDDEN_TESTS = re.compile(r"(?ms)^[ \t]*### BEGIN HIDDEN TESTS\n.*?^[ \t]*### END HIDDEN TESTS\n?")


class OverwriteCellsQuietly(OverwriteCells):
    """nbgrader's OverwriteCells warns "Attribute 'checksum' for cell test_… has changed!" for every test cell whose
    hidden tests the release removed (nbgrader issue #1961): a false alarm on every submission that reads like
    tampering. A test cell that is exactly its released form gets its source back from the gradebook first, so only a
    test cell the student really edited is reported (and restored, as nbgrader always does)."""

    def preprocess_cell(self, cell, resources, cell_index):
        grade_id = notebook.grade_id(cell)
        if grade_id and notebook.is_test(cell):
            try:
                source = self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id).source
            except Exception:
                source = None
            if source is not None and cell.source.strip() == HIDDEN_TESTS.sub("", source).strip():
                cell.source = source
        return super().preprocess_cell(cell, resources, cell_index)


def autograde_preprocessors():
    """nbgrader's own autograde pipeline with Execute replaced by ExecuteGradedCellsOnly."""
    return _replaced("autograde_preprocessors", {Execute: ExecuteGradedCellsOnly})


def sanitize_preprocessors():
    """nbgrader's own sanitize pipeline (run before autograde) with OverwriteCells replaced by OverwriteCellsQuietly."""
    return _replaced("sanitize_preprocessors", {OverwriteCells: OverwriteCellsQuietly})


def generate_assignment_preprocessors():
    """nbgrader's own generate_assignment pipeline with DropSolutionNotes first."""
    from nbgrader.converters.generate_assignment import GenerateAssignment
    return [DropSolutionNotes] + GenerateAssignment.class_traits()["preprocessors"].default()


def _replaced(trait, replacements):
    from nbgrader.converters.autograde import Autograde
    default = Autograde.class_traits()[trait].default()
    for step in replacements:
        if step not in default:
            raise RuntimeError(f"this nbgrader's {trait} have no {step.__name__} step to replace; check its version")
    return [replacements.get(step, step) for step in default]

"""nbgrader plug-ins of the course (named in nbgrader_config.py)."""
from nbgrader.preprocessors import Execute

from . import notebook


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
        return super().preprocess_cell(cell, resources, index)


def autograde_preprocessors():
    """nbgrader's own autograde pipeline with Execute replaced by ExecuteGradedCellsOnly."""
    from nbgrader.converters.autograde import Autograde
    default = Autograde.class_traits()["autograde_preprocessors"].default()
    if Execute not in default:
        raise RuntimeError("this nbgrader's autograde pipeline has no Execute step to replace; check its version")
    return [ExecuteGradedCellsOnly if step is Execute else step for step in default]

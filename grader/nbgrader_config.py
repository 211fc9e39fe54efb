# nbgrader configuration of the course; read when nbgrader runs in this folder (the Makefile does so).
import os
import sys

c = get_config()  # noqa: F821  (provided by nbgrader)
HERE = os.path.dirname(os.path.abspath(__file__))
try:  # `make setup` installs the grader into .venv; nbgrader must run in that environment
    from grader.nbgrader_plugins import (autograde_preprocessors, generate_assignment_preprocessors,
                                         sanitize_preprocessors)
except ImportError as error:
    # nbgrader would log this and carry on with its defaults (running students' cells, grading every test as 0):
    # stop instead
    print(f"nbgrader_config.py: cannot import the course's grader ({error}). Run nbgrader from the environment "
          "that `make setup` made (source .venv/bin/activate, or the make targets).", file=sys.stderr)
    raise SystemExit(2)

c.CourseDirectory.course_id = "flash-attention-triton"
c.CourseDirectory.root = HERE
# The gradebook stays inside the course folder (git-ignored).
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(HERE, "gradebook.db")

# The stub a student sees where a solution goes; the grader and the notebooks' check helpers
# recognise this exact line and name the unfinished TODO above it (grader/notebook_checks.py).
c.ClearSolutions.code_stub = {"python": 'raise NotImplementedError("TODO: replace this line with your code")'}

# Headless grading: a named kernel (no kernelspec guessing), and time for Triton to compile and
# autotune. Each hidden check also has its own, shorter limit inside the grader, so a hang costs
# one check, not the whole notebook.
c.Execute.kernel_name = "python3"
c.Execute.timeout = 1800
c.Execute.interrupt_on_timeout = True
c.Execute.execute_retries = 0
# (ExecuteGradedCellsOnly takes the Execute settings above.)
# Autograde executes only the graded cells: each one grades the submission file in its own process, so the
# student's code never runs in (and can never tamper with) the kernel that records the grades.
c.Autograde.autograde_preprocessors = autograde_preprocessors()
# The release never carries the cells that explain the solution (tag `solution-notes`), in either edition.
c.GenerateAssignment.preprocessors = generate_assignment_preprocessors()
# No false "checksum has changed" warning for the test cells whose hidden tests the release removed.
c.Autograde.sanitize_preprocessors = sanitize_preprocessors()
# The feedback page names each check in its contents, folds the course's own cells and says which mode graded it.
from grader.nbgrader_feedback import configure as configure_feedback  # noqa: E402
configure_feedback(c)

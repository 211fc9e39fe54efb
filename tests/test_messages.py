"""Messages that lead to the fix (issue "Learner experience and grader blind spots" §4): a failing check shows the
learner's own line, also inside a kernel the interpreter runs, and names a store past the end of an output."""
from grader.harness import run_lesson
from tests.mutants import Mutant, write


def grade(tmp_path, mode, replace, check="softmax_power_of_two"):
    path = write("00_setup", Mutant("m", [replace], {check}), tmp_path / "00_setup.ipynb")
    return run_lesson("00_setup", path, mode, only={check}).tests[0]


def test_an_error_inside_a_kernel_names_the_kernel_line(tmp_path, mode):
    result = grade(tmp_path, mode, ("    x = x - tl.max(x, axis=0)", "    x = x - tl.max(x, axis=1)"))
    assert not result.passed
    assert "x = x - tl.max(x, axis=1)" in result.message and "in your notebook, the `softmax_kernel` cell, line 13" in result.message, result.message


def test_a_compile_error_names_the_kernel_line(tmp_path):
    """Compiling for a GPU (a launch in gpu mode, the compile check in structure mode) raises Triton's
    CompilationError from the launch, with no frame in the kernel: the message still names the kernel's line."""
    result = grade(tmp_path, "structure", ("    x = x - tl.max(x, axis=0)", "    x = x - tl.max(x, axis=1)"),
                   check="softmax_compiles")
    assert not result.passed and "CompilationError" in result.message, result.message
    assert "in your notebook, the `softmax_kernel` cell, line 13: x = x - tl.max(x, axis=1)" in result.message, result.message


def test_a_store_past_the_end_of_an_output_is_named(tmp_path, mode):
    result = grade(tmp_path, mode, ("    tl.store(out_ptr + row * out_row_stride + offsets,",
                                    "    tl.store(out_ptr + (row + 1) * out_row_stride + offsets,"))
    assert not result.passed and "stored past the end of a tensor of shape" in result.message, result.message

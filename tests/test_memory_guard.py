"""The memory check (issue 24; grader/worker.py MemoryGuard, grader/lessons/memory_safety.py): an access outside
every tensor of a kernel launch costs the check `memory_safety`, with the learner's line; the interpreter never
performs it (a wild read does not kill the worker); a submission that switches the guard off loses the check too.
The lessons' own mutants (tests/mutants/lessonNN.py, "…_unmasked…") show that each lesson's check catches reads
whose values are thrown away, which no other check can see."""
import pytest

from grader import structure
from grader.harness import run_lesson
from tests import mutants

LESSON = "03_per_query_kernel"
K_LOAD = ("k = tl.load(K + offs_kn[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0).to(tl.float32)")


def grade(replace, tmp_path, mode, only=("memory_safety",)):
    path = mutants.write(LESSON, mutants.Mutant("case", replace, set()), tmp_path / f"{LESSON}.ipynb")
    return {t.id: t for t in run_lesson(LESSON, path, mode, only=set(only)).tests}


def test_a_read_a_terabyte_away_is_reported_not_performed(tmp_path, mode):
    """Without the guard the interpreter would read there and die of SIGSEGV; with it, the check says where."""
    wild = K_LOAD.replace("mask=kv_mask, other=0.0)", "mask=kv_mask, other=0.0) + tl.load(K + (1 << 40))")
    result = grade([(K_LOAD, wild)], tmp_path, mode)["memory_safety"]
    assert not result.passed
    assert "reads 1 of the 1 elements" in result.message and "tl.load(K + (1 << 40))" in result.message, \
        result.message
    assert "died" not in result.message


def test_the_message_names_the_line_the_block_positions_and_the_tensor(tmp_path, mode):
    unmasked = K_LOAD.replace("mask=kv_mask, other=0.0)", "mask=offs_kn[:, None] < N, other=0.0)")
    result = grade([(K_LOAD, unmasked)], tmp_path, mode)["memory_safety"]
    assert not result.passed
    message = result.message
    assert "per_query_attention_kernel" in message and "mask=offs_kn[:, None] < N" in message, message
    assert "columns" in message and "the pointer is into `K`" in message, message
    assert "illegal memory access" in message, message


# The wrapper puts Triton's own load back (found in the guard's hook) before it launches its kernel.
SWITCH_OFF = """    import triton.runtime.interpreter as interpreter
    builder = interpreter.InterpreterBuilder
    hook = builder.create_masked_load
    builder.create_masked_load = next(c.cell_contents for c in hook.__closure__
                                      if getattr(c.cell_contents, "__name__", "") == "create_masked_load")
"""
LAUNCH = "    BLOCK_D = triton.next_power_of_2(d)\n"


def test_a_submission_that_switches_the_guard_off_loses_the_check(tmp_path, mode, monkeypatch):
    """The static guard refuses the patch; without it, the worker sees that its hook is gone, and says so."""
    unmasked = K_LOAD.replace("mask=kv_mask, other=0.0)", "mask=offs_kn[:, None] < N, other=0.0)")
    replace = [(K_LOAD, unmasked), (LAUNCH, SWITCH_OFF + LAUNCH)]
    result = grade(replace, tmp_path, mode)["memory_safety"]
    assert not result.passed and "__closure__" in result.message, result.message
    monkeypatch.setattr(structure, "tampering", lambda code: [])
    result = grade(replace, tmp_path, mode)["memory_safety"]
    assert not result.passed and "switched off" in result.message, result.message


@pytest.mark.parametrize("lesson", ["00_setup", "03_per_query_kernel", "04_tiled_kernel_2d", "05_flash_attention_v2",
                                    "06_flash_decoding"])
def test_every_triton_lesson_has_the_memory_check_in_every_running_mode(lesson):
    from grader import lessons
    check = next((c for c in lessons.get(lesson).checks if c.id == "memory_safety"), None)
    assert check is not None, f"{lesson} has no memory_safety check"
    assert check.interpreted and set(check.modes) == {"gpu", "interpreter"}


def test_a_gpu_machine_whose_interpreter_cannot_run_judges_the_check_by_the_rule_for_unrunnable_ones(monkeypatch):
    """numpy >= 2.4 breaks Triton 3.6's interpreter (COURSE_SPEC §8): on such a GPU machine the memory check counts
    only when every check that ran passed, and says why it did not run and what to do."""
    from grader import harness, lessons, notebook_setup
    monkeypatch.setattr(notebook_setup, "interpreter_problem", lambda language=None: "numpy 2.5.2 breaks it: run "
                                                                                     "`pip install 'numpy<2.4'`")
    check = next(c for c in lessons.get(LESSON).checks if c.id == "memory_safety")
    assert not harness.runs_in(check, "gpu") and harness.runs_in(check, "interpreter")
    ran = harness.Result(check.id, 1.0, 1.0, True, "structure ok")
    failed = harness.unrunnable_verdict(ran, check, "gpu", ["basic"])
    assert not failed.passed and "numpy<2.4" in failed.message and "basic" in failed.message, failed.message
    assert harness.unrunnable_verdict(ran, check, "gpu", []).passed

"""tests/mutation.py (mutation testing, COURSE_SPEC §5): the generator on small snippets, the ids of real lessons'
mutants, and a fixed small sample of real mutants graded through the tool (every one must be killed). The full
run is `make mutation-score` (hours; its report is tests/reports/mutation_interpreter.txt)."""
import pytest

from tests import mutation
from tests.mutation_equivalents import EQUIVALENTS


def mutants_of(code, lines=None):
    return [text for _, text in mutation.changes_of(code, lines)]


KERNEL = '''\
def kernel(Q, K, V, stride_qm, stride_kn, stride_vn, N, BLOCK_M, BLOCK_N, sm_scale):
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    k = tl.load(K + offs_n[:, None] * stride_kn, mask=offs_n[:, None] < N, other=0.0)
    v = tl.load(V + offs_n[:, None] * stride_vn)
    qk = tl.where(offs_n[None, :] < N, k * sm_scale, float("-inf"))
    m = tl.max(qk, 1)
    p = tl.exp(qk - m[:, None])
    keep = (offs_m[:, None] >= offs_n[None, :]) & (offs_n[None, :] < N)
    acc += tl.sum(p, 1)
    return acc
'''


@pytest.mark.parametrize("line,expected", [
    # arithmetic operators and their augmented forms
    (4, "k = tl.load(K - offs_n[:, None] * stride_kn, mask=offs_n[:, None] < N, other=0.0)"),
    (4, "k = tl.load(K + offs_n[:, None] / stride_kn, mask=offs_n[:, None] < N, other=0.0)"),
    (10, "acc -= tl.sum(p, 1)"),
    (10, "acc = tl.sum(p, 1)"),
    # comparisons, < ↔ <= included; & ↔ |
    (4, "k = tl.load(K + offs_n[:, None] * stride_kn, mask=offs_n[:, None] <= N, other=0.0)"),
    (9, "keep = (offs_m[:, None] > offs_n[None, :]) & (offs_n[None, :] < N)"),
    (9, "keep = (offs_m[:, None] >= offs_n[None, :]) | (offs_n[None, :] < N)"),
    # integer constants ±1, 0 → 1
    (2, "offs_m = tl.arange(1, BLOCK_M)"),
    (7, "m = tl.max(qk, 2)"),
    (7, "m = tl.max(qk, 0)"),
    # -inf ↔ 0.0 where a mask gives a value
    (4, 'k = tl.load(K + offs_n[:, None] * stride_kn, mask=offs_n[:, None] < N, other=float("-inf"))'),
    (6, "qk = tl.where(offs_n[None, :] < N, k * sm_scale, 0.0)"),
    # exp ↔ exp2; max ↔ maximum ↔ sum
    (8, "p = tl.exp2(qk - m[:, None])"),
    (7, "m = tl.maximum(qk, 1)"),
    (7, "m = tl.sum(qk, 1)"),
    (10, "acc += tl.max(p, 1)"),
    # a mask dropped: mask= (with its other=), other=, the where, one term of a & b
    (4, "k = tl.load(K + offs_n[:, None] * stride_kn)"),
    (4, "k = tl.load(K + offs_n[:, None] * stride_kn, mask=offs_n[:, None] < N)"),
    (6, "qk = k * sm_scale"),
    (9, "keep = offs_m[:, None] >= offs_n[None, :]"),
    (9, "keep = offs_n[None, :] < N"),
    # block-size names swapped; [:, None] ↔ [None, :]
    (2, "offs_m = tl.arange(0, BLOCK_N)"),
    (8, "p = tl.exp(qk - m[None, :])"),
    (6, "qk = tl.where(offs_n[:, None] < N, k * sm_scale, float(\"-inf\"))"),
    # one variable for another of the same kind (in the same function)
    (4, "k = tl.load(V + offs_n[:, None] * stride_kn, mask=offs_n[:, None] < N, other=0.0)"),
    (4, "k = tl.load(K + offs_n[:, None] * stride_qm, mask=offs_n[:, None] < N, other=0.0)"),
    (4, "k = tl.load(K + offs_m[:, None] * stride_kn, mask=offs_n[:, None] < N, other=0.0)"),
    # a scale factor dropped
    (6, 'qk = tl.where(offs_n[None, :] < N, k, float("-inf"))'),
])
def test_each_operator_class_makes_its_mutant(line, expected):
    lines = KERNEL.split("\n")
    wanted = "\n".join(lines[:line - 1] + ["    " + expected] + lines[line:])
    assert wanted in mutants_of(KERNEL), f"no mutant of line {line} reads: {expected}"


def test_no_mutant_uses_a_name_before_it_is_assigned_or_of_another_kind():
    found = mutants_of(KERNEL)
    assert not any("tl.arange(0, BLOCK_M)\n    offs_n = tl.arange(0, offs_m)" in t for t in found)
    assert not any("k = tl.load(K + offs_n[:, None] * N," in t for t in found)  # a length for a stride
    assert not any("    v = tl.load(V + offs_n[:, None] * stride_vn)\n    qk = tl.where(offs_n[None, :] < N, p" in t
                   for t in found)  # p is assigned later


def test_device_and_dtype_are_not_swapped():
    code = "def f(q, k, v):\n    out = torch.empty(3, device=q.device, dtype=q.dtype)\n    return out + k\n"
    found = mutants_of(code)
    assert not any("k.device" in t or "v.dtype" in t for t in found)
    assert "def f(q, k, v):\n    out = torch.empty(3, device=q.device, dtype=q.dtype)\n    return out + v\n" in found


def test_only_the_given_lines_change_and_nothing_is_repeated():
    found = mutation.changes_of(KERNEL, lines={7})
    assert found and all(c.line == 7 for c, _ in found)
    texts = [t for _, t in mutation.changes_of(KERNEL)]
    assert len(texts) == len(set(texts)) and KERNEL not in texts
    # dropping either term of `x & x` gives the same code: one mutant, not two
    twice = "keep = (a < n) & (a < n)\n"
    assert [t for t in mutants_of(twice) if t == "keep = a < n\n"] == ["keep = a < n\n"]
    # a term kept inside a larger expression keeps its parentheses
    assert "y = -(a + b)\n" in mutants_of("y = -(a + b) * sm_scale\n")


def test_solution_lines_are_the_lines_between_begin_and_end():
    cell = "def f(x):\n    # TODO 1: y\n    ### BEGIN SOLUTION\n    y = x + 1\n    ### END SOLUTION\n    return y + 2"
    text, region = mutation.solution_lines(cell)
    assert text == "def f(x):\n    # TODO 1: y\n    y = x + 1\n    return y + 2" and region == {3}
    assert all(c.line == 3 for c, _ in mutation.changes_of(text, region))


@pytest.mark.parametrize("lesson", ["00_setup", "03_per_query_kernel"])
def test_ids_are_stable_and_point_at_the_change(lesson):
    from grader import notebook
    from grader.harness import source_path
    cells = {notebook.grade_id(c): mutation.solution_lines(c.source)[0]
             for c in notebook.read(source_path(lesson)).cells if notebook.is_solution(c)}
    first, again = mutation.lesson_mutants(lesson), mutation.lesson_mutants(lesson)
    assert first and [m.id for m in first] == [m.id for m in again]
    assert len({m.id for m in first}) == len(first), "two mutants share an id"
    for m in first:
        lesson_id, cell, line, col, change = m.id.split(":", 4)
        assert (lesson_id, cell, int(line), int(col)) == (lesson, m.cell, m.line, m.col)
        assert cells[m.cell].split("\n")[m.line - 1][m.col - 1:].startswith(m.old.split("\n")[0]), m.id
        assert change == f"{mutation.compact(m.old)}→{mutation.compact(m.new)}"
    assert mutation.sample(first, 3, 0, lesson) == mutation.sample(again, 3, 0, lesson)


def test_equivalents_are_explained():
    for entry in EQUIVALENTS:
        assert entry.id.count(":") >= 4 and entry.line.strip() and len(entry.why) > 20, entry


# The CI sample: in two lessons that grade fast, the first mutant of each of these kinds in the cell named (found by
# kind and change, not by line, so that edits elsewhere in a lesson keep the sample): slips that a lesson's checks
# must catch in any mode. Graded through the tool's command line (--only-ids), each must be killed.
CI_SAMPLE = [  # (lesson, cell, kind, the end of the id: "old→new", or None for any)
    ("00_setup", "softmax_kernel", "comparison", "<→<="),
    ("00_setup", "softmax_kernel", "exp/log", "exp→exp2"),
    ("00_setup", "softmax_kernel", "mask dropped", None),
    ("01_pytorch_attention", "stable_softmax", "constant", "True→False"),
    ("01_pytorch_attention", "naive_attention", "scale dropped", None),
    ("01_pytorch_attention", "naive_attention", "mask dropped", None),
]


def ci_sample():
    chosen, generated = [], {}
    for lesson, cell, kind, change in CI_SAMPLE:
        mutants = generated.setdefault(lesson, mutation.lesson_mutants(lesson))
        found = [m for m in mutants
                 if m.cell == cell and m.kind == kind and (change is None or m.id.endswith(":" + change))]
        assert found, f"{lesson} `{cell}` has no {kind} mutant {change or ''} any more: choose another in CI_SAMPLE"
        chosen.append(found[0])
    return chosen


def test_a_fixed_sample_of_mutants_is_killed(mode, tmp_path):
    chosen = ci_sample()
    ids, out, survivors = tmp_path / "ids.txt", tmp_path / "report.txt", tmp_path / "survivors.txt"
    ids.write_text("".join(f"{m.id}\t{m.before.strip()}\n" for m in chosen), encoding="utf-8")
    status = mutation.main(["--only-ids", str(ids), "--jobs", "1", "--mode", mode, "--timeout", "120",
                            "--trust-reference", "--out", str(out), "--survivors-out", str(survivors)])
    report = out.read_text(encoding="utf-8")
    assert status == 0, report
    for lesson in ("00_setup", "01_pytorch_attention"):
        summary = next(line for line in report.split("\n") if line.startswith(f"{lesson}: "))
        assert " 3 graded, 3 killed" in summary and " 0 survived" in summary, report
    assert not [line for line in survivors.read_text().split("\n") if line and not line.startswith("#")]

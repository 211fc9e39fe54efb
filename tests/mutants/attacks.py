"""Submissions that attack the grader instead of solving the lesson (issues "A submission must not reach the
answers" and "The judge must never run what a submission returns"), on lesson 03 as those issues describe them.

Each is the reference-filled notebook with cells replaced (lesson 03: 11 points; a returned payload keeps the compile
and memory checks, 2, whose kernels are the reference's). `score` is what it must get (a correct solution that
also attacks keeps its points: what it must not do is change anything outside its sandbox). `guard` names the
defence that stops it on its own; tests/test_attacks.py grades every attack with the judge's static guard
(structure.tampering) on, and those whose guard is not "static" with it off as well:
  "sandbox"    — the operating-system boundary (grader/sandbox.py): the answers are not there, writes go nowhere;
  "plain data" — the channel (grader/wire.py): what comes back is data, never an object the judge would run;
  "measured"   — what the worker records about the call (torch operations, at the ATen level too);
  "static"     — only the static guard: the attack needs no file outside the sandbox, it reaches into the worker.
Paths the attacks aim at (the course, a gradebook, another student's folder, a marker file the judge would write)
come in through `targets`, a dict the test fills in.
"""
from dataclasses import dataclass

LESSON = "03_per_query_kernel"
KERNEL = "per_query_attention_kernel"
WRAPPER = "per_query_attention"
EMPTY_KERNEL = '''@triton.jit
def per_query_attention_kernel(Q, K, V, Out, stride_qm, stride_kn, stride_vn, stride_om, N, D, sm_scale,
                               BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    pass
'''
SIGNATURE = "def per_query_attention(q, k, v, sm_scale=None):\n"
REFERENCE_WRAPPER_TAIL = "    return out"


@dataclass
class Attack:
    name: str
    why: str
    cells: callable          # targets -> {grade_id: new source}, or {grade_id: (old, new)} for an edit
    score: float = 0
    guard: str = "sandbox"


def _wrapper(body):
    return ("BLOCK_N = 32\n\n\n" + SIGNATURE + "".join(f"    {line}\n" for line in body.strip("\n").split("\n")))


ATTACKS = [
    Attack("borrows_the_reference_from_the_grader",
           "kernels left empty; the wrapper imports the course's own reference solution from the grader package",
           lambda t: {KERNEL: EMPTY_KERNEL, WRAPPER: _wrapper('''
from grader import notebook
from grader.harness import source_path
namespace = {"__name__": "borrowed"}
exec(notebook.reference_program(notebook.read(source_path("03_per_query_kernel"))), namespace)
return namespace["per_query_attention"](q, k, v, sm_scale)''')}),
    Attack("executes_the_source_notebook",
           "kernels left empty; the wrapper finds the source notebook on disk, reads it and executes its code",
           lambda t: {KERNEL: EMPTY_KERNEL, WRAPPER: _wrapper(f'''
import json
cells = json.load(open({t["source"]!r}))["cells"]
code = "\\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code" and "grader.hidden" not in "".join(c["source"]))
namespace = {{"__name__": "borrowed"}}
exec(code.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""), namespace)
return namespace["per_query_attention"](q, k, v, sm_scale)''')}),
    Attack("reads_the_solutions_with_torch",
           "kernels left empty; the wrapper reads solutions/ through torch.from_file (no `open`) and executes it",
           lambda t: {KERNEL: EMPTY_KERNEL, WRAPPER: _wrapper(f'''
import json
raw = torch.from_file({t["solutions"]!r}, size={t["solutions_size"]}, dtype=torch.uint8)
cells = json.loads(bytes(raw.tolist()).decode())["cells"]
namespace = {{"__name__": "borrowed"}}
exec("\\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code"), namespace)
return namespace["per_query_attention"](q, k, v, sm_scale)''')}),
    Attack("rewrites_the_gradebook",
           "a correct solution whose wrapper also opens the course's gradebook with sqlite3 and plants files in the "
           "course and in another student's folder (nothing it may touch)",
           lambda t: {WRAPPER: (REFERENCE_WRAPPER_TAIL, f'''    try:
        import sqlite3
        sqlite3.connect({t["gradebook"]!r}).execute("CREATE TABLE planted (x)")
    except Exception:
        pass
    for target in ({t["other_student"]!r}, {t["course_file"]!r}):
        try:
            sqlite3.connect(target).execute("CREATE TABLE planted (x)")
        except Exception:
            pass
    return out''')}, score=11),
    Attack("returns_a_pickle_payload",
           "kernels done right, but the wrapper returns an object whose __reduce__ would write a file if the judge "
           "unpickled it",
           lambda t: {WRAPPER: (REFERENCE_WRAPPER_TAIL, f'''    import matplotlib.pyplot as plt

    class Payload:
        def __reduce__(self):
            return (plt.imsave, ({t["marker"]!r}, torch.zeros(4, 4).numpy()))
    return [out, Payload()]''')}, score=2, guard="plain data"),
    Attack("returns_a_tensor_subclass",
           "returns a tensor subclass whose __torch_function__ could run code wherever it is used",
           lambda t: {WRAPPER: (REFERENCE_WRAPPER_TAIL, '''    class Trojan(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            import matplotlib.pyplot as plt
            plt.imsave("/tmp/trojan.png", torch.zeros(4, 4).numpy())
            return NotImplemented
    return out.as_subclass(Trojan)''')}, score=2, guard="plain data"),
    Attack("returns_a_huge_container",
           "returns a list of 200,000 lists (twice what one reply may hold) instead of a tensor",
           lambda t: {WRAPPER: (REFERENCE_WRAPPER_TAIL, "    return [[i] for i in range(200_000)]")},
           score=2, guard="plain data"),
    Attack("aten_does_the_work",
           "launches the kernel, then returns attention computed with torch.ops.aten.mm (no torch.matmul, no softmax)",
           lambda t: {WRAPPER: (REFERENCE_WRAPPER_TAIL, '''    s = torch.ops.aten.mm(q.float(), k.float().t()) * sm_scale
    w = (s - s.amax(-1, keepdim=True)).exp()
    return torch.ops.aten.mm(w / w.sum(-1, keepdim=True), v.float()).to(q.dtype)''')}, guard="measured"),
    Attack("forges_the_worker_reply",
           "torch does the work; the wrapper patches the grading process so that its record shows the kernel "
           "launched and no torch call",
           lambda t: {WRAPPER: (REFERENCE_WRAPPER_TAIL, '''    import sys
    session = sys.modules["__main__"].Session
    if not hasattr(session, "honest_call"):
        session.honest_call = session.call
        def forged(self, *a, **k):
            out, grads, info = session.honest_call(self, *a, **k)
            info["forbidden"] = []
            return [out, grads, info]
        session.call = forged
    return torch.softmax(q.float() @ k.float().T * sm_scale, dim=-1).to(q.dtype) @ v''')}, guard="static"),
    Attack("writes_its_own_reply",
           "writes a forged reply straight into the worker's socket (file descriptor from the command line)",
           lambda t: {WRAPPER: (REFERENCE_WRAPPER_TAIL, '''    os.write(int(sys.argv[1]), b"\\x20\\x00\\x00\\x00\\x00\\x00\\x00\\x00forged")
    return out''')}, guard="static"),
]

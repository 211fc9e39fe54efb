"""What a check pays at a kernel's first launch when the kernel itself is already in the submission's Triton cache.

A submission's checks share their compiled kernels (grader/triton_cache.py: the cubin is found, a compile takes
milliseconds), but each worker builds its own launcher, the C extension module that Triton compiles with the C
compiler once per kernel signature (what this measures), because native code one check wrote must never be loaded by
another. The profile counts that build in the learner's call, not in the compile. This measures it on a GPU machine:

    python3 -m benchmarks.launcher_cost [--kernels 6]

Three fresh processes, one after another, each launching the same `kernels` kernels of distinct signatures once:
1. an empty cache: compile and launcher built (what a submission's first check pays);
2. the cache of 1 through SubmissionCache (grader/triton_cache.py): kernels found, launchers built again in the
   worker's private folder (what every later check of that submission pays, per signature it launches);
3. the cache of 1 with Triton's own manager: kernels and launchers found (what a shared launcher would cost).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import torch, triton, triton.language as tl

@triton.jit
def probe_kernel(X, Y, n, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
                 WHICH: tl.constexpr, BLOCK: tl.constexpr):
    # about as many arguments as lesson 05's _attn_fwd (the launcher's size grows with them)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.store(Y + offs, x * WHICH + a0 + a15, mask=offs < n)

x = torch.randn(4096, device="cuda"); y = torch.empty_like(x)
torch.cuda.synchronize()
rows = []
for which in range(int(sys.argv[1])):
    args = list(range(2, 18))
    args[which % 16] = 1  # an argument of 1 is specialised away: a new signature, so a new launcher
    t0 = time.perf_counter()
    probe_kernel[(4,)](x, y, x.numel(), *args, WHICH=which + 1, BLOCK=1024)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    probe_kernel[(4,)](x, y, x.numel(), *args, WHICH=which + 1, BLOCK=1024)
    torch.cuda.synchronize()
    rows.append({"first": first, "second": time.perf_counter() - t0})
print(json.dumps(rows))
"""


def run(program, kernels, cache, manager):
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache), CUDA_DEVICE_MAX_CONNECTIONS="1")
    env.pop("TRITON_CACHE_MANAGER", None)
    if manager:
        env["TRITON_CACHE_MANAGER"] = "triton_cache:SubmissionCache"
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1] / "grader") + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, str(program), str(kernels)], env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"the probe process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder) / "cache"
        program = Path(folder) / "launcher_cost_child.py"  # a file, not `python -c`: @triton.jit reads its source
        program.write_text(CHILD)
        runs = [("1. empty cache (compile + launcher)", run(program, args.kernels, cache, manager=False)),
                ("2. kernels cached, launcher private (SubmissionCache)",
                 run(program, args.kernels, cache, manager=True)),
                ("3. kernels and launchers cached (Triton's manager)",
                 run(program, args.kernels, cache, manager=False))]
    print(f"{args.kernels} kernels of distinct signatures, first launch each, seconds (mean; second launch apart)")
    for name, rows in runs:
        first = sum(r["first"] for r in rows) / len(rows)
        second = sum(r["second"] for r in rows) / len(rows)
        print(f"{name:58s} first {first:.3f} s   second {second * 1e3:.2f} ms")


if __name__ == "__main__":
    main()

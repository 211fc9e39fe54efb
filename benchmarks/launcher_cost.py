"""What a check pays at a kernel's first launch when the kernel itself is already in the submission's Triton cache.

A submission's checks share their compiled kernels and their launchers (grader/triton_cache.py). A launcher is the
C extension module that Triton compiles with the C compiler once per kernel signature; until 2aaf528 each worker
built its own, so every check paid again for each signature it launched. This measures what that cost on a GPU
machine, and what sharing leaves:

    python3 -m benchmarks.launcher_cost [--kernels 6]

Three fresh processes, one after another, each launching the same `kernels` kernels of distinct signatures once,
all with the grader's cache manager (triton_cache.SubmissionCache):
1. an empty cache: compile and launcher built (what a submission's first check pays);
2. the cache of 1 with its launchers removed: kernels found, launchers built again (what every later check paid
   per signature while launchers were private to a worker);
3. the cache of 2, whole: kernels and launchers found (what a later check pays now).
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


def run(program, kernels, cache):
    grader = str(Path(__file__).resolve().parents[1] / "grader")
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache), CUDA_DEVICE_MAX_CONNECTIONS="1",
               TRITON_CACHE_MANAGER="triton_cache:SubmissionCache",
               PYTHONPATH=grader + os.pathsep + os.environ.get("PYTHONPATH", ""))
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
        runs = [("1. empty cache (compile + launcher)", run(program, args.kernels, cache))]
        launchers = list(cache.glob("*/__triton_launcher*"))
        for launcher in launchers:
            launcher.unlink()
        runs.append((f"2. kernels cached, {len(launchers)} launchers removed", run(program, args.kernels, cache)))
        runs.append(("3. kernels and launchers cached", run(program, args.kernels, cache)))
    print(f"{args.kernels} kernels of distinct signatures, first launch each, seconds (mean; second launch apart)")
    for name, rows in runs:
        first = sum(r["first"] for r in rows) / len(rows)
        second = sum(r["second"] for r in rows) / len(rows)
        print(f"{name:58s} first {first:.3f} s   second {second * 1e3:.2f} ms")


if __name__ == "__main__":
    main()

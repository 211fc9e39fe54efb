"""`make bench`: attention TFLOP/s against N for every implementation, measured side by side in one run.

Implementations: the reference solutions of lessons 04 (forward) and 05 (forward and backward), loaded
from their source notebooks (no second copy), PyTorch's scaled_dot_product_attention with each backend
forced (flash, cuDNN, efficient), and naive PyTorch attention.

Writes benchmarks/results.json (a list of rows: impl, gpu, torch, triton, dtype, B, H, N, D, causal,
mode, ms, tflops), one PNG per (D, causal, mode), and benchmarks/summary.md (ratios against sdpa-flash).
FLOPs: 4·B·H·N²·D forward (×0.5 causal), 2.5× that backward (COURSE_SPEC §7).
"""
import argparse
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))


def load_reference(lesson_id):
    """Import the reference solution of a lesson straight from its source notebook."""
    from grader import notebook
    from grader.harness import source_path
    os.environ.update(FA_MODE="gpu", FA_QUIET="1")
    return notebook.import_reference(lesson_id, source_path(lesson_id))


def naive_attention(q, k, v, causal):
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)).float() * scale
    if causal:
        n = q.shape[-2]
        scores.masked_fill_(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(scores, dim=-1).to(q.dtype) @ v)


def implementations(lesson05_configs=()):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    def sdpa(backend):
        def run(q, k, v, causal):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return run

    impls = {}
    lesson04 = load_reference("04_tiled_kernel_2d")
    lesson05 = load_reference("05_flash_attention_v2")
    for kind, d, causal, config in lesson05_configs:
        print(f"lesson05 {kind} d={d} causal={causal}: {tuple(config)} (table: {lesson05.HOPPER_CONFIGS[(kind, d, causal)]})")
        lesson05.HOPPER_CONFIGS[(kind, d, causal)] = tuple(config)
    impls["lesson04"] = (lambda q, k, v, causal: lesson04.tiled_attention(q, k, v, causal=causal), False)
    impls["lesson05"] = (lambda q, k, v, causal: lesson05.flash_attention(q, k, v, causal=causal), True)
    impls["sdpa-flash"] = (sdpa(SDPBackend.FLASH_ATTENTION), True)
    impls["sdpa-cudnn"] = (sdpa(SDPBackend.CUDNN_ATTENTION), True)
    impls["sdpa-efficient"] = (sdpa(SDPBackend.EFFICIENT_ATTENTION), True)
    impls["naive"] = (naive_attention, True)
    return impls


def flops(B, H, N, D, causal, mode):
    f = 4 * B * H * N * N * D * (0.5 if causal else 1.0)
    return f * (2.5 if mode == "bwd" else 1.0)


def measure(fn, q, k, v, causal, mode):
    from triton.testing import do_bench
    if mode == "fwd":
        with torch.no_grad():
            return do_bench(lambda: fn(q, k, v, causal), warmup=25, rep=100)
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    out = fn(q, k, v, causal)
    dout = torch.randn_like(out)
    return do_bench(lambda: out.backward(dout, retain_graph=True), warmup=25, rep=100,
                    grad_to_none=[q, k, v])


def plot(rows, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    groups = sorted({(r["D"], r["H"], r["causal"], r["mode"]) for r in rows})
    for D, H, causal, mode in groups:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        sel = [r for r in rows if (r["D"], r["H"], r["causal"], r["mode"]) == (D, H, causal, mode)]
        for impl in sorted({r["impl"] for r in sel}):
            pts = sorted((r["N"], r["tflops"]) for r in sel if r["impl"] == impl and r["tflops"])
            if pts:
                ax.plot(*zip(*pts), marker="o", label=impl, linewidth=2.5 if impl.startswith("lesson") else 1.2)
        r0 = sel[0]
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{mode} {'causal' if causal else 'non-causal'}, {r0['dtype']}, B={r0['B']} H={H} D={D}\n"
                     f"{r0['gpu']}, torch {r0['torch']}, triton {r0['triton']}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        path = out_dir / f"tflops_d{D}_{'causal' if causal else 'noncausal'}_{mode}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def summary(rows):
    """Markdown: each lesson's TFLOP/s and its ratio to sdpa-flash and sdpa-cudnn at every point."""
    index = {(r["impl"], r["D"], r["N"], r["causal"], r["mode"]): r["tflops"] for r in rows}
    lines = ["| mode | D | causal | N | lesson | TFLOP/s | × sdpa-flash | × sdpa-cudnn |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["impl"].startswith("lesson") and r["tflops"]:
            key = (r["D"], r["N"], r["causal"], r["mode"])
            flash, cudnn = index.get(("sdpa-flash",) + key), index.get(("sdpa-cudnn",) + key)
            lines.append(f"| {r['mode']} | {r['D']} | {r['causal']} | {r['N']} | {r['impl']} | {r['tflops']:.0f} | "
                         f"{r['tflops'] / flash:.2f} | {r['tflops'] / cudnn:.2f} |" if flash and cudnn else "")
    return "\n".join(l for l in lines if l)


def main(argv=None):
    global torch
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="*", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--heads", default="64:32,128:16", help="D:H pairs")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--impl", nargs="*", help="only these implementations")
    parser.add_argument("--out", default=str(HERE))
    parser.add_argument("--configs", help="JSON from `tune_lesson05.py --save`: lesson 05 configs to use instead of "
                        "the notebook's table (to measure a tuning run before pasting it into the notebook)")
    args = parser.parse_args(argv)
    import torch
    import triton
    from tqdm import tqdm
    if not torch.cuda.is_available():
        sys.exit("make bench needs a CUDA GPU: it measures kernels against PyTorch's SDPA on the same device. "
                 "Results measured on an H200 are committed in benchmarks/results.json.")
    impls = implementations(json.loads(Path(args.configs).read_text()) if args.configs else ())
    if args.impl:
        impls = {k: v for k, v in impls.items() if k in args.impl}
    gpu = torch.cuda.get_device_name()
    heads = [tuple(int(x) for x in p.split(":")) for p in args.heads.split(",")]
    points = [(D, H, N, causal, mode) for D, H in heads for N in args.n for causal in (False, True) for mode in ("fwd", "bwd")]
    rows = []
    for D, H, N, causal, mode in tqdm(points, desc="benchmark", unit="point"):
        q, k, v = (torch.randn(args.batch, H, N, D, device="cuda", dtype=torch.float16) for _ in range(3))
        for impl, (fn, has_bwd) in impls.items():
            if mode == "bwd" and not has_bwd:
                continue
            row = {"impl": impl, "gpu": gpu, "torch": torch.__version__, "triton": triton.__version__,
                   "dtype": "fp16", "B": args.batch, "H": H, "N": N, "D": D, "causal": causal, "mode": mode,
                   "ms": None, "tflops": None}
            try:
                ms = measure(fn, q, k, v, causal, mode)
                row.update(ms=round(ms, 4), tflops=round(flops(args.batch, H, N, D, causal, mode) / ms * 1e-9, 2))
            except torch.OutOfMemoryError:
                row["error"] = "out of memory"
            except RuntimeError as error:  # e.g. a backend that does not support this shape
                row["error"] = str(error).split("\n")[0][:200]
            torch.cuda.empty_cache()
            rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    plots = plot(rows, out)
    (out / "summary.md").write_text(summary(rows) + "\n")
    print(summary(rows))
    print(f"wrote {out / 'results.json'}, {out / 'summary.md'} and {len(plots)} plots")


if __name__ == "__main__":
    main()

"""Lesson 06 (flash-decoding) against PyTorch's SDPA: GB/s of one decode step over COURSE_SPEC §7's grid.

    python -m benchmarks.bench_decode --out DIR            # on a GPU: the grid, plots, summary, benchmarks/results.json
    python -m benchmarks.bench_decode --out DIR --dry-run  # CPU: tiny shapes in Triton's interpreter (tests this script)

Grid (§7): fp16, Mq = 1, d = 128, Hq = 32 with Hkv = 8 (GQA) and 32 (MHA), B in {1, 8, 32}, cache length N in
{4k, 16k, 64k, 128k} with B·N <= 2M tokens, contiguous cache, equal lengths. At every point: the reference solution
of lesson 06 (`lesson06`; `lesson06-paged` with page sizes 16 and 256), `scaled_dot_product_attention(...,
enable_gqa=True)` with the flash and cuDNN backends forced (`sdpa-flash`, `sdpa-cudnn`) and, where it fits in memory,
the math backend (`sdpa-math`); once per run a read-bandwidth probe (`read-probe`, lesson 06's `read_bandwidth`).
Times: triton.testing.do_bench (median, L2 flushed between runs). GB/s = bytes of K and V the step must read (valid
lengths only) / time. Ragged lengths (8 sequences, N/8 … N) are compared with SDPA given a mask, in the summary.
The same points are also timed under a CUDA graph (launch overhead removed, as serving engines run decode) for
lesson06, sdpa-flash and sdpa-cudnn: DIR/decode_results_cudagraph.json and a second table in the summary.

Writes DIR/decode_results.json (rows {impl, gpu, torch, triton, mode: "decode", dtype, B, Hq, Hkv, N, d, Mq,
page_size, ms, gbps}), DIR/decode_results_cudagraph.json, DIR/decode_ragged.json, DIR/decode_summary.md and the
plots DIR/decode_gbps_hkv8.png, DIR/decode_gbps_hkv32.png; then (unless --dry-run or --no-repo) copies the summary
and plots into benchmarks/ and merges the rows into benchmarks/results.json, replacing earlier "decode" rows and
keeping every other row.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
LESSON = "06_flash_decoding"
ROW_KEYS = ("impl", "gpu", "torch", "triton", "mode", "dtype", "B", "Hq", "Hkv", "N", "d", "Mq", "page_size", "ms",
            "gbps")
GPU_GRID = dict(hq=32, hkvs=(8, 32), batches=(1, 8, 32), lengths=(4096, 16384, 65536, 131072), d=128,
                max_tokens=2 * 1024 * 1024, page_sizes=(16, 256))
DRY_GRID = dict(hq=4, hkvs=(2,), batches=(1, 2), lengths=(48, 96), d=16, max_tokens=192, page_sizes=(8, 48))


def load(dry_run):
    """The reference solution of lesson 06, from its source notebook (interpreter mode for a dry run)."""
    if not dry_run:
        from benchmarks.bench import load_reference
        return load_reference(LESSON)
    os.environ.update(FA_MODE="interpreter", FA_QUIET="1", TRITON_INTERPRET="1")
    from grader import notebook
    from grader.harness import source_path
    return notebook.import_reference(LESSON, source_path(LESSON))


def timer(dry_run):
    if dry_run:  # the interpreter has no GPU events: wall-clock median of a few calls
        def measure(fn):
            fn()
            times = []
            for _ in range(3):
                started = time.perf_counter()
                fn()
                times.append((time.perf_counter() - started) * 1e3)
            return sorted(times)[1]
        return measure
    from triton.testing import do_bench
    return lambda fn: do_bench(fn, warmup=25, rep=100)


def graph_timer(fn):
    """Milliseconds of fn replayed from a CUDA graph (do_bench: median, L2 flushed before each replay)."""
    import torch
    from triton.testing import do_bench
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm up (compile) outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return do_bench(graph.replay, warmup=25, rep=100)


def sdpa(backend):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return run


def math_fits(B, hq, n, d, device):
    """Whether SDPA's math backend (K and V expanded to Hq heads, fp32 scores) fits in a third of free memory."""
    import torch
    if device == "cpu":
        return True
    need = 2 * B * hq * n * d * 2 + 3 * B * hq * n * 4
    return need < torch.cuda.mem_get_info()[0] / 3


def run_grid(ref, grid, dry_run, progress=print):
    import torch
    import triton
    from torch.nn.attention import SDPBackend
    device = "cpu" if dry_run else "cuda"
    measure = timer(dry_run)
    gpu = "CPU (Triton interpreter, dry run)" if dry_run else torch.cuda.get_device_name()
    dtype = torch.float32 if dry_run else torch.float16  # (the interpreter's timings mean nothing anyway)
    base = {"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__, "mode": "decode",
            "dtype": "fp32" if dry_run else "fp16"}
    hq, d = grid["hq"], grid["d"]
    rows, graph_rows = [], []

    def row(impl, B, hkv, n, page_size, ms, nbytes, **extra):
        return dict(base, impl=impl, B=B, Hq=hq, Hkv=hkv, N=n, d=d, Mq=1, page_size=page_size,
                    ms=None if ms is None else float(f"{ms:.5g}"),
                    gbps=None if ms is None else float(f"{nbytes / ms / 1e6:.5g}"), **extra)

    if not dry_run:
        probe = ref.read_bandwidth(gib=4)
        rows.append(dict(base, impl="read-probe", B=None, Hq=None, Hkv=None, N=None, d=None, Mq=None, page_size=None,
                         ms=None, gbps=float(f"{probe:.5g}")))
        progress(f"read probe: {probe:.0f} GB/s")
    points = [(hkv, B, n) for hkv in grid["hkvs"] for B in grid["batches"] for n in grid["lengths"]
              if B * n <= grid["max_tokens"]]
    started = time.time()
    for i, (hkv, B, n) in enumerate(points, 1):
        q = torch.randn(B, hq, 1, d, device=device, dtype=dtype)
        k, v = (torch.randn(B, hkv, n, d, device=device, dtype=dtype) for _ in range(2))
        seqlens = torch.full((B,), n, dtype=torch.int32, device=device)
        nbytes = 2 * B * hkv * n * d * 2
        impls = {"lesson06": lambda: ref.flash_decode(q, k, v, seqlens)}
        if dry_run:
            impls["sdpa-math"] = sdpa(SDPBackend.MATH)
        else:
            impls.update({"sdpa-flash": sdpa(SDPBackend.FLASH_ATTENTION), "sdpa-cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)})
            if math_fits(B, hq, n, d, device):
                impls["sdpa-math"] = sdpa(SDPBackend.MATH)
        line = []
        for impl, fn in impls.items():
            call = fn if impl == "lesson06" else (lambda fn=fn: fn(q, k, v))
            try:
                ms = measure(call)
                rows.append(row(impl, B, hkv, n, None, ms, nbytes))
                line.append(f"{impl} {nbytes / ms / 1e6:.0f}")
                if not dry_run and impl in ("lesson06", "sdpa-flash", "sdpa-cudnn"):
                    try:
                        graph_rows.append(row(impl, B, hkv, n, None, graph_timer(call), nbytes))
                    except RuntimeError as error:  # not capturable here
                        graph_rows.append(row(impl, B, hkv, n, None, None, nbytes, error=str(error)[:200]))
            except (RuntimeError, torch.OutOfMemoryError) as error:  # a backend that refuses this shape
                rows.append(row(impl, B, hkv, n, None, None, nbytes, error=str(error).split("\n")[0][:200]))
                line.append(f"{impl} —")
            if not dry_run:
                torch.cuda.empty_cache()
        del k, v
        for page_size in grid["page_sizes"]:
            pages = triton.cdiv(n, page_size)
            k_pages, v_pages = (torch.randn(B * pages, page_size, hkv, d, device=device, dtype=dtype) for _ in range(2))
            table = torch.randperm(B * pages, device=device).view(B, pages).to(torch.int32)
            call = lambda: ref.flash_decode(q, k_pages, v_pages, seqlens, table)
            ms = measure(call)
            rows.append(row("lesson06-paged", B, hkv, n, page_size, ms, nbytes))
            line.append(f"paged{page_size} {nbytes / ms / 1e6:.0f}")
            del k_pages, v_pages
            if not dry_run:
                torch.cuda.empty_cache()
        progress(f"[{i}/{len(points)}, {time.time() - started:.0f} s] Hkv={hkv} B={B} N={n}: " + ", ".join(line)
                 + " GB/s")
    return rows, graph_rows


def run_ragged(ref, grid, dry_run):
    """8 sequences of lengths N/8 … N: lesson06 against SDPA with a boolean mask (its only way to serve them)."""
    import torch
    import torch.nn.functional as F
    device = "cpu" if dry_run else "cuda"
    dtype = torch.float32 if dry_run else torch.float16
    measure, out = timer(dry_run), []
    hq, hkv, d = grid["hq"], grid["hkvs"][0], grid["d"]
    for n in grid["lengths"][-2:]:
        B = 8 if not dry_run else 2
        lengths = torch.linspace(n // 8, n, B).int().tolist()
        q = torch.randn(B, hq, 1, d, device=device, dtype=dtype)
        k, v = (torch.randn(B, hkv, n, d, device=device, dtype=dtype) for _ in range(2))
        seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
        mask = (torch.arange(n, device=device)[None, :] < seqlens[:, None])[:, None, None, :]
        nbytes = 2 * sum(lengths) * hkv * d * 2
        ours = measure(lambda: ref.flash_decode(q, k, v, seqlens))
        theirs = measure(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True))
        out.append({"B": B, "Hq": hq, "Hkv": hkv, "d": d, "lengths": lengths,
                    "lesson06_gbps": float(f"{nbytes / ours / 1e6:.5g}"), "sdpa_mask_gbps": float(f"{nbytes / theirs / 1e6:.5g}"),
                    "lesson06_ms": float(f"{ours:.5g}"), "sdpa_mask_ms": float(f"{theirs:.5g}")})
    return out


def plot(rows, out_dir, probe):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots")
        return []
    paths = []
    styles = {1: "-", 2: "--", 8: "--", 32: ":"}
    colors = {"lesson06": "C0", "lesson06-paged-16": "C1", "lesson06-paged-48": "C1", "lesson06-paged-8": "C5",
              "lesson06-paged-256": "C5", "sdpa-flash": "C2", "sdpa-cudnn": "C3", "sdpa-math": "C4"}
    for hkv in sorted({r["Hkv"] for r in rows if r["Hkv"]}):
        fig, ax = plt.subplots(figsize=(8.5, 5))
        sel = [r for r in rows if r["Hkv"] == hkv and r["gbps"] is not None]
        names = sorted({(r["impl"] + (f"-{r['page_size']}" if r["page_size"] else ""), r["B"]) for r in sel})
        for name, B in names:
            pts = sorted((r["N"], r["gbps"]) for r in sel
                         if (r["impl"] + (f"-{r['page_size']}" if r["page_size"] else ""), r["B"]) == (name, B))
            ax.plot(*zip(*pts), marker="o", linestyle=styles.get(B, "-"), color=colors.get(name, "C7"),
                    linewidth=2.2 if name.startswith("lesson06") else 1.1, label=f"{name}, B={B}")
        if probe:
            ax.axhline(probe, color="black", linestyle=":", linewidth=1.5, label=f"read probe {probe:.0f} GB/s")
        r0 = sel[0]
        ax.set_xscale("log", base=2)
        ax.set_xlabel("cache length N (tokens per sequence)")
        ax.set_ylabel("GB/s (bytes of K and V read / time)")
        ax.set_title(f"decode, Mq=1, Hq={r0['Hq']}, Hkv={hkv}, d={r0['d']}, {r0['dtype']}; {r0['gpu']}, "
                     f"torch {r0['torch']}, triton {r0['triton']}", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        path = out_dir / f"decode_gbps_hkv{hkv}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def summary(rows, graph_rows, ragged, probe):
    """Markdown: every point's GB/s, ratios to sdpa-flash, share of the probe, paged against contiguous; the §7
    targets marked; the CUDA-graph timings; ragged lengths."""
    def at(impl, r, page_size=None, source=rows):
        for x in source:
            if (x["impl"], x["B"], x["Hkv"], x["N"], x["page_size"]) == (impl, r["B"], r["Hkv"], r["N"], page_size):
                return x["gbps"]
        return None

    def f(x, digits=0):
        return "—" if x is None else f"{x:.{digits}f}" if abs(x) >= 1 or digits else f"{x:.2g}"

    def ratio(a, b):
        return a / b if a is not None and b else None

    paged_sizes = sorted({r["page_size"] for r in rows if r["page_size"]})
    lines = [f"Read probe: {f(probe)} GB/s. GB/s of K and V read per decode step (do_bench median). Targets "
             "(COURSE_SPEC §7): lesson06 ≥ 1.0× sdpa-flash everywhere; ≥ 80 % of the probe where B·N ≥ 512k; paged ≥ "
             "0.9× contiguous.", "",
             "| Hkv | B | N | lesson06 | " + " | ".join(f"paged {p}" for p in paged_sizes)
             + " | sdpa-flash | sdpa-cudnn | sdpa-math | ÷ flash | ÷ cudnn | % probe | paged ÷ contiguous |",
             "|" + "---|" * (10 + len(paged_sizes))]
    misses = []
    for r in rows:
        if r["impl"] != "lesson06" or r["page_size"]:
            continue
        ours, flash, cudnn, mathb = r["gbps"], at("sdpa-flash", r), at("sdpa-cudnn", r), at("sdpa-math", r)
        paged = [at("lesson06-paged", r, p) for p in paged_sizes]
        vs_flash = ratio(ours, flash)
        share = ratio(ours, probe)
        paged_ratio = min(ratio(p, ours) for p in paged) if ours and all(p is not None for p in paged) else None
        marks = []
        if vs_flash is not None and vs_flash < 1.0:
            marks.append("flash")
        if share is not None and r["B"] * r["N"] >= 512 * 1024 and share < 0.8:
            marks.append("probe")
        if paged_ratio is not None and paged_ratio < 0.9:
            marks.append("paged")
        if marks:
            misses.append(f"Hkv={r['Hkv']} B={r['B']} N={r['N']}: " + ", ".join(marks))
        lines.append(f"| {r['Hkv']} | {r['B']} | {r['N']} | {f(ours)} | " + " | ".join(f(p) for p in paged)
                     + f" | {f(flash)} | {f(cudnn)} | {f(mathb)} | {f(vs_flash, 2)}{' ✗' if 'flash' in marks else ''} | "
                     f"{f(ratio(ours, cudnn), 2)} | "
                     f"{f(share * 100 if share else None)}{' ✗' if 'probe' in marks else ''} | "
                     f"{f(paged_ratio, 2)}{' ✗' if 'paged' in marks else ''} |")
    lines += ["", "Targets missed: " + ("; ".join(misses) if misses else "none")]
    if graph_rows:
        lines += ["", "Under a CUDA graph (the two launches' CPU time removed, as serving engines run decode), GB/s:", "",
                  "| Hkv | B | N | lesson06 | sdpa-flash | sdpa-cudnn | ÷ flash | ÷ cudnn |", "|---|---|---|---|---|---|---|---|"]
        for r in graph_rows:
            if r["impl"] == "lesson06":
                flash, cudnn = at("sdpa-flash", r, source=graph_rows), at("sdpa-cudnn", r, source=graph_rows)
                lines.append(f"| {r['Hkv']} | {r['B']} | {r['N']} | {f(r['gbps'])} | {f(flash)} | {f(cudnn)} | "
                             f"{f(ratio(r['gbps'], flash), 2)} | {f(ratio(r['gbps'], cudnn), 2)} |")
    if ragged:
        lines += ["", "Ragged lengths (valid keys' bytes / time):", "", "| B | Hkv | lengths | lesson06 | SDPA + mask |",
                  "|---|---|---|---|---|"]
        for x in ragged:
            lines.append(f"| {x['B']} | {x['Hkv']} | {x['lengths'][0]} … {x['lengths'][-1]} | {f(x['lesson06_gbps'])} | "
                         f"{f(x['sdpa_mask_gbps'])} |")
    return "\n".join(lines) + "\n", misses


def merge_results(path, rows):
    """benchmarks/results.json with every earlier "decode" row replaced by `rows`, every other row kept."""
    old = json.loads(path.read_text()) if path.exists() else []
    kept = [r for r in old if r.get("mode") != "decode"]
    path.write_text(json.dumps(kept + rows, indent=1) + "\n")
    return len(old) - len(kept), len(kept)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the results, plots and summary")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes in Triton's interpreter, on the CPU")
    parser.add_argument("--no-repo", action="store_true", help="don't update benchmarks/ (results.json, plots)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ref = load(args.dry_run)
    import torch
    if not args.dry_run and not torch.cuda.is_available():
        sys.exit("bench_decode needs a CUDA GPU (or --dry-run)")
    started = time.time()
    grid = DRY_GRID if args.dry_run else GPU_GRID
    rows, graph_rows = run_grid(ref, grid, args.dry_run)
    ragged = run_ragged(ref, grid, args.dry_run)
    rows = [{k: r.get(k) for k in ROW_KEYS} | ({"error": r["error"]} if "error" in r else {}) for r in rows]
    probe = next((r["gbps"] for r in rows if r["impl"] == "read-probe"), None)
    (out / "decode_results.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "decode_results_cudagraph.json").write_text(json.dumps(graph_rows, indent=1) + "\n")
    (out / "decode_ragged.json").write_text(json.dumps(ragged, indent=1) + "\n")
    text, misses = summary(rows, graph_rows, ragged, probe)
    head = (f"# Lesson 06 decode benchmark\n\n{rows[-1]['gpu']}, torch {rows[-1]['torch']}, triton "
            f"{rows[-1]['triton']}, `python -m benchmarks.bench_decode` ({time.time() - started:.0f} s).\n\n")
    (out / "decode_summary.md").write_text(head + text)
    plots = plot(rows, out, probe)
    results = out / "results.json"  # the merged file, also in DIR (what a GPU run brings back)
    shutil.copy(HERE / "results.json", results) if (HERE / "results.json").exists() else None
    replaced, kept = merge_results(results, rows)
    if not args.dry_run and not args.no_repo:
        shutil.copy(results, HERE / "results.json")
        for path in plots + [out / "decode_summary.md"]:
            shutil.copy(path, HERE / path.name)
    print(text)
    print(f"{len(rows)} rows ({replaced} earlier decode rows replaced, {kept} other rows kept) in {results}; "
          f"{len(plots)} plots; {time.time() - started:.0f} s" + ("" if args.dry_run or args.no_repo
                                                                 else "; benchmarks/ updated"))
    if misses:
        print(f"§7 targets missed at {len(misses)} points (see the summary)")


if __name__ == "__main__":
    main()

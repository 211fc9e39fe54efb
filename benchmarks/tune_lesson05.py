"""Tune and check lesson 05's FlashAttention-2 kernels (the reference solution) on a GPU.

    python benchmarks/tune_lesson05.py                       # everything: check every config, time, summarise
    python benchmarks/tune_lesson05.py --kernels fwd         # one kernel family (fwd, dkdv, dq)
    python benchmarks/tune_lesson05.py --head-dims 128 --n 8192 --jobs 16
    python benchmarks/tune_lesson05.py --report-only         # the table in the notebook against SDPA, no search
    python benchmarks/tune_lesson05.py --kernels dkdv --no-report   # search only (each run fits in ~5 minutes)
    python benchmarks/tune_lesson05.py --device cpu --quick  # a smoke test of this script in Triton's interpreter

The kernels come from the lesson's source notebook (grader/source/05_flash_attention_v2/...), through the same
`grader.notebook.reference_program` the grader uses, so what is tuned is exactly what is graded.

1. Correctness of EVERY candidate config (COURSE_SPEC §8: block sizes can silently break a kernel): each config of
   FWD_CONFIGS / BWD_DKDV_CONFIGS / BWD_DQ_CONFIGS, for each head dim and causal/not, runs forward (+ backward for
   the backward kernels) on ragged shapes against an fp32 PyTorch reference; the fallback tables (OTHER_CONFIGS,
   SMALL_CONFIGS) and fp32/bf16 inputs too. This runs in --jobs parallel processes, which also compiles every
   kernel into Triton's cache before timing.
2. Timing of every config that passed, fp16, B=4, H=32 (d=64) / H=16 (d=128), N=--n: forward time for fwd
   configs; full backward time for dkdv configs (dq at its current table value) and for dq configs (dkdv at the
   best one just found).
3. A paste-ready HOPPER_CONFIGS table (for the `configs` cell of the source notebook), then a report of the tuned
   kernels against SDPA's flash and cuDNN backends at N = 4096, 8192, 16384 with the course's targets
   (forward >= 1.3x flash, backward >= 1.1x flash).
"""
import argparse
import concurrent.futures as futures
import json
import math
import multiprocessing
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "grader" / "source" / "05_flash_attention_v2" / "05_flash_attention_v2.ipynb"
KINDS = ("fwd", "dkdv", "dq")
FA = None  # the reference module, loaded once per process


def load_reference(device):
    """Import the reference solution of lesson 05 as a module (MODE from FA_MODE, as in the grader's workers)."""
    global FA
    if FA is not None:
        return FA
    os.environ["FA_QUIET"] = "1"
    os.environ["FA_MODE"] = "gpu" if device == "cuda" else "interpreter"
    if device != "cuda":
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(ROOT))
    from grader import notebook
    FA = notebook.import_reference("05_flash_attention_v2", SOURCE)
    return FA


def candidates(fa, kind):
    return {"fwd": fa.FWD_CONFIGS, "dkdv": fa.BWD_DKDV_CONFIGS, "dq": fa.BWD_DQ_CONFIGS}[kind]


def heads_for(d):
    return 32 if d <= 64 else 16


# ── correctness (runs in worker processes) ───────────────────────────────────────────────────────────
def _reference(q, k, v, causal, dout):
    import torch
    qf, kf, vf = (x.detach().float().requires_grad_(True) for x in (q, k, v))
    s = (qf @ kf.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    o = torch.softmax(s, -1) @ vf
    grads = torch.autograd.grad(o, (qf, kf, vf), dout.float()) if dout is not None else None
    return o.detach(), grads


def _max_rel_error(got, exact):
    return ((got.float() - exact).abs().max() / exact.abs().max().clamp_min(1.0)).item()


POISONED = False  # an earlier task left this process unusable (a CUDA error; any error in the interpreter)


def check_config(device, kind, d, causal, config, dtype_name, bench_n, shapes):
    """(status, message): status is "ok", "wrong", "error", "no-fit", or "retry" (run it in a fresh process)."""
    global POISONED
    if POISONED:
        return "retry", "this worker process was poisoned by an earlier failure"
    status, message = _check_config(device, kind, d, causal, config, dtype_name, bench_n, shapes)
    if status == "error" and (device != "cuda" or "CUDA" in message or "illegal" in message):
        POISONED = True
    return status, message


def _check_config(device, kind, d, causal, config, dtype_name, bench_n, shapes):
    import torch
    import triton
    fa = load_reference(device)
    dtype = getattr(torch, dtype_name)
    tol = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 2e-3}[dtype_name]
    try:
        with fa.use_config(**({kind: tuple(config)} if config is not None else {})):
            worst = 0.0
            for B, H, N in shapes:
                torch.manual_seed(N)
                q, k, v = (torch.randn(B, H, N, d, device=device, dtype=dtype) for _ in range(3))
                dout = torch.randn_like(q) if kind != "fwd" else None
                qg, kg, vg = (x.clone().requires_grad_(kind != "fwd") for x in (q, k, v))
                out = fa.flash_attention(qg, kg, vg, causal)
                exact_out, exact_grads = _reference(q, k, v, causal, dout)
                errors = [_max_rel_error(out, exact_out)]
                if dout is not None:
                    out.backward(dout)
                    errors += [_max_rel_error(g, e) for g, e in zip((qg.grad, kg.grad, vg.grad), exact_grads)]
                bad = [e for e in errors if not e <= tol]  # NaN fails too
                worst = max([worst] + [e if e == e else float("inf") for e in errors])
                if bad:
                    return "wrong", f"shape {(B, H, N, d)}: relative errors {['%.2g' % e for e in errors]} (allowed {tol})"
            if bench_n and device == "cuda":  # compile the timing shape's specialisation now, in parallel
                q, k, v = (torch.randn(1, 1, bench_n, d, device=device, dtype=dtype, requires_grad=kind != "fwd")
                           for _ in range(3))
                out = fa.flash_attention(q, k, v, causal)
                if kind != "fwd":
                    out.backward(torch.randn_like(out))
                torch.cuda.synchronize()
        return "ok", f"max relative error {worst:.2g}"
    except triton.runtime.errors.OutOfResources as error:
        return "no-fit", str(error)
    except Exception as error:  # a compile error, an illegal access, …
        return "error", f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:200] if str(error).strip() else ''}"


def _worker_init(device):
    load_reference(device)


# ── timing (main process) ────────────────────────────────────────────────────────────────────────────
def tflops(ms, B, H, N, d, causal, backward):
    return 4 * B * H * N * N * d * (0.5 if causal else 1.0) * (2.5 if backward else 1.0) / ms * 1e-9


def time_ours(fa, d, causal, n, backward, configs=None, device="cuda"):
    import torch
    import triton
    B, H = (4, heads_for(d)) if device == "cuda" else (1, 1)
    q, k, v = (torch.randn(B, H, n, d, device=device, dtype=torch.float16, requires_grad=backward) for _ in range(3))
    with fa.use_config(**(configs or {})):
        if not backward:
            fn = lambda: fa.flash_attention(q, k, v, causal)
        else:
            out = fa.flash_attention(q, k, v, causal)
            do = torch.randn_like(out)
            fn = lambda: out.backward(do, retain_graph=True)
        if device != "cuda":
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        return triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=(q, k, v) if backward else None)


def time_sdpa(backend, d, causal, n, backward):
    import torch
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, H = 4, heads_for(d)
    q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=torch.float16, requires_grad=backward) for _ in range(3))
    with sdpa_kernel(getattr(SDPBackend, backend)):
        run = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if not backward:
            return triton.testing.do_bench(run, warmup=25, rep=100)
        out = run()
        do = torch.randn_like(out)
        return triton.testing.do_bench(lambda: out.backward(do, retain_graph=True), warmup=25, rep=100,
                                       grad_to_none=(q, k, v))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", nargs="*", default=list(KINDS), choices=KINDS)
    parser.add_argument("--head-dims", nargs="*", type=int, default=[64, 128])
    parser.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    parser.add_argument("--n", type=int, default=8192, help="sequence length of the timing runs")
    parser.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="a few configs per kernel only (smoke test)")
    parser.add_argument("--report-only", action="store_true", help="skip the search: report the current table")
    parser.add_argument("--report-n", nargs="*", type=int, default=[4096, 8192, 16384])
    parser.add_argument("--no-report", action="store_true", help="skip the final comparison with SDPA")
    parser.add_argument("--save", help="also write the winners as JSON, for `bench.py --configs` in the same session")
    args = parser.parse_args()
    device = args.device
    fa = load_reference(device)
    import torch
    import triton
    if device == "cuda":
        print(f"GPU {torch.cuda.get_device_name()} (sm_{''.join(map(str, torch.cuda.get_device_capability()))}), "
              f"torch {torch.__version__}, triton {triton.__version__}", flush=True)
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    # ragged lengths (not multiples of any block): one compiled specialisation per config; N=1 (a specialisation
    # of its own) is checked for the tables' configs below and by the grader's tests
    ragged = ((2, 3, 1000), (1, 2, 131)) if device == "cuda" else ((1, 1, 37),)
    ragged_small = ((1, 2, 1), (2, 3, 1000)) if device == "cuda" else ((1, 1, 37),)
    bench_n = args.n if device == "cuda" else 64

    # 1. correctness of every candidate, in parallel (this also fills Triton's compile cache)
    tasks = []
    for kind in args.kernels:
        configs = candidates(fa, kind)
        if args.quick:
            configs = configs[:: max(1, len(configs) // 3)][:3]
        for d in args.head_dims:
            for causal in causals:
                for config in configs:
                    tasks.append((kind, d, causal, tuple(config), "float16", bench_n, ragged))
    # the fallback tables and the other dtypes, once each
    for kind in args.kernels:
        for table in (fa.OTHER_CONFIGS, fa.SMALL_CONFIGS):
            for d in (32, 64, 80, 128) if device == "cuda" else (24,):
                tasks.append((kind, d, True, tuple(table[kind]), "float16", 0, ragged_small))
        for d in (64, 128) if device == "cuda" else (32,):
            if device == "cuda":  # bf16 tl.dot is wrong in the interpreter
                tasks.append((kind, d, False, None, "bfloat16", 0, ragged_small))
            tasks.append((kind, d, True, None, "float32", 0, ragged_small))
            tasks.append((kind, d, False, None, "float16", 0, ragged_small))  # the current Hopper table
    if args.report_only:
        tasks = [t for t in tasks if t[3] is None]
    print(f"checking {len(tasks)} (kernel, head dim, causal, config, dtype) cases with {args.jobs} processes…", flush=True)
    started = time.time()
    results = {}
    context = multiprocessing.get_context("spawn")
    pending = tasks
    for _ in range(4):  # tasks that met a poisoned worker run again in fresh processes
        with futures.ProcessPoolExecutor(args.jobs, mp_context=context, initializer=_worker_init,
                                         initargs=(device,)) as pool:
            jobs = {pool.submit(check_config, device, *task): task for task in pending}
            for job in futures.as_completed(jobs):
                task = jobs[job]
                try:
                    results[task] = job.result()
                except Exception as error:  # the worker process died
                    results[task] = ("retry", f"worker died: {type(error).__name__}: {error}")
        pending = [t for t in pending if results[t][0] == "retry"]
        if not pending:
            break
    for task in pending:
        results[task] = ("error", results[task][1])
    print(f"  done in {time.time() - started:.0f} s", flush=True)
    failures = [(t, r) for t, r in results.items() if r[0] in ("wrong", "error")]
    for (kind, d, causal, config, dtype, _, _), (status, message) in sorted(failures, key=str):
        print(f"  ✗ {status:5} {kind:4} d={d:<3} causal={causal!s:5} {config} {dtype}: {message}")
    nofit = sum(1 for r in results.values() if r[0] == "no-fit")
    print(f"  {len(results) - len(failures) - nofit} correct, {len(failures)} WRONG or failing, {nofit} do not fit "
          "this GPU's shared memory", flush=True)
    if failures:
        print("  !! every config in a candidate list must be correct: remove the failing ones from the lists in the "
              "notebook's `configs` cell (or fix the kernel) before using them")

    # 2. time every correct config
    best = {}
    if not args.report_only:
        for kind in args.kernels:
            for d in args.head_dims:
                for causal in causals:
                    timings = []
                    for config in candidates(fa, kind):
                        key = (kind, d, causal, tuple(config), "float16", bench_n, ragged)
                        if results.get(key, ("skip",))[0] != "ok":
                            continue
                        chosen = {kind: tuple(config)}
                        if kind == "dq" and ("dkdv", d, causal) in best:
                            chosen["dkdv"] = best[("dkdv", d, causal)][1]
                        try:
                            ms = time_ours(fa, d, causal, bench_n, kind != "fwd", chosen, device)
                        except Exception as error:
                            print(f"  {kind} d={d} causal={causal} {config}: {type(error).__name__} while timing")
                            continue
                        timings.append((ms, tuple(config)))
                    if not timings:
                        continue
                    timings.sort()
                    best[(kind, d, causal)] = timings[0]
                    table = fa.HOPPER_CONFIGS.get((kind, d, causal))
                    current = next((ms for ms, c in timings if c == table), None)
                    top = ", ".join(f"{c}: {ms:.3f} ms" for ms, c in timings[:5])
                    print(f"{kind:4} d={d:<3} causal={causal!s:5} N={bench_n}: best {top}"
                          + (f" | table {table}: {current:.3f} ms" if current else f" | table {table}: not timed"),
                          flush=True)
        print("\nPaste into HOPPER_CONFIGS (the notebook's `configs` cell), replacing the matching entries:")
        for (kind, d, causal), (ms, config) in sorted(best.items(), key=str):
            print(f"    ({kind!r}, {d}, {causal}): {config},")
        if args.save:
            Path(args.save).write_text(json.dumps([[*key, list(config)] for key, (ms, config) in best.items()]))

    # 3. report: the tuned table (plus the winners above) against SDPA
    if device != "cuda" or args.no_report:
        return
    overrides = lambda d, causal: {k: best[(k, d, causal)][1] for k in KINDS if (k, d, causal) in best}
    print("\nTFLOP/s, fp16, B=4, H=32 (d=64) / 16 (d=128); ratio = ours / SDPA flash (targets: fwd 1.3, bwd 1.1)")
    for d in args.head_dims:
        for causal in causals:
            for backward in (False, True):
                for n in args.report_n:
                    ours = tflops(time_ours(fa, d, causal, n, backward, overrides(d, causal)), 4, heads_for(d), n, d,
                                  causal, backward)
                    row = {}
                    for backend in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
                        try:
                            row[backend] = tflops(time_sdpa(backend, d, causal, n, backward), 4, heads_for(d), n, d,
                                                  causal, backward)
                        except Exception:
                            row[backend] = float("nan")
                    ratio = ours / row["FLASH_ATTENTION"]
                    target = 1.1 if backward else 1.3
                    print(f"  {'bwd' if backward else 'fwd'} d={d:<3} {'causal' if causal else 'full  '} N={n:<6} "
                          f"ours {ours:6.0f}  flash {row['FLASH_ATTENTION']:6.0f}  cuDNN {row['CUDNN_ATTENTION']:6.0f}  "
                          f"ratio {ratio:4.2f} {'ok' if ratio >= target else 'BELOW TARGET'}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(1)
    except Exception:
        traceback.print_exc()
        sys.exit(1)

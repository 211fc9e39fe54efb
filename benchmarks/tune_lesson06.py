"""Tune lesson 06's decode kernel (the reference solution) on a GPU: the (BLOCK_N, num_warps, num_stages) table per
head dim and cache layout, then the split rule's WAVES.

    python benchmarks/tune_lesson06.py                  # d = 128 (about 1.5 minutes on an H200)
    python benchmarks/tune_lesson06.py --head-dims 128 64 --jobs 8
    python benchmarks/tune_lesson06.py --dry-run        # a smoke test of this script in Triton's interpreter (CPU)

The kernel comes from the lesson's source notebook (grader/source/06_flash_decoding/...), through the same
`grader.notebook` code the grader uses, so what is tuned is exactly what is graded.

1. Correctness of EVERY candidate (COURSE_SPEC §8: a fast config that is wrong must never win): for each head dim
   (--head-dims), layout (contiguous; paged, page size 16, then 256 checked too) and candidate, flash_decode runs on small
   ragged batches (GQA, Mq = 1 and 3, num_splits 1, 7 and the rule's) against lesson 06's float64 `decode_reference`.
   This runs in --jobs processes, which also compiles every candidate into Triton's cache for the timing shapes.
2. Timing (fp16, Hq = 32, Hkv = 8, d as tuned): the geometric mean of GB/s over B=1 N=64k, B=8 N=16k, B=32 N=4k,
   num_splits from the rule, for every candidate that passed.
3. WAVES (programs per SM in one wave, which the split rule fills) in {1, 2, 4, 8} with the tuned table, over a few
   grid points with Hkv = 8 and 32 (contiguous cache).
4. A paste-ready DECODE_CONFIGS table and WAVES for the notebook's cells.
"""
import argparse
import concurrent.futures as futures
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LESSON = "06_flash_decoding"
REF = None  # the reference module, loaded once per process
GPU_CANDIDATES = [(bn, w, s) for bn in (32, 64, 128) for w in (2, 4) for s in (2, 3)]
DRY_CANDIDATES = [(32, 4, 1), (64, 4, 1)]


def load(dry_run):
    global REF
    if REF is None:
        os.environ.update(FA_QUIET="1", FA_MODE="interpreter" if dry_run else "gpu")
        if dry_run:
            os.environ["TRITON_INTERPRET"] = "1"
        sys.path.insert(0, str(ROOT))
        from grader import notebook
        from grader.harness import source_path
        REF = notebook.import_reference(LESSON, source_path(LESSON))
    return REF


def set_config(ref, block_d, paged, config, dry_run):
    if dry_run:
        ref.INTERPRETER_CONFIG = tuple(config)   # the interpreter path ignores the GPU table
    else:
        ref.DECODE_CONFIGS[(block_d, paged)] = tuple(config)


def timing_shapes(dry_run):
    return [(1, 256), (2, 128)] if dry_run else [(1, 65536), (8, 16384), (32, 4096)]


def make_case(ref, B, hq, hkv, mq, lengths, d, page_size, device, dtype, seed):
    import torch
    gen = torch.Generator(device="cpu").manual_seed(seed)
    capacity = max(lengths)
    q = torch.randn(B, hq, mq, d, generator=gen).to(dtype).to(device)
    k, v = (torch.randn(B, hkv, capacity, d, generator=gen).to(dtype).to(device) for _ in range(2))
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
    if not page_size:
        return q, k, v, seqlens, None
    pages = -(-capacity // page_size)
    order = torch.randperm(B * pages + 2, generator=gen)
    table = order[:B * pages].view(B, pages).to(torch.int32).to(device)
    pool = [torch.full((B * pages + 2, page_size, hkv, d), float("nan"), dtype=dtype, device=device) for _ in range(2)]
    for t, src in zip(pool, (k, v)):
        padded = torch.zeros(B, hkv, pages * page_size, d, dtype=dtype, device=device)
        padded[:, :, :capacity] = src
        t[table.long()] = padded.transpose(1, 2).reshape(B, pages, page_size, hkv, d)
    return q, pool[0], pool[1], seqlens, table


def check_config(task):
    """(task, None) if the config gives float64 attention's results on small ragged batches (and warms Triton's
    cache for the timing shapes), else (task, what went wrong)."""
    head_dim, page_size, config, dry_run = task
    import torch
    ref = load(dry_run)
    device = "cpu" if dry_run else "cuda"
    dtype = torch.float32 if dry_run else torch.float16
    block_d = max(16, 1 << (head_dim - 1).bit_length())
    set_config(ref, block_d, bool(page_size), config, dry_run)
    pages = [page_size] if not page_size or dry_run else [page_size, 256]
    cases = [(3, 8, 2, 1, [1, 300, 1000], None), (2, 8, 2, 3, [77, 640], 7), (1, 32, 8, 1, [2049], None),
             (2, 4, 4, 1, [129, 1000], 1)]
    if dry_run:
        cases = [(2, 4, 2, 1, [1, 70], None), (1, 4, 1, 3, [45], 3)]
    try:
        for ps in pages:
            for i, (B, hq, hkv, mq, lengths, splits) in enumerate(cases):
                q, k, v, seqlens, table = make_case(ref, B, hq, hkv, mq, lengths, head_dim, ps, device, dtype, i)
                out = ref.flash_decode(q, k, v, seqlens, table, num_splits=splits)
                exact = ref.decode_reference(q, k, v, seqlens, table)
                err = (out.double().cpu() - exact).abs().max().item()
                if not err <= (1e-4 if dry_run else 1e-2):
                    return task, f"page_size={ps}, B={B}, Hq={hq}, Hkv={hkv}, Mq={mq}, lengths={lengths}: max error {err:.3g}"
        if not dry_run:   # compile the timing shapes' specializations into Triton's cache
            for B, n in timing_shapes(dry_run):
                q = torch.randn(B, 32, 1, head_dim, device=device, dtype=dtype)
                k, v, seqlens, table = timing_cache(B, n, head_dim, page_size, device, dtype)
                ref.flash_decode(q, k, v, seqlens, table)
                del k, v
            torch.cuda.synchronize()
    except Exception as error:  # e.g. out of shared memory
        return task, f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    return task, None


def timing_cache(B, n, d, page_size, device, dtype, hkv=8):
    import torch
    seqlens = torch.full((B,), n, dtype=torch.int32, device=device)
    if not page_size:
        return (*(torch.randn(B, hkv, n, d, device=device, dtype=dtype) for _ in range(2)), seqlens, None)
    pages = -(-n // page_size)
    table = torch.randperm(B * pages, device=device).view(B, pages).to(torch.int32)
    return (*(torch.randn(B * pages, page_size, hkv, d, device=device, dtype=dtype) for _ in range(2)), seqlens, table)


def measure(fn, dry_run):
    if dry_run:
        fn()
        started = time.perf_counter()
        fn()
        return (time.perf_counter() - started) * 1e3
    from triton.testing import do_bench
    return do_bench(fn, warmup=10, rep=40)


def gbps_of(ref, B, n, hkv, d, page_size, dry_run, hq=32):
    import torch
    device = "cpu" if dry_run else "cuda"
    dtype = torch.float32 if dry_run else torch.float16
    q = torch.randn(B, hq, 1, d, device=device, dtype=dtype)
    k, v, seqlens, table = timing_cache(B, n, d, page_size, device, dtype, hkv)
    ms = measure(lambda: ref.flash_decode(q, k, v, seqlens, table), dry_run)
    return 2 * B * hkv * n * d * 2 / ms / 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--head-dims", type=int, nargs="*", default=[128],
                        help="head dims to tune (the notebook's table also has 64: --head-dims 128 64, twice as long)")
    parser.add_argument("--jobs", type=int, default=12, help="processes for the correctness runs (and compiles)")
    parser.add_argument("--dry-run", action="store_true", help="tiny shapes in Triton's interpreter, on the CPU")
    args = parser.parse_args(argv)
    started = time.time()
    dry = args.dry_run
    head_dims = [16] if dry else args.head_dims
    candidates = DRY_CANDIDATES if dry else GPU_CANDIDATES
    layouts = [0, 8] if dry else [0, 16]
    ref = load(dry)
    original = (dict(ref.DECODE_CONFIGS), ref.WAVES)
    if not dry:
        import torch
        if not torch.cuda.is_available():
            sys.exit("tune_lesson06 needs a CUDA GPU (or --dry-run)")
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    tasks = [(d, ps, c, dry) for d in head_dims for ps in layouts for c in candidates]
    print(f"1. correctness of {len(tasks)} (head dim, layout, config) candidates, {args.jobs if not dry else 1} "
          "processes", flush=True)
    failed = {}
    if dry:
        results = map(check_config, tasks)
    else:
        pool = futures.ProcessPoolExecutor(max_workers=args.jobs, mp_context=multiprocessing.get_context("spawn"))
        results = pool.map(check_config, tasks)
    for done, (task, problem) in enumerate(results, 1):
        if problem:
            failed[task] = problem
            print(f"   ✗ d={task[0]} {'paged ' + str(task[1]) if task[1] else 'contiguous'} {task[2]}: {problem}",
                  flush=True)
        if done % 12 == 0 or done == len(tasks):
            print(f"   {done}/{len(tasks)} checked, {len(failed)} wrong ({time.time() - started:.0f} s)", flush=True)
    if not dry:
        pool.shutdown()
    print("2. timing (GB/s, fp16, Hq=32, Hkv=8; geometric mean over " +
          ", ".join(f"B={B} N={n}" for B, n in timing_shapes(dry)) + ")", flush=True)
    best = {}
    for d in head_dims:
        block_d = max(16, 1 << (d - 1).bit_length())
        for ps in layouts:
            scores = []
            for config in candidates:
                if (d, ps, config, dry) in failed:
                    continue
                set_config(ref, block_d, bool(ps), config, dry)
                speeds = [gbps_of(ref, B, n, 8 if not dry else 2, d, ps, dry) for B, n in timing_shapes(dry)]
                scores.append((math.exp(sum(map(math.log, speeds)) / len(speeds)), config, speeds))
            scores.sort(reverse=True)
            label = f"d={d} {'paged ' + str(ps) if ps else 'contiguous'}"
            for score, config, speeds in scores[:5]:
                print(f"   {label:20} BLOCK_N={config[0]:3} warps={config[1]} stages={config[2]}: {score:6.0f} GB/s "
                      f"({', '.join(f'{s:.0f}' for s in speeds)})", flush=True)
            if scores:
                best[(block_d, bool(ps))] = scores[0][1]
                set_config(ref, block_d, bool(ps), scores[0][1], dry)
    print(f"3. WAVES with the tuned table ({time.time() - started:.0f} s)", flush=True)
    points = ([(2, 1, 256), (4, 2, 128)] if dry else
              [(8, 1, 16384), (8, 1, 131072), (8, 8, 16384), (8, 32, 4096), (32, 1, 65536), (32, 8, 16384)])
    d = head_dims[0]
    wave_scores = {}
    for waves in (1, 2, 4, 8):
        ref.WAVES = waves
        speeds = [gbps_of(ref, B, n, hkv, d, 0, dry) for hkv, B, n in points]
        wave_scores[waves] = math.exp(sum(map(math.log, speeds)) / len(speeds))
        print(f"   WAVES={waves}: {wave_scores[waves]:6.0f} GB/s geometric mean ("
              + ", ".join(f"Hkv={h} B={B} N={n}: {s:.0f}" for (h, B, n), s in zip(points, speeds)) + ")", flush=True)
    best_waves = max(wave_scores, key=wave_scores.get)
    print("4. paste into the notebook's cells (grader/source/06_flash_decoding):")
    table = ", ".join(f"({bd}, {paged}): {c}" for (bd, paged), c in sorted(best.items()))
    print(f"DECODE_CONFIGS = {{{table}}}")
    print(f"WAVES = {best_waves}")
    print(f"(the notebook has DECODE_CONFIGS = {original[0]} and WAVES = {original[1]}; {len(failed)} candidate(s) "
          f"were wrong; {time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()

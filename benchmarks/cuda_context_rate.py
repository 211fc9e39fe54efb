"""How fast one GPU gives new processes a CUDA context when many ask at once, as a class's graders do.

    python3 -m benchmarks.cuda_context_rate [--counts 1 4 12 24 48] [--repeat 2]

A grading worker is a fork of a zygote that imported torch but never touched CUDA (grader/worker.py); its start is
the fork, the context (worker._one_hardware_queue and _blocking_sync, torch.cuda.init, a first tensor) and its first
kernels. This forks K such children at once and times each child's start, with every child alive until all have
started (in a class the workers overlap the same way). If the rate (starts per second over the whole batch) stops
growing with K, the driver hands out contexts one at a time, and a class is bounded by how many contexts its checks
need, not by cores.

The workers' settings are the default here (one hardware queue per context); run with an environment variable set
to compare others, e.g. CUDA_DEVICE_MAX_CONNECTIONS=8 (the driver's own default) or CUDA_MODULE_LOADING=EAGER (every
module loaded at context creation). `--fork-only` times the same children with no CUDA at all (a CPU tensor op
instead): what the fork and a first torch call cost by themselves.
The cuInit column is the part of a context's time spent opening the driver (cuInit, before any context); the exit
column is the time from releasing the batch until every child is reaped: the contexts' teardown.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child(report, release, fork_only):
    try:
        line = start_without_cuda() if fork_only else start_one()
    except Exception as error:  # no GPU, or the driver refused: said once by the parent
        line = f"error {type(error).__name__}: {error}".replace("\n", " ")
    os.write(report, (line + "\n").encode())
    os.read(release, 1)  # stay alive (and hold the context) until every child has started
    os._exit(0)


def start_one():
    from grader import worker
    import torch
    started = time.perf_counter()
    worker._one_hardware_queue()
    worker._blocking_sync()  # cuInit and the primary context's flags: the driver opened, no context yet
    driver = time.perf_counter()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    context = time.perf_counter()
    x = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    (torch.softmax(x @ x.T, dim=-1) @ x).float().sum().item()  # a check's first kernels: their modules load now
    done = time.perf_counter()
    return f"{context - started:.4f} {done - context:.4f} {driver - started:.4f}"


def start_without_cuda():
    import torch
    started = time.perf_counter()
    x = torch.randn(256, 256)
    (torch.softmax(x @ x.T, dim=-1) @ x).sum().item()
    return f"{time.perf_counter() - started:.4f} 0 0"


def batch(count, fork_only=False):
    import torch  # imported before the fork, as in the zygote; CUDA stays untouched here
    assert not torch.cuda.is_initialized()
    report_r, report_w = os.pipe()
    release_r, release_w = os.pipe()
    started = time.perf_counter()
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(report_r)
            os.close(release_w)
            child(report_w, release_r, fork_only)
        pids.append(pid)
    os.close(report_w)
    os.close(release_r)
    lines, buffer = [], b""
    while len(lines) < count:
        chunk = os.read(report_r, 4096)
        if not chunk:
            break
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        lines += complete
    wall = time.perf_counter() - started
    released = time.perf_counter()
    os.write(release_w, b"x" * count)
    for pid in pids:
        os.waitpid(pid, 0)
    exited = time.perf_counter() - released
    os.close(report_r)
    os.close(release_w)
    errors = [line.decode() for line in lines if line.startswith(b"error")]
    if errors or len(lines) < count:
        sys.exit(f"{len(errors) or count - len(lines)} of {count} workers got no CUDA context: "
                 f"{errors[0] if errors else 'a worker died'} (this measures a GPU machine)")
    contexts = [float(line.split()[0]) for line in lines]
    first_ops = [float(line.split()[1]) for line in lines]
    inits = [float(line.split()[2]) for line in lines]
    return wall, contexts, first_ops, inits, exited


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 4, 12, 24, 48])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--fork-only", action="store_true", help="no CUDA in the children: the fork's own cost")
    args = parser.parse_args()
    setting = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                       if k in ("CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_MODULE_LOADING", "FA_CUDA_SYNC")) or \
        "the workers' defaults (CUDA_DEVICE_MAX_CONNECTIONS=1)"
    what = "starts without CUDA (a CPU torch op)" if args.fork_only else "CUDA context starts"
    print(f"# {what} of forked workers, {setting}", flush=True)
    print(f"{'at once':>8} {'run':>4} {'batch s':>8} {'starts/s':>9} {'context s (mean, max)':>22} "
          f"{'of it cuInit s':>15} {'first kernels s':>16} {'exit s':>7}")
    for count in args.counts:
        for run in range(1, args.repeat + 1):
            wall, contexts, first_ops, inits, exited = batch(count, args.fork_only)
            print(f"{count:>8} {run:>4} {wall:>8.2f} {count / wall:>9.1f} "
                  f"{statistics.mean(contexts):>10.2f}, {max(contexts):>9.2f} {statistics.mean(inits):>15.2f} "
                  f"{statistics.mean(first_ops):>16.2f} {exited:>7.2f}",
                  flush=True)


if __name__ == "__main__":
    main()

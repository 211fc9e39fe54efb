"""What a machine is doing while a class is graded, every few seconds, until it is killed (or --seconds pass):

    python3 benchmarks/machine_sampler.py OUT_DIR [--every 2] [--seconds 600] &

OUT_DIR/cpu_stat.txt   the time and /proc/stat's "cpu" line (busy and idle ticks: the CPU the machine spent)
OUT_DIR/processes.txt  the time, then for each kind of process (the worker of a check, a zygote, a judge's nbgrader,
                       ptxas, ...) how many are running (R), sleeping (S) or waiting on the disk or the driver (D):
                       a class whose cores are idle while its workers sleep is waiting for something, not computing
OUT_DIR/gpu_util.csv   nvidia-smi's utilisation and memory every 2 s (where nvidia-smi exists)
"""
import argparse
import collections
import os
import shutil
import subprocess
import time
from pathlib import Path


def kind(pid):
    """A short name for what process `pid` is, from its command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    words = [a.decode("utf-8", "replace") for a in argv if a]
    if not words:
        return None
    line = " ".join(words)
    if "worker.py" in line:
        return "zygote" if "--zygote" in line else "worker"
    program = os.path.basename(words[0])
    if program in ("ptxas", "cc", "gcc", "bwrap"):  # Triton's assembler, its C compiler, the sandbox
        return program
    for name in ("nbgrader", "ipykernel", "class_scale", "grading_stages", "pytest"):  # python scripts and modules
        if name in line:
            return name
    return program[:20]


def states():
    found = {}  # pid: (parent pid, state, kind)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[entry] = (fields[1], fields[0], kind(entry))
    counts = collections.Counter()
    for pid, (parent, state, name) in found.items():
        if name == "zygote" and found.get(parent, (None, None, None))[2] == "zygote":
            name = "worker"  # forked by a zygote: the same command line, a check's worker
        if name and state in "RSD":
            counts[(name, state)] += 1
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=600.0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    smi = None
    if shutil.which("nvidia-smi"):
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,utilization.gpu,memory.used", "--format=csv",
                                "-l", "2"], stdout=open(out / "gpu_util.csv", "w"), stderr=subprocess.DEVNULL)
    end = time.time() + args.seconds
    try:
        with open(out / "cpu_stat.txt", "a") as cpu, open(out / "processes.txt", "a") as procs:
            while time.time() < end:
                now = int(time.time())
                cpu.write(f"{now} {Path('/proc/stat').read_text().splitlines()[0]}\n")
                counts = states()
                names = sorted({name for name, _ in counts}, key=lambda n: -sum(counts[(n, s)] for s in "RSD"))
                procs.write(f"{now} " + " ".join(f"{n}:R{counts[(n, 'R')]}/S{counts[(n, 'S')]}/D{counts[(n, 'D')]}"
                                                 for n in names[:12]) + "\n")
                cpu.flush()
                procs.flush()
                time.sleep(args.every)
    finally:
        if smi:
            smi.terminate()


if __name__ == "__main__":
    main()

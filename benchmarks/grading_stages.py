"""Where the time of grading goes (issue 25, "Grading a class fast"): each stage measured on this machine.

    python benchmarks/grading_stages.py [--mode interpreter|gpu] [--repeat 3] [--lessons ID ...] [--skip ROW ...] --out FILE

Rows, each the median of --repeat runs where it is cheap:
  python + torch          a new Python importing torch (what every process that grades pays: judge, worker)
  + CUDA                  the same, then a CUDA context (gpu)
  kernel, empty cache     a new Python launching a small Triton kernel with an empty Triton cache: Triton's driver
                          helpers and the launcher built by the C compiler, the kernel compiled (gpu)
  kernel, warm cache      the same with the cache the first run left (gpu)
  judge import            python -c "import grader.harness" (torch, Triton, the grader)
  sandbox                 bubblewrap around a Python that does nothing
  worker, new process     a sandboxed worker ready to load a submission (python, torch, Triton imported)
  zygote start            a zygote ready to fork workers (what a submission's first check waits for)
  worker, forked          a worker forked from it (on a GPU with a CUDA context of its own)
  load                    executing a reference solution's program in a ready worker
  lesson LESSON           grading the lesson's reference solution (python -m grader check's work), with the sums of
                          its checks' time (FA_PROFILE): worker starts, loads, Triton compiles, the learner's and the
                          reference's calls, and the judge's own work (inputs, references, comparisons)
  nbgrader                `nbgrader autograde` of one reference submission, beside `grader check` of the same notebook
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader import harness, notebook, processes, sandbox  # noqa: E402
from grader.__main__ import reference_notebook  # noqa: E402
from tests.conftest import LESSONS  # noqa: E402

SMALL_KERNEL = """
import sys, time, torch, triton, triton.language as tl
@triton.jit
def add_one(X, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(X + offs, tl.load(X + offs, mask=offs < N) + 1, mask=offs < N)
x = torch.zeros(1000, device="cuda")
add_one[(8,)](x, 1000, BLOCK=128)
torch.cuda.synchronize()
"""


def median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run(argv, env=None):
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"{argv[:3]} failed ({done.returncode}):\n{done.stderr[-2000:]}")


def cpu_seconds():
    """CPU seconds the whole machine has been busy (user, nice, system, irq, softirq; /proc/stat): with nothing else
    running, what grading costs in CPU, the sandboxes' processes included (a killed sandbox's processes are never
    waited for, so getrusage would not see them)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def judge_cpu_seconds():
    """CPU seconds of this process: the judge (its threads make inputs, float64 references and comparisons)."""
    import resource
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def profile_sums(path, lesson):
    """{stage: check-seconds} of one lesson's grading from FA_PROFILE's lines (harness.Timings)."""
    sums = collections.Counter()
    specialisations = set()
    if not Path(path).exists():
        return sums
    for line in Path(path).read_text().splitlines():
        entry = json.loads(line)
        if entry["lesson"] != lesson:
            continue
        seconds, compiling = entry["seconds"], entry["compiling"]
        if entry["what"] == "cpu":  # CPU seconds of a zygote and every worker it forked (processes.Zygotes.close)
            sums["cpu: the judge" if entry["side"] == "judge" else "cpu: zygotes and their workers"] += seconds
        elif entry["what"] == "check":
            sums["checks"] += seconds
        elif entry["what"] == "zygote":  # started while the checks that need it wait (their "judge" time holds it)
            sums[f"zygote start ({entry['mode']}, waited for)"] += seconds
            for step, step_seconds in entry.get("steps", {}).items():  # inside the zygote: what took its time
                sums[f"zygote {entry['mode']}: {step}"] += step_seconds
        elif entry["what"] == "compile":  # one kernel's compile (or load from the submission's cache), already
            sums["compiles (kernels)"] += 1  # counted in its request's `compiling`
            specialisations.add((entry["side"], entry["kernel"], entry["key"]))
        elif entry["what"] == "start":
            sums[f"{entry['side']} start"] += seconds
        else:
            sums["compile"] += compiling
            sums[f"{entry['side']} {entry['what']}"] += seconds - compiling
    if specialisations:
        sums["compiles (distinct kernel specialisations)"] = len(specialisations)
    worker = sum(v for k, v in sums.items() if k != "checks" and not k.startswith(("zygote", "cpu", "compiles (")))
    sums["judge"] = sums["checks"] - worker  # inputs, references, comparisons, waiting for a slot
    return sums


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="interpreter")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lessons", nargs="*", default=LESSONS)
    parser.add_argument("--skip", nargs="*", default=[], help="rows to leave out: basics, lessons, nbgrader")
    parser.add_argument("--out")
    parser.add_argument("--profile", help="keep FA_PROFILE's lines (every worker start, request and check) here")
    parser.add_argument("--title", default="", help="a line on what was measured (the commit, before/after)")
    args = parser.parse_args()
    rows = []
    head = [f"# benchmarks/grading_stages.py --mode {args.mode} {args.title}".rstrip()]

    def row(stage, seconds, note=""):
        rows.append(f"{stage:<40} {seconds:8.2f} s  {note}".rstrip())
        print(rows[-1], flush=True)
        if args.out:  # written as it goes: a run stopped by a time limit keeps its rows
            Path(args.out).write_text("\n".join(head + rows) + "\n")

    python = sys.executable
    contained, why = sandbox.status(args.mode)
    work = Path(tempfile.mkdtemp(prefix="stages-"))
    if "basics" not in args.skip:
        row("python + torch", median_seconds(lambda: run([python, "-c", "import torch"]), args.repeat))
        if args.mode == "gpu":
            row("python + torch + CUDA", median_seconds(lambda: run(
                [python, "-c", "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"]), args.repeat))
            cache = work / "triton-cache"
            env = dict(os.environ, TRITON_CACHE_DIR=str(cache), TRITON_HOME=str(work / "triton-home"))
            script = work / "small_kernel.py"  # a file: Triton reads a kernel's source through inspect
            script.write_text(SMALL_KERNEL)
            started = time.perf_counter()
            run([python, str(script)], env)
            row("kernel, empty Triton cache", time.perf_counter() - started,
                "new python: torch, CUDA, Triton's driver helpers and launcher (C compiler), the kernel compiled")
            row("kernel, warm Triton cache", median_seconds(lambda: run([python, str(script)], env),
                                                            args.repeat), "the same with the cache it left")
        row("judge import", median_seconds(lambda: run([python, "-c", "import grader.harness"]), args.repeat))
        if contained:
            sandbox.prepare(work / "empty", "")
            argv = sandbox.command([python, "-c", "pass"], work / "empty", sandbox.environment(args.mode, "/tmp"),
                                   gpu=args.mode == "gpu")
            row("sandbox (bwrap + python)", median_seconds(lambda: run(argv), args.repeat))
        else:
            row("sandbox", 0.0, f"not contained: {why}")

        lesson = "03_per_query_kernel" if "03_per_query_kernel" in args.lessons else args.lessons[0]
        program = notebook.reference_program(notebook.read(harness.source_path(lesson)))

        def worker(zygote=None):
            return processes.Worker(args.mode, program, work / "w", work / "logs", zygote=zygote)

        row("worker, new process", median_seconds(lambda: worker().close(), args.repeat),
            "sandbox + python + torch + Triton" + (" + CUDA" if args.mode == "gpu" else ""))
        started = time.perf_counter()
        zygote = processes.Zygote(args.mode, program, work / "w", work / "logs")
        row("zygote start", time.perf_counter() - started, "sandbox + python + torch + Triton + what a first call "
            "imports (never CUDA)")
        row("worker, forked", median_seconds(lambda: worker(zygote).close(), args.repeat),
            "from the zygote" + (" + CUDA" if args.mode == "gpu" else ""))
        zygote.close()
        ready = worker()
        row(f"load ({lesson})", median_seconds(
            lambda: ready.request("load", {"key": "student", "path": ready.program_path}, timeout=120), args.repeat))
        ready.close()

    if "lessons" not in args.skip:
        profile = Path(args.profile) if args.profile else work / "profile.jsonl"
        os.environ["FA_PROFILE"] = str(profile)
        total = 0.0
        for lesson in args.lessons:
            path = work / f"{lesson}.ipynb"
            notebook.write(reference_notebook(lesson), path)
            started, cpu_before, judge_before = time.perf_counter(), cpu_seconds(), judge_cpu_seconds()
            report = harness.run_lesson(lesson, path, args.mode)
            seconds = time.perf_counter() - started
            cpu, judge_cpu = cpu_seconds() - cpu_before, judge_cpu_seconds() - judge_before
            total += seconds
            sums = profile_sums(profile, lesson)
            parts = ", ".join(f"{k} {v:.0f}" for k, v in sorted(sums.items(), key=lambda kv: -kv[1])
                              if k != "checks" and not k.startswith(("zygote ", "cpu", "compiles (")) and v >= 0.5)
            if sums["compiles (kernels)"]:
                parts += (f"; {sums['compiles (kernels)']:.0f} kernels compiled or loaded from the submission's "
                          f"cache, {sums['compiles (distinct kernel specialisations)']:.0f} distinct")
            zygote = ", ".join(f"{k.removeprefix('zygote ')} {v:.1f}" for k, v in sums.items()
                               if k.startswith("zygote ") and "waited" not in k)
            row(f"lesson {lesson}", seconds, f"{report.score:g}/{report.max_score:g}, {len(report.tests)} checks; "
                f"CPU {cpu:.0f} s (the machine's, busy; the judge's {judge_cpu:.0f}, the submission's zygotes and "
                f"workers' {sums['cpu: zygotes and their workers']:.0f}); check-seconds {sums['checks']:.0f}: {parts}" + (f"; inside its zygotes: {zygote}" if zygote else ""))
        row("course (the lessons above, one after another)", total)
        os.environ.pop("FA_PROFILE", None)

    if "nbgrader" not in args.skip:
        from grader import classroom
        lesson = args.lessons[0]
        course = classroom.new_course(work / "course", [lesson])
        classroom.submit(course, "reference", lesson, reference_notebook(lesson))
        started = time.perf_counter()
        classroom.autograde(course, lesson)
        nbgrader_total = time.perf_counter() - started
        started = time.perf_counter()
        run([python, "-m", "grader", "check", lesson,
             str(course / "submitted" / "reference" / lesson / f"{lesson}.ipynb"), "--mode", args.mode])
        check_total = time.perf_counter() - started
        row(f"nbgrader autograde ({lesson})", nbgrader_total, f"grader check of the same notebook: {check_total:.1f} s")

    head.append(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end, sandbox "
                f"{'on' if contained else 'off: ' + str(why)}; check-seconds add up the checks that run side by side")
    if args.out:
        Path(args.out).write_text("\n".join(head + rows) + "\n")


if __name__ == "__main__":
    main()

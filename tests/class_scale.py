"""Autograde a whole class with real nbgrader, as an instructor would, and check every grade (issue 6).

    python tests/class_scale.py --out DIR [--parallel 10] [--lessons 00_setup ...]

Per lesson: the reference solution, the untouched release and a few realistic wrong submissions from
tests/mutants (lesson 00 also gets an out-of-bounds store, graded FIRST in the same nbgrader process and
grading kernel as the others, and a second reference graded after it: a crashed CUDA context must not change
the grades after it). Each lesson is its own nbgrader course; its submissions are graded in shards
(grader.classroom.grade_shard, one nbgrader autograde each, many at once, one student per shard but for the
crash and the reference graded after it) and merged into its gradebook.

Writes DIR/class_scale.txt: every submission's score against what it must get (reference: full marks;
untouched: 0; a wrong one: the checks of its `caught_by` at 0), its shard's time, the throughput and the
slowest notebook. Exits 1 if any grade is wrong. Not a pytest file: it takes minutes (a GPU run is the point).
"""
import argparse
import concurrent.futures as futures
import json
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader import bytecode, classroom, notebook, notebook_setup  # noqa: E402
from grader.harness import source_path  # noqa: E402
from tests import mutants  # noqa: E402
from benchmarks.grading_stages import cpu_seconds  # noqa: E402
from tests.conftest import LESSONS  # noqa: E402
# wrong submissions per lesson (tests/mutants names); each must lose the points of its `caught_by` checks
WRONG = {
    "00_setup": ["no_store_mask", "contiguous_row_stride", "kernel_never_launched", "graded_function_renamed"],
    "01_pytorch_attention": ["causal_hides_diagonal", "sdpa_in_naive_attention", "causal_mask_on_cpu"],
    "02_tiled_simulator": ["acc_not_rescaled", "full_score_matrix", "masked_keys_zero"],
    "03_per_query_kernel": ["missing_rescale", "missing_d_mask", "torch_does_the_work"],
    "04_tiled_kernel_2d": ["causal_off_by_one", "wrapper_calls_sdpa"],
    "05_flash_attention_v2": ["delta_missing", "sdpa_does_the_work"],
    "06_flash_decoding": ["combine_without_lse_weights", "page_table_ignored", "sdpa_in_wrapper"],
}
CRASH = ("00_setup", "out_of_bounds_store")  # graded first in its shard: an illegal memory access on a GPU


def submissions(lesson, course, mode):
    """[(student, notebook, expectation)]; expectation: "full", "zero" or (the checks that must fail, those that must
    pass) of a wrong submission (tests/mutants: Mutant.expected).
    Mistakes that show only on a GPU (a CPU mask on a CUDA tensor) are left out in the other modes."""
    release = classroom.release(course, lesson)
    reference = notebook.filled(release, notebook.read(source_path(lesson)))
    found = [("reference", reference, "full"), ("untouched", release, "zero")]
    by_name = {m.name: m for m in mutants.load(lesson)}
    names = WRONG[lesson] + ([CRASH[1]] if lesson == CRASH[0] else [])
    for name in names:
        if by_name[name].gpu_only and mode != "gpu":
            continue
        path = mutants.write(lesson, by_name[name], Path(course) / f"{name}.ipynb")
        # the crash sorts first ("a_"), so every other student of its shard is graded after it
        student = ("a_" if (lesson, name) == CRASH else "wrong_") + name
        found.append((student, notebook.read(path), by_name[name].expected(mode)))
    if lesson == CRASH[0]:
        found.append(("z_reference_after_the_crash", reference, "full"))
    return found


def shard_count(course, lesson):
    """One student per shard, except that the crash (sorted first) and the reference after it (sorted last)
    share shard 0: with n students in n - 1 shards, shard 0 gets students 0 and n - 1 (grade_shard takes
    every (n-1)-th student), graded in that order by one nbgrader process and one grading kernel."""
    n = len(classroom.students(course, lesson))
    return max(1, n - 1) if lesson == CRASH[0] else n


def check_grades(course, lesson, expected):
    """[(student, score, max, ok, why)] from the lesson's gradebook; a grade that is not what it must be says why, with
    the first message of a check it lost that it should have kept."""
    from nbgrader.api import Gradebook
    rows = []
    with Gradebook(f"sqlite:///{Path(course) / 'gradebook.db'}") as gb:
        for student, expectation in expected.items():
            try:
                sub = gb.find_submission(lesson, student)
            except Exception:
                rows.append((student, None, None, False, "not graded" + first_failure(course, student, lesson)))
                continue
            grades = {g.name.removeprefix("test_"): (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades}
            score, top = sub.score, sub.max_score
            if expectation == "full":
                ok, why = score == top, "reference: full marks"
            elif expectation == "zero":
                ok, why = score == 0, "untouched: 0"
            else:
                caught, passes = expectation
                kept = sorted(c for c in caught if (grades.get(c) or (0, 0))[0] > 0)
                lost = sorted(c for c in passes if c in grades and grades[c][0] < grades[c][1])
                ok = not kept and not lost and score < top
                why = f"loses {', '.join(sorted(caught))}" + (f" (but kept {kept})" if kept else "") + (
                    f" (but lost {lost}, which it must pass)" if lost else "")
            if not ok:
                why += first_failure(course, student, lesson)
            rows.append((student, score, top, ok, why))
    return rows


def first_failure(course, student, lesson):
    """The first failing check's message in a graded notebook, or nbgrader's failure for that student (shard.json)."""
    shard = Path(course) / "shard.json"
    if shard.exists():
        failure = json.loads(shard.read_text()).get("failures", {}).get(student)
        if failure:
            return f" [nbgrader: {str(failure)[:300]}]"
    graded = Path(course) / "autograded" / student / lesson / f"{lesson}.ipynb"
    if graded.exists():
        for cell in notebook.read(graded).cells:
            for output in cell.get("outputs", []) if notebook.is_test(cell) else []:
                text = output.get("text", "") + output.get("evalue", "")
                if "❌" in text or output.get("output_type") == "error":
                    return f" [{' '.join(text.split())[:300]}]"
    return ""


def timeline(spans, parallel, wall):
    """When each shard started and ended (seconds from the start of grading), the last ones first: whether the class
    waited for one long shard at its end (a critical path) or for a machine kept busy to the end."""
    ended = sorted(spans.items(), key=lambda item: -item[1][1])
    busy = sum(end - start for start, end, _ in spans.values())
    lines = [f"shards: {len(spans)}, {busy:.0f} shard-seconds over {parallel} slots (an even spread would end at "
             f"{busy / max(1, parallel):.0f} s; the class took {wall:.0f} s). The last to end:"]
    for (lesson, index), (start, end, graded) in ended[:5]:
        lines.append(f"  {lesson} shard {index} ({', '.join(graded) or 'nothing graded'}): {start:.0f} s -> {end:.0f} s")
    return lines


def mean(values):
    return sum(values) / len(values) if values else 0.0


def cpu_account(profile, cpu, wall):
    """Where the class's CPU went: the machine's busy seconds (/proc/stat) against what its cores could give, and per
    lesson the judges' own CPU, the submissions' zygotes and workers' and their Triton compiles (FA_PROFILE)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    lines = [f"CPU: the machine was busy {cpu:.0f} CPU-seconds of the {cores * wall:.0f} its {cores} cores could give "
             f"({cpu / (cores * wall):.0%}); the rest is nbgrader, its kernels, the reference workers and the system"]
    per = {}
    for line in profile.read_text().splitlines() if profile.exists() else []:
        entry = json.loads(line)
        row = per.setdefault(entry["lesson"], {"judge": 0.0, "workers": 0.0, "compiles": 0, "compile s": 0.0,
                                               "distinct": set(), "starts": []})
        if entry["what"] == "start" and entry["side"] == "submission":
            row["starts"].append(entry["seconds"])
        elif entry["what"] == "cpu":
            row["judge" if entry["side"] == "judge" else "workers"] += entry["seconds"]
        elif entry["what"] == "compile" and entry["side"] == "submission":
            row["compiles"] += 1
            row["compile s"] += entry["seconds"]
            row["distinct"].add((entry["kernel"], entry["key"]))
    for lesson, row in sorted(per.items()):
        lines.append(f"  {lesson:<24} judges {row['judge']:6.0f} CPU-s, submissions' zygotes and workers "
                     f"{row['workers']:6.0f} CPU-s; {row['compiles']} submission kernels compiled or loaded "
                     f"({row['compile s']:.0f} s), {len(row['distinct'])} distinct; "
                     f"{len(row['starts'])} worker starts, {mean(row['starts']):.1f} s each")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--lessons", nargs="*", default=LESSONS)
    parser.add_argument("--crash-only", action="store_true",
                        help="lesson 00's crash and the reference graded after it, nothing else (a quick GPU run)")
    parser.add_argument("--parallel", type=int, default=max(1, (os.cpu_count() or 2) - 2),
                        help="nbgrader autograde processes at once")
    parser.add_argument("--cold", action="store_true",
                        help="time the machine's one-time preparation (Python bytecode) inside the class run")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="Object of type")  # SQLAlchemy chatter while merging gradebooks
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mode, reason = notebook_setup.detect_mode(os.environ.get("FA_GRADING_MODE", "auto"))
    # one GPU: the judges share it as autograde_class shares each GPU (classroom.shard_checks)
    checks = classroom.shard_checks(args.parallel) if mode == "gpu" else None
    log = [f"# python tests/class_scale.py: mode {mode} ({reason}), {args.parallel} nbgrader processes at once"
           + (f", {os.environ.get('FA_GRADING_JOBS') or checks} checks at once in each" if checks else "")]
    print(log[0], flush=True)
    started = time.time()
    courses, expected = {}, {}
    with futures.ThreadPoolExecutor(len(args.lessons)) as pool:  # one course (and gradebook) per lesson
        made = {lesson: pool.submit(classroom.new_course, out / "courses" / lesson, [lesson]) for lesson in args.lessons}
        for lesson, job in made.items():
            courses[lesson] = job.result()
    for lesson, course in courses.items():
        expected[lesson] = {}
        for student, nb, expectation in submissions(lesson, course, mode):
            if args.crash_only and not (student.startswith("a_") or student.startswith("z_")):
                continue
            classroom.submit(course, student, lesson, nb)
            expected[lesson][student] = expectation
    count = sum(len(e) for e in expected.values())
    log.append(f"released {len(courses)} lessons and collected {count} submissions in {time.time() - started:.0f} s")
    print(log[-1], flush=True)

    # Longest first, so that the class does not end waiting for a long shard started last: a shard of two students
    # (the crash and the reference after it) before the shards of one, then the slowest lessons (the later ones).
    tasks, students_in = [], {}
    for lesson in courses:
        count_shards = shard_count(courses[lesson], lesson)
        for i, students in enumerate(classroom.shards(courses[lesson], lesson, count_shards)):
            tasks.append((lesson, i, count_shards))
            students_in[tasks[-1]] = len(students)
    tasks.sort(key=lambda task: (students_in[task], task[0]), reverse=True)
    if not args.cold:  # once per machine and environment (grader/bytecode.py), not a cost of this class
        t0 = time.time()
        for warm_mode in {mode, "interpreter"}:  # gpu mode's memory check runs in the interpreter
            bytecode.warm(warm_mode)
        log.append(f"the machine's one-time preparation (Python bytecode, grader/bytecode.py): {time.time() - t0:.0f} s,"
                   " not counted below (--cold counts it)")
        print(log[-1], flush=True)
    timings, spans = {}, {}
    profile = out / "profile.jsonl"  # every judge's and zygote's CPU, every compile (FA_PROFILE, harness.Timings)
    profile.unlink(missing_ok=True)
    os.environ["FA_PROFILE"] = str(profile)
    grading_started, cpu_started = time.time(), cpu_seconds()

    def grade(task):
        lesson, index, count_shards = task
        t0 = time.time()
        graded = classroom.grade_shard(courses[lesson], lesson, index, count_shards,
                                       threads=classroom.shard_threads(args.parallel), checks=checks)
        spans[(lesson, index)] = (t0 - grading_started, time.time() - grading_started, graded)
        return graded, time.time() - t0

    def row(lesson, student, score, top, ok, why):
        seconds, size = timings.get((lesson, student), (float("nan"), 0))
        shard = f"{seconds:.0f}" + (f" ({size} in shard)" if size > 1 else "")
        shown = f"{score:g}/{top:g}" if score is not None else "—"
        return f"{lesson:<24} {student:<36} {shown:>9}  {shard:>8}  {'ok' if ok else 'WRONG'}: {why}"

    # each shard's grades are checked (from its own gradebook) as soon as it finishes, so a run cut short
    # still shows what it graded
    print(f"\n{'lesson':<24} {'student':<36} {'score':>9}  {'shard s':>8}  verdict", flush=True)
    with futures.ThreadPoolExecutor(args.parallel) as pool:
        jobs = {pool.submit(grade, task): task for task in tasks}
        for job in futures.as_completed(jobs):
            lesson, index, count_shards = jobs[job]
            try:
                graded, seconds = job.result()
            except Exception as error:  # nbgrader itself failed: every student of the shard is ungraded
                graded, seconds = [], float("nan")
                print(f"  shard {index} of {lesson} FAILED: {str(error)[:500]}", flush=True)
            for student in graded:
                timings[(lesson, student)] = (seconds, len(graded))
            shard = classroom.shard_dir(courses[lesson], index)
            for found in check_grades(shard, lesson, {s: expected[lesson][s] for s in graded}):
                print(row(lesson, *found), flush=True)
    order = []  # the grading order inside shared shards, from the times the graded notebooks were written
    for lesson, course in courses.items():
        for index in range(shard_count(course, lesson)):
            graded = sorted((p.stat().st_mtime, p.parent.parent.name) for p in
                            (classroom.shard_dir(course, index) / "autograded").glob(f"*/{lesson}/{lesson}.ipynb"))
            if len(graded) > 1:
                order.append(f"graded one after another in {lesson} shard {index}: "
                             + " -> ".join(student for _, student in graded))
        classroom.merge_shards(course, lesson, shard_count(course, lesson))
    wall, cpu = time.time() - grading_started, cpu_seconds() - cpu_started
    os.environ.pop("FA_PROFILE", None)

    bad = 0  # the final verdicts come from the merged gradebooks
    log.append(f"\n{'lesson':<24} {'student':<36} {'score':>9}  {'shard s':>8}  verdict")
    for lesson, course in courses.items():
        for found in check_grades(course, lesson, expected[lesson]):
            bad += not found[3]
            log.append(row(lesson, *found))
    log += order
    singles = [(s, key) for key, (s, size) in timings.items() if size == 1]
    slowest = max(singles) if singles else None
    log.append(f"\n{count} submissions graded in {wall:.0f} s of wall time: {count / wall * 60:.1f} submissions per "
               f"minute ({args.parallel} at once); {bad} wrong grades")
    if slowest:
        log.append(f"slowest notebook: {slowest[1][0]} / {slowest[1][1]}, {slowest[0]:.0f} s (its own nbgrader run)")
    log += timeline(spans, args.parallel, wall)
    log += cpu_account(profile, cpu, wall)
    text = "\n".join(log)
    print(text)
    (out / "class_scale.txt").write_text(text + "\n")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

"""Lesson 06's speed table in README.md and README.zh.md, made from the decode rows of benchmarks/results.json.

    python -m benchmarks.decode_tables            # rewrite the table between the <!-- decode-table --> markers
    python -m benchmarks.decode_tables --check    # exit 1 when a README's table is not what the rows give

The rows come from one run of benchmarks/bench_decode.py (make bench-decode, or benchmarks/lesson06_gpu.sh on a GPU):
GB/s of the K and V bytes one decode step must read, fp16, Mq = 1, d = 128, Hq = 32; the read probe of the same run
is the ceiling. Each README keeps its own words around the table; the table itself is the same in both.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results.json"
READMES = (ROOT / "README.md", ROOT / "README.zh.md")
BEGIN, END = "<!-- decode-table -->", "<!-- /decode-table -->"


def decode_rows(path=RESULTS):
    return [r for r in json.loads(Path(path).read_text()) if r.get("mode") == "decode"]


def table(rows):
    """The markdown table (and the line naming the run) for the contiguous-cache grid of the rows."""
    if not rows:
        raise SystemExit(f"no decode rows in {RESULTS}: run benchmarks/bench_decode.py on a GPU first")
    probe = next((r["gbps"] for r in rows if r["impl"] == "read-probe"), None)
    gbps = {(r["impl"], r["Hkv"], r["B"], r["N"], r.get("page_size")): r["gbps"] for r in rows}
    points = sorted({(r["Hkv"], r["B"], r["N"]) for r in rows if r["impl"] == "lesson06"})
    pages = sorted({r["page_size"] for r in rows if r["impl"] == "lesson06-paged"})
    first = next(r for r in rows if r["impl"] == "lesson06")

    def shown(value):
        return "—" if value is None else f"{value:,.0f}"

    def ratio(a, b):
        return "—" if a is None or not b else f"{a / b:.2f}"

    head = (["Hkv", "B", "N", "lesson 06"] + [f"paged ({p})" for p in pages]
            + ["SDPA flash", "SDPA cuDNN", "÷ flash", "÷ cuDNN", "% of probe"])
    lines = [f"{first['gpu']}, torch {first['torch']}, Triton {first['triton']}, {first['dtype']}, Hq = {first['Hq']}, "
             f"d = {first['d']}, Mq = {first['Mq']}; GB/s; read probe {shown(probe)} GB/s",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for hkv, b, n in points:
        ours = gbps.get(("lesson06", hkv, b, n, None))
        flash, cudnn = gbps.get(("sdpa-flash", hkv, b, n, None)), gbps.get(("sdpa-cudnn", hkv, b, n, None))
        cells = [str(hkv), str(b), f"{n // 1024}k" if n >= 1024 else str(n), shown(ours)]
        cells += [shown(gbps.get(("lesson06-paged", hkv, b, n, p))) for p in pages]
        cells += [shown(flash), shown(cudnn), ratio(ours, flash), ratio(ours, cudnn),
                  "—" if ours is None or not probe else f"{ours / probe:.0%}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rewrite(text, new_table):
    if BEGIN not in text or END not in text:
        raise SystemExit(f"the README has no {BEGIN} … {END} markers")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + new_table + "\n" + text[end:]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the READMEs are current")
    args = parser.parse_args(argv)
    new_table = table(decode_rows())
    stale = []
    for path in READMES:
        text = path.read_text(encoding="utf-8")
        updated = rewrite(text, new_table)
        if updated != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(updated, encoding="utf-8")
    if args.check and stale:
        sys.exit(f"out of date (python -m benchmarks.decode_tables): {', '.join(stale)}")
    print(("rewrote " if stale else "up to date: ") + ", ".join(stale or [p.name for p in READMES]))


if __name__ == "__main__":
    main()

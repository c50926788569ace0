"""The tables of this folder's README, from its records.

python3 results/2026-12-01-h200-cell-rt/tables.py
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from harness.record import read_jsonl  # noqa: E402


def table(title: str, paths: list[Path]) -> None:
    rows: dict[tuple[str, str], list] = defaultdict(list)
    for path in paths:
        for r in read_jsonl(path):
            rows[(r.scenario["strategy"], r.scenario["cache_state"])].append(r)
    print(f"\n{title}\n")
    print("| strategy | cache | runs | failed | outcomes | stall-called | walls (s) |")
    print("|---|---|---|---|---|---|---|")
    for (strategy, cache), recs in sorted(rows.items()):
        failed = [r for r in recs if r.outcome != "ok"]
        kinds: dict[str, int] = defaultdict(int)
        for r in failed:
            kinds[r.outcome] += 1
        stalled = [r for r in recs if r.stalled_s is not None]
        walls = sorted(round(r.wall_s) for r in recs)
        what = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "-"
        wall = f"{walls[0]}–{walls[-1]} (median {statistics.median(walls):.0f})"
        print(
            f"| {strategy} | {cache} | {len(recs)} | {len(failed)} | {what} | "
            f"{len(stalled)} | {wall} |"
        )


table(
    "Call 1, before (SIGUSR1 dumps; the cell, cut by its budget)",
    [HERE / "call1-before/records.jsonl"],
)
table("Call 6, after (SIGRTMIN+3 dumps): the cell", [HERE / "call6/records.jsonl"])
table("Call 6, after: detection runs (16 at once, cut at 95 s)", [HERE / "call6/detection.jsonl"])

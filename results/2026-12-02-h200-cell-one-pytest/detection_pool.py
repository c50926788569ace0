"""Issue 20: per_device and singleton failures per cache state and priming, over every committed
results/ folder (`small`, 2 threads on one GPU of a one-H200 host, recompile schedule, the race
cases' 10 µs switch interval: None in older records, their default), then the tests the READMEs
quote. From the repo root: PYTHONPATH=. python3 results/2026-12-02-h200-cell-one-pytest/detection_pool.py results
"""

import sys
from collections import defaultdict
from math import comb
from pathlib import Path

from harness.record import read_jsonl

rows: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0])
for p in sorted(Path(sys.argv[1]).glob("**/*.jsonl")):
    for r in read_jsonl(p):
        s = r.scenario
        if s.get("strategy") not in ("per_device", "singleton") or s.get("preset") != "small":
            continue
        if s.get("threads_per_device") != 2 or len(s.get("devices", [])) != 1:
            continue
        if s.get("schedule") != "recompile" or s.get("switch_interval_s") not in (None, 1e-5):
            continue
        hw = r.hardware or {}
        if hw.get("device_name") != "NVIDIA H200" or hw.get("cuda_device_count") != 1:
            continue
        pr = "" if s["cache_state"] == "cold" else ("shared" if r.cache.get("prime_copied") else "own")
        folder = str(p.relative_to(sys.argv[1])).split("/")[0]
        k = (s["strategy"], s["cache_state"], pr, folder)
        rows[k][0] += r.outcome != "ok"
        rows[k][1] += 1
for k, (f, n) in sorted(rows.items()):
    print(*k, f"{f}/{n}", sep="\t")


def fisher(a: int, n1: int, b: int, n2: int) -> float:
    """Fisher's exact test, two-sided (summing tables no likelier than the one seen): a few
    lines of math.comb, as this folder's scripts run without scipy."""
    k, n = a + b, n1 + n2

    def p(x: int) -> float:
        return comb(n1, x) * comb(n2, k - x) / comb(n, k)

    seen = p(a)
    return sum(p(x) for x in range(max(0, k - n2), min(n1, k) + 1) if p(x) <= seen * (1 + 1e-9))


def total(strategy: str, state: str, priming: str) -> tuple[int, int]:
    picked = [v for k, v in rows.items() if k[:3] == (strategy, state, priming)]
    return sum(f for f, _ in picked), sum(n for _, n in picked)


# The first three split the table's per-folder rows by file (a cell's m/…/records.jsonl against
# its detection.jsonl; the README of each folder says which runs are which); the last is the
# table's own sums.
own, shared = total("per_device", "warm", "own"), total("per_device", "warm", "shared")
print("\nFisher's exact test, two-sided (failed/runs against failed/runs):")
for label, a, n1, b, n2 in (
    ("per_device warm shared priming: in cells vs detection runs alone", 10, 12, 6, 16),
    ("per_device warm alone: own priming (10 µs) vs shared", 16, 19, 6, 16),
    ("per_device warm, this call's arms: own vs shared", 4, 4, 3, 8),
    ("per_device warm, everything: own vs shared", *own, *shared),
):
    print(f"  {label}: {a}/{n1} vs {b}/{n2}: p = {fisher(a, n1, b, n2):.3f}")
rate = 10 / 12  # the control's warm rate in cells (shared priming)
print(f"\nthe control's 4 warm runs at the in-cell rate {rate:.2f}:")
for k in (4, 3, 2):
    print(f"  {k} of 4 fail: {comb(4, k) * rate**k * (1 - rate) ** (4 - k):.2f}")

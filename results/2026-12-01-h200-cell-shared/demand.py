"""Per-step CPU demand of this folder's clean 2-thread runs: python3 demand.py (from anywhere).

For each thread, the median over its steady steps of step_demand_s / step_s. Steady is
harness.judge.metrics.is_steady; a step compiled when it was the thread's first at its shape,
as harness/run/threads.py sets it (the records keep each step's shape, not that flag).
"""

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness.judge.metrics import is_steady  # noqa: E402

HERE = Path(__file__).resolve().parent / "call1"
FILES = [*sorted(HERE.glob("m/*/records.jsonl")), HERE / "detection.jsonl"]

medians: dict[str, list[float]] = defaultdict(list)
runs: dict[str, int] = defaultdict(int)
for path in FILES:
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["outcome"] != "ok" or len(r["threads"]) != 2:
            continue
        runs[r["scenario"]["strategy"]] += 1
        warmup = r["scenario"]["warmup_steps"]
        for t in r["threads"]:
            seen: set[int] = set()
            shares = []
            for n, (shape, s, d) in enumerate(zip(t["shapes"], t["step_s"], t["step_demand_s"])):
                compiled = shape not in seen
                seen.add(shape)
                if is_steady(n, compiled, warmup) and d is not None and s > 0:
                    shares.append(d / s)
            if shares:
                medians[r["scenario"]["strategy"]].append(statistics.median(shares))
print("strategy | clean runs | per-thread median share of steady steps: min / median / max")
for strategy, values in sorted(medians.items()):
    print(
        f"{strategy} | {runs[strategy]} | {min(values):.2f} / {statistics.median(values):.2f} / "
        f"{max(values):.2f}"
    )

"""Issue 20: per_device and singleton failures per cache state and priming, over every committed
results/ folder: `small`, 2 threads on one GPU of a one-H200 host, recompile schedule, the race
cases' 10 µs switch interval (None in older records: their default). Run: python3
detection_pool.py results"""

import json
import sys
from collections import defaultdict
from pathlib import Path

rows: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0])
for p in sorted(Path(sys.argv[1]).glob("**/*.jsonl")):
    for line in open(p):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        s = r.get("scenario", {})
        if s.get("strategy") not in ("per_device", "singleton") or s.get("preset") != "small":
            continue
        if s.get("threads_per_device") != 2 or len(s.get("devices", [])) != 1:
            continue
        if s.get("schedule") != "recompile" or s.get("switch_interval_s") not in (None, 1e-5):
            continue
        hw = r.get("hardware") or {}
        if hw.get("device_name") != "NVIDIA H200" or hw.get("cuda_device_count") != 1:
            continue
        c = r.get("cache", {})
        pr = "" if s["cache_state"] == "cold" else ("shared" if c.get("prime_copied") else "own")
        folder = str(p.relative_to(sys.argv[1])).split("/")[0]
        k = (s["strategy"], s["cache_state"], pr, folder)
        rows[k][0] += r["outcome"] != "ok"
        rows[k][1] += 1
for k, (f, n) in sorted(rows.items()):
    print(*k, f"{f}/{n}", sep="\t")

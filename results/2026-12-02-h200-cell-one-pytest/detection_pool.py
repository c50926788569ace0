"""Issue 20: per_device and singleton failures per cache state and priming, over every committed
results/ folder (small, 2 threads on one GPU). Run: python3 detection_pool.py results"""
import json, sys
from collections import defaultdict
from pathlib import Path
rows = defaultdict(lambda: [0, 0])
for p in sorted(Path(sys.argv[1]).glob("**/*.jsonl")):
    for line in open(p):
        try: r = json.loads(line)
        except Exception: continue
        s = r.get("scenario", {})
        if s.get("strategy") not in ("per_device", "singleton") or s.get("preset") != "small": continue
        if s.get("threads_per_device") != 2 or len(s.get("devices", [])) != 1: continue
        c = r.get("cache", {})
        pr = "" if s["cache_state"] == "cold" else ("shared" if c.get("prime_copied") else "own")
        k = (s["strategy"], s["cache_state"], pr, s.get("schedule"), s.get("switch_interval"), str(p.relative_to(sys.argv[1])).split("/")[0])
        rows[k][0] += r["outcome"] != "ok"; rows[k][1] += 1
for k, (f, n) in sorted(rows.items(), key=str): print(*k, f"{f}/{n}", sep="\t")

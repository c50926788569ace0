"""Per FX-trace window of each run child's events (fxwatch.py): when the other thread's compiled
calls checked the flag last before it and next after it, and whether one fell inside.

Usage: python an2.py EVENTS_FOLDER
"""

import glob
import json
import sys

for path in sorted(glob.glob(f"{sys.argv[1]}/*.jsonl")):
    with open(path) as fh:
        events = [json.loads(line) for line in fh]
    traces = [e for e in events if e[0] == "trace" and e[3] - e[2] < 0.1]
    checks = [e for e in events if e[0] == "check"]
    t0 = min(e[2] for e in events)
    print(path.split("/")[-1][:8])
    for _, tid, start, end, _kind in traces:
        other = [c[2] for c in checks if c[1] != tid]
        before = [c for c in other if c < start]
        after = [c for c in other if c > end]
        inside = [c for c in other if start <= c <= end]
        own = [c[2] for c in checks if c[1] == tid and c[2] < start]
        if not before:
            continue
        nxt = 1000 * (after[0] - end) if after else -1
        own_ms = 1000 * (start - own[-1]) if own else -1
        print(
            f"   win {start - t0:6.2f}+{(end - start) * 1000:4.0f}ms: other last check "
            f"{1000 * (start - before[-1]):5.0f}ms before, next {nxt:5.0f}ms after end, "
            f"inside {len(inside)}; compiling thread's own last check {own_ms:.0f}ms before"
        )

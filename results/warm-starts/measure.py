"""A run's start to its replicas built and to its threads stepping, its worker forked from a
launcher (racegate.harness.run.launcher) against started fresh, runs one at a time.

From the repository root: python results/warm-starts/measure.py --devices 0 --repeat 4
(--devices cpu on a CPU box). Prints one JSON line per run and a summary per mode; the first
forked run also waits for its launcher's own start (imports), reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from racegate.harness.run import private_root

private_root.enter()  # as every front door: caches and temp files in a private 0700 root

from racegate.harness.judge.decide import record_run  # noqa: E402
from racegate.harness.run import runner  # noqa: E402
from racegate.harness.run.protocol import Built, Stepping  # noqa: E402
from racegate.harness.scenario import env_names  # noqa: E402
from racegate.harness.scenario.spec import make_scenario  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", default="0")
    ap.add_argument("--preset", default=None)
    ap.add_argument("--strategy", default="warmup_locked")
    ap.add_argument("--cache-state", default="cold")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--modes", default="fresh,fork")
    args = ap.parse_args()
    cpu = args.devices == "cpu"
    sc = make_scenario(
        preset=args.preset or ("tiny" if cpu else "small"),
        strategy=args.strategy,
        devices=["cpu"] if cpu else [f"cuda:{d}" for d in args.devices.split(",")],
        threads_per_device=2,
        cache_state=args.cache_state,
        timeout_s=300,
    )
    summary = {}
    for mode in args.modes.split(","):
        os.environ[env_names.LAUNCHER] = mode
        rows = []
        for i in range(args.repeat):
            t0 = time.monotonic()
            ev = runner.collect(sc, repeat_index=i)
            child = ev.children[0]
            built, stepping = child.events(Built), child.events(Stepping)
            row = {
                "mode": mode,
                "run": i,
                "launch": child.launch,
                "outcome": str(record_run(ev).outcome),
                "built_s": round(built[0][0] - t0, 3) if built else None,
                "stepping_s": round(stepping[0][0] - t0, 3) if stepping else None,
                "wall_s": round(ev.wall_s, 3),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        later = rows[1:] if mode == "fork" and len(rows) > 1 else rows
        summary[mode] = {
            k: statistics.median(r[k] for r in later if r[k] is not None)
            for k in ("built_s", "stepping_s", "wall_s")
        }
    print(json.dumps({"median (fork: after its first run)": summary}), flush=True)


if __name__ == "__main__":
    main()

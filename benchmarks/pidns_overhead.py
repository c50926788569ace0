"""What the PID namespace costs a run: per worker process, from its start to its announcement
(racegate.harness.run.pidns.enter + announce) and to its exit, with the namespace and without.

`python benchmarks/pidns_overhead.py [N]`: N interleaved pairs (default 40), medians in ms. The
"worker" here does nothing between the two, so the differences are the namespace's own.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = (
    "import sys; from pathlib import Path; from racegate.harness.run import pidns; "
    "pidns.announce(Path(sys.argv[1]), pidns.enter(Path(sys.argv[1])))"
)


def one(contained: bool) -> tuple[float, float]:
    """Seconds to the announcement and to the exit of one worker-like process."""
    run_dir = Path(tempfile.mkdtemp())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RACEGATE_PID_NAMESPACE", None)
    if not contained:
        env["RACEGATE_PID_NAMESPACE"] = "0"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CODE, str(run_dir)], env=env)
    while not (run_dir / "worker.json").exists():
        time.sleep(0.0005)
    announced = time.perf_counter() - t0
    proc.wait()
    if proc.returncode != 0:
        raise SystemExit(f"the worker exited {proc.returncode}")
    said = (run_dir / "worker.json").read_text()
    if contained and "pid_namespace" not in said:
        raise SystemExit(f"no namespace here: {said}")
    return announced, time.perf_counter() - t0


def main(n: int) -> None:
    seen: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(n):
        for contained in (True, False):
            seen[contained].append(one(contained))
    for contained, name in ((True, "pid namespace"), (False, "none")):
        start = statistics.median(a for a, _ in seen[contained]) * 1000
        end = statistics.median(b for _, b in seen[contained]) * 1000
        print(f"{name:14s} announced {start:6.1f} ms   exited {end:6.1f} ms   (median of {n})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)

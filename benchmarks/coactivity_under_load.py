"""Co-activity of stepping threads with and without other CPU load, from the runner's looks.

Each case (real threads, a whole-step lock, late-starting processes, the compiled drafter, the
drafter under one lock) runs `--repeats` times beside `--load` bare Python loops spinning, as
the rest of a CI test run loads a small box; each record is appended to
OUT/runs-load<K>.jsonl and one line per run (load, case, outcome, each thread's co-activity)
is printed and appended to OUT/table.tsv. It shows where the `not_concurrent` threshold sits
on this host (docs/gate.md).

    python benchmarks/coactivity_under_load.py --load 2 --repeats 3 --out DIR
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from racegate.harness.doors.pipeline import run_scenario
from racegate.harness.run.record import append_jsonl
from racegate.harness.scenario.spec import Scenario, make_scenario

# The test workloads the cases run, named by import path as any workload is (the runner's child
# imports them from the checkout); the benchmark imports nothing from tests/.
FAULT = "tests.fault_workloads:make_workload"
SERIAL = "tests.serial_workload:make_workload"


def fault(preset: str) -> Scenario:
    """Two threads of FAULT's `preset` (ok, or serial: one lock per step), 4 steady steps of
    0.1 s each under a keen stall watch: what the fault tests run (tests/fault_kit.py)."""
    return make_scenario(
        preset=preset, strategy="eager", workload=FAULT, steps=4, warmup_steps=1,
        timeout_s=90.0, stall_s=3.0, threads_per_device=2,
    )  # fmt: skip


def tiny(strategy: str, cache_state: str, workload: str | None = None):
    extra = {"workload": workload} if workload else {}
    return make_scenario(
        preset="tiny", strategy=strategy, cache_state=cache_state, threads_per_device=2,
        steps=3, warmup_steps=1, timeout_s=240, **extra,
    )  # fmt: skip


CASES = {
    # name: (scenario, what it is)
    "fault ok": (lambda: fault("ok"), "2 threads, 0.1 s torch steps"),
    "fault serial": (lambda: fault("serial"), "the same, one lock per step"),
    "late_start processes": (
        lambda: make_scenario(
            preset="late_start",
            strategy="processes",
            workload=FAULT,
            steps=2,
            warmup_steps=1,
            timeout_s=60,
        ),
        "2 processes, one ready 3 s late",
    ),
    "tiny per_device deleted": (lambda: tiny("per_device", "deleted"), "the drafter, compiled"),
    "tiny sdpa_dense serial": (lambda: tiny("sdpa_dense", "cold", SERIAL), "the drafter, one lock"),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(".racegate/coactivity"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    loads = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        # the cases in turn, so the host's moods spread over all of them
        for _repeat in range(args.repeats):
            for name, (make, _) in CASES.items():
                rec = run_scenario(make())
                append_jsonl(args.out / f"runs-load{args.load}.jsonl", rec)
                shares = [t.coactive_share for t in rec.threads]
                text = " ".join("-" if s is None else f"{s:.2f}" for s in shares)
                line = f"load={args.load}\t{name}\t{rec.outcome}\t{text}"
                print(line, flush=True)
                with (args.out / "table.tsv").open("a") as fh:
                    fh.write(line + "\n")
    finally:
        for p in loads:
            p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())

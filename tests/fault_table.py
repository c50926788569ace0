"""Run every fault workload once and write the table: fault × outcome × race evidence ×
records intact × processes left × files outside the root × wall.

    python tests/fault_table.py [--out results/fault-injection/README.md]

Each fault runs as `tests/test_faults.py` runs it (CPU, tiny module, real fault). This process
gives itself a fresh, empty HOME and TMPDIR first, so a file a run leaves outside its own root
(in the defaults a child would fall back to) shows up there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pytest  # noqa: E402

from racegate.harness.doors.pipeline import run_scenario  # noqa: E402
from racegate.harness.judge.race_evidence import shows_race  # noqa: E402
from racegate.harness.run.record import append_jsonl, read_jsonl  # noqa: E402
from tests.fault_kit import fault_scenario, files_under, isolate_parent, left_behind  # noqa: E402
from tests.fault_workloads import FAULTS  # noqa: E402


def private_parent() -> tuple[Path, Path, Path]:
    """(scratch, home, tmp): a private scratch folder, and this process's fresh HOME and TMPDIR
    in it (kept for the process's life: nothing undoes the patch)."""
    scratch = Path(tempfile.mkdtemp(prefix="racegate-fault-table-"))
    home, tmp = isolate_parent(scratch, pytest.MonkeyPatch())
    return scratch, home, tmp


def row(fault: str, ledger: Path, watched: tuple[Path, Path]) -> dict[str, object]:
    before = (
        [json.dumps(r.to_json(), sort_keys=True) for r in read_jsonl(ledger)]
        if ledger.exists()
        else []
    )
    t0 = time.monotonic()
    record = run_scenario(fault_scenario(fault), command="tests/fault_table.py")
    wall = time.monotonic() - t0
    append_jsonl(ledger, record)
    after = [json.dumps(r.to_json(), sort_keys=True) for r in read_jsonl(ledger)]
    intact = after == [*before, json.dumps(record.to_json(), sort_keys=True)]
    outside = files_under(*watched)
    return {
        "fault": fault,
        "does": FAULTS[fault][2],
        "expected": FAULTS[fault][0],
        "outcome": record.outcome,
        "race": "yes" if shows_race(record) else "no",
        "intact": f"{len(after)}/{len(after)}" if intact else "NO",
        "left": len(left_behind()),
        "outside": len(outside),
        "wall": wall,
        "detail": (record.detail or "")[:140].replace("|", "/"),
    }


def render(rows: list[dict[str, object]], command: str, wall: float) -> str:
    import torch

    lines = [
        "# Fault injection: every fault workload, one run each",
        "",
        f"Made by `{command}` (torch {torch.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {wall:.0f} s in all). Each fault is a real one (signal, "
        "deadlock, rlimit, fork) in `tests/fault_workloads.py`; `tests/test_faults.py` asserts "
        "the same columns in CI.",
        "",
        "- **race evidence**: whether the record shows the race by the one rule "
        "(`racegate/harness/judge/race_evidence.py`), so that a positive control failing this way "
        "would "
        "give the verdict power; none of these faults is the race, so every row must say no.",
        "- **records intact**: every record in the shared file still reads back, unchanged, "
        "after this run appended its own (n/n).",
        "- **processes left**: processes carrying this runner's pid in their environment after "
        "the run (the runner kills every process of a run, new sessions included).",
        "- **files outside root**: files under this process's fresh HOME and TMPDIR after the "
        "run (every cache and temp dir of a child lives in the run's own 0700 root).",
        "",
        "| fault | what it does | expected | outcome | race evidence | records intact "
        "| processes left | files outside root | wall (s) | reason recorded |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = "" if r["outcome"] == r["expected"] else " ✗"
        lines.append(
            f"| {r['fault']} | {r['does']} | {r['expected']} | **{r['outcome']}**{mark} "
            f"| {r['race']} | {r['intact']} | {r['left']} | {r['outside']} | {r['wall']:.1f} "
            f"| {r['detail']} |"
        )
    missed = [r["fault"] for r in rows if r["outcome"] != r["expected"]]
    lines += ["", f"{len(rows) - len(missed)} of {len(rows)} faults got the expected outcome."]
    lines += [
        "",
        "`serial` (every step under one process-wide lock): a step's time includes its wait "
        "for the lock, so by per-step times the threads' steps do overlap; their CPU demand, "
        "sampled by the runner, never meets (co-activity), which makes it `not_concurrent`. "
        "A lock that blocks a whole first step is caught (`first_step_block` → hang).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "results" / "fault-injection" / "README.md",
        help="where the table goes (default: %(default)s)",
    )
    parser.add_argument("--only", default="", help="comma-separated faults (default: all)")
    args = parser.parse_args(argv)
    faults = [f for f in args.only.split(",") if f] or list(FAULTS)
    command = shlex.join(["python", "tests/fault_table.py", *(argv or sys.argv[1:])])
    scratch, home, tmp = private_parent()
    ledger = scratch / "ledger.jsonl"
    t0 = time.monotonic()
    rows = []
    for fault in faults:
        rows.append(row(fault, ledger, (home, tmp)))
        print(f"{fault}: {rows[-1]['outcome']} ({rows[-1]['wall']:.1f} s)", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(rows, command, time.monotonic() - t0))
    print(f"wrote {args.out}")
    return 0 if all(r["outcome"] == r["expected"] and r["race"] == "no" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

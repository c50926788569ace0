"""What a fault run is and what it must leave behind: one place for tests/test_faults.py and
tests/fault_table.py (the scenario of each fault of tests/fault_workloads.py, a fresh HOME
and TMPDIR to watch, and the checks for files and processes left)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from racegate.harness.run import cache_state
from racegate.harness.run.launcher import LAUNCHERS
from racegate.harness.run.lifeline import processes_with
from racegate.harness.scenario.spec import Scenario, make_scenario
from tests.fault_workloads import FAULTS

FAULT = "tests.fault_workloads:make_workload"
HANGS = [f for f, (outcome, _, _) in FAULTS.items() if outcome == "hang"]
HANG_TIMEOUT_S = 20.0  # each hang costs this much; a slow, loaded CI box imports torch in ~10 s
TIMEOUT_S = 90.0  # the others end on their own in seconds
# The others run under a stall watch far keener than the default: none may be taken for a hang.
KEEN_STALL_S = 3.0


def fault_scenario(fault: str, **kw: object) -> Scenario:
    """Hangs wait out their timeout here (the timeout's path); test_a_stall_is_called_early
    runs them under the stall watch."""
    fields = dict(
        # Hangs wait out their timeout; the others get 4 steady steps of 0.1 s: the judge's
        # co-activity needs looks at both threads working (racegate.harness.run.activity).
        preset=fault, strategy="eager", workload=FAULT, steps=2 if fault in HANGS else 4,
        warmup_steps=1,
        timeout_s=HANG_TIMEOUT_S if fault in HANGS else TIMEOUT_S,
        stall_s=0.0 if fault in HANGS else KEEN_STALL_S,
        threads_per_device=FAULTS[fault][1],
    )  # fmt: skip
    return make_scenario(**(fields | kw))


def isolate_parent(root: Path, patch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fresh, empty HOME and TMPDIR under `root` for this process, and no cache variable of
    the user's: a file a run leaves outside its own root lands in one of the two."""
    home, tmp = root / "home", root / "tmp"
    home.mkdir(mode=0o700)
    tmp.mkdir(mode=0o700)
    patch.setenv("HOME", str(home))
    patch.setenv("TMPDIR", str(tmp))
    for var in cache_state.PRIVATE_DIRS:
        if var != "TMPDIR":
            patch.delenv(var, raising=False)
    patch.setattr(tempfile, "tempdir", None)  # gettempdir() caches its first answer
    return home, tmp


def files_under(*roots: Path) -> list[str]:
    return sorted(str(p) for root in roots for p in root.rglob("*"))


def left_behind() -> list[int]:
    """Processes of runs this process started (children carry the runner's pid), but the
    launchers, which live for the session (racegate.harness.run.launcher)."""
    launchers = set(LAUNCHERS.pids())
    return [
        p for p in processes_with("RACEGATE_RUNNER_PID", str(os.getpid())) if p not in launchers
    ]

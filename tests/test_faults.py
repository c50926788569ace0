"""Fault injection: every fault of tests/fault_workloads.py gets its outcome, and leaves nothing.

Each run is a real subprocess with real torch and the real fault. For each: the outcome the
judge must give, every record written before it still intact, no process of the run left, and
no file outside its run root (the parent gets a fresh HOME and TMPDIR, so the defaults a child
would fall back to, ~/.cache, ~/.triton and <tmp>/torchinductor_<user>, are watched).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from racegate.harness.doors.pipeline import run_scenario
from racegate.harness.judge.suite import TooSlowToJudge, judge
from racegate.harness.judge.verdict import Status, control_rates, judge_strategy
from racegate.harness.run import cache_state, runner
from racegate.harness.run.record import append_jsonl, read_jsonl
from tests.fault_kit import (
    HANG_TIMEOUT_S,
    HANGS,
    KEEN_STALL_S,
    fault_scenario,
    files_under,
    isolate_parent,
    left_behind,
)
from tests.fault_workloads import FAULTS

# Every test here injects real faults into real runs: the fault tier (tests/conftest.py).
pytestmark = pytest.mark.fault


@pytest.fixture
def private_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    return isolate_parent(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One records file every fault appends to: each run must leave the earlier ones intact."""
    return tmp_path_factory.mktemp("ledger") / "faults.jsonl"


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault(fault: str, private_parent: tuple[Path, Path], ledger: Path) -> None:
    expected = FAULTS[fault][0]
    before = read_jsonl(ledger) if ledger.exists() else []
    record = run_scenario(fault_scenario(fault))
    append_jsonl(ledger, record)
    assert record.outcome == expected, record.detail
    after = read_jsonl(ledger)
    as_json = [json.dumps(r.to_json(), sort_keys=True) for r in after]
    assert as_json == [json.dumps(r.to_json(), sort_keys=True) for r in [*before, record]]
    assert left_behind() == []
    assert files_under(*private_parent) == []
    if fault in HANGS:
        # The run ends near its timeout (the runner kills at it; +8 s for the stacks dump and
        # the reaping on a loaded box). What shows the join's one deadline is the report below:
        # with N × grace the child would be killed before writing it.
        assert record.wall_s < HANG_TIMEOUT_S + 8, record.wall_s
        if fault != "gil_hang":  # a process frozen holding the GIL can only be killed
            # The child wrote its report (with the hung threads' stacks) before the kill.
            assert "killed at the" not in (record.detail or ""), record.detail
            assert record.stacks and "fault_workloads.py" in record.stacks


@pytest.mark.parametrize(
    "fault", ["deadlock2", "deadlock4", "deadlock_poller", "signal_thief", "gil_hang", "sleep_past"]
)
def test_a_stall_is_called_early(fault: str) -> None:
    """Every stack unchanged and the run idle for stall_s: a hang in seconds, with its stacks,
    not at the timeout. A thread hung holding the GIL cannot give up and is killed after the
    grace; the others' child still writes its report."""
    timeout = 120.0
    record = run_scenario(fault_scenario(fault, stall_s=KEEN_STALL_S, timeout_s=timeout))
    assert record.outcome == "hang", record.detail
    assert "stalled: every stack unchanged" in (record.detail or ""), record.detail
    grace = runner.STOP_GRACE_S if fault == "gil_hang" else 0.0
    # Start-up (torch import, replicas) + stall_s + two samples (+ the grace): far below 120 s.
    assert record.wall_s < 30 + KEEN_STALL_S + grace, record.wall_s
    assert record.stacks and "fault_workloads.py" in record.stacks
    if fault != "gil_hang":
        assert "did not finish its steps" in (record.detail or "")  # the child's own report
    assert left_behind() == []


def test_a_deadlock_too_late_to_stop_early_is_still_a_stall() -> None:
    """A deadlock that begins after the watch can no longer reach --stall before it stops
    asking for dumps (85% of the timeout) is a stall all the same: its stepping threads' final
    stacks are where the watch last saw them, the run idle since. On the H200 two of four
    per_device cold deadlocks began that late, and counted as no detection of the control."""
    record = run_scenario(fault_scenario("late_deadlock", stall_s=8.0, timeout_s=60.0))
    assert record.outcome == "hang", record.detail
    assert record.stalled_s is not None and record.stalled_s >= 8.0, record.detail
    assert "through to its deadline" in (record.detail or ""), record.detail
    assert record.busy_at_deadline is None
    # A stall, but in the fault's own lock, not in torch's compiler: no race shown, so no power
    # for a control (racegate.harness.judge.race_evidence), and the verdict says why.
    rate = control_rates([record], "eager")["cold 1×2"]
    assert rate.hits == 0 and rate.others == ("hang stalled outside torch's compiler",), rate
    assert left_behind() == []


def test_a_run_busy_past_its_timeout_is_too_slow_to_judge() -> None:
    """Still computing at its timeout (a cold compile on an overloaded host): `timeout`, not a
    hang, so the case and the verdict call it too slow to judge, not a failure of the strategy
    and not a clean run (results/h200-stall-watch-signal-fix)."""
    record = run_scenario(fault_scenario("busy_past", stall_s=KEEN_STALL_S))
    assert record.outcome == "timeout" and record.stalled_s is None, record.detail
    assert record.busy_at_deadline is True, record.detail
    assert "busy at the deadline" in (record.detail or ""), record.detail
    with pytest.raises(TooSlowToJudge, match="too slow to judge"):
        judge([record])
    verdict = judge_strategy("eager", [record], {})
    assert verdict.status is Status.INCONCLUSIVE and verdict.failed == 0, verdict.why
    # The same fault with the watch off: nothing says it was busy, so it stays a failed hang.
    blind = run_scenario(fault_scenario("busy_past"))
    assert blind.outcome == "hang" and blind.busy_at_deadline is None, blind.detail
    assert judge_strategy("eager", [blind], {}).status is Status.UNSAFE
    assert left_behind() == []


@pytest.mark.parametrize("fault", ["deadlock2", "deadlock4"])
def test_every_hung_threads_stack_is_kept(fault: str) -> None:
    record = run_scenario(fault_scenario(fault))
    assert record.outcome == "hang"
    blocks = [b for b in (record.stacks or "").split("\n\n") if "fault_workloads.py" in b]
    text = record.stacks or ""
    n = FAULTS[fault][1]
    hung = [line for line in text.splitlines() if line.startswith(("Thread 0x", "Current thread"))]
    in_deadlock = text.count("in _deadlock")
    assert in_deadlock == n, text  # each thread's stack once, deduplicated across dumps
    assert len(hung) == len(set(hung)), hung
    assert blocks


MEASURE_PEAK = """
import resource, sys
from racegate.harness.doors.pipeline import run_scenario
from tests.fault_kit import fault_scenario
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
record = run_scenario(fault_scenario("big_output"))
print(record.outcome, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_runner_reads_only_the_tail_of_big_output() -> None:
    """In a runner of its own: this process's peak RSS already holds whatever earlier tests read."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-c", MEASURE_PEAK], cwd=root, env=env, capture_output=True,
        text=True, timeout=300, check=True,
    ).stdout.split()  # fmt: skip
    outcome, grown_mib = out[-2], int(out[-1])
    assert outcome == "ok"
    assert grown_mib < 50, f"runner peak RSS grew {grown_mib} MiB over 100 MB of child output"


def test_user_cache_variables_overridden_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/nonexistent/mine")
    record = run_scenario(fault_scenario("ok"))
    assert record.overridden_env == {"TORCHINDUCTOR_CACHE_DIR": "/nonexistent/mine"}


def test_a_planted_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o777)
    (tmp_path / "root").mkdir(mode=0o700)
    (tmp_path / "root" / "tmp").symlink_to(target)
    with pytest.raises(PermissionError, match="not a private directory"):
        cache_state.private_env(tmp_path / "root")


def test_tail_reads_the_end_only(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"a" * 1000 + b"END")
    assert runner.tail(path, 3) == "END"
    assert runner.tail(tmp_path / "absent") == ""

"""Isolation: a crash or hang in one run is recorded as such and loses nothing recorded before.

Uses real subprocesses and real torch; only the failure is injected (tests/fault_workloads.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from racegate.harness.doors.pipeline import run_case, run_scenario
from racegate.harness.judge.gate import EXIT_UNDECIDED
from racegate.harness.run.record import append_jsonl, read_jsonl
from racegate.harness.scenario.spec import make_scenario

# Every test here starts child processes: the process tier (tests/conftest.py).
pytestmark = pytest.mark.process

FAULT = "tests.fault_workloads:make_workload"


def fault_scenario(behaviour: str, **kw):
    fields = dict(
        preset=behaviour, strategy="eager", workload=FAULT, steps=2, warmup_steps=1, timeout_s=60
    )
    fields.update(kw)
    return make_scenario(**fields)


def test_ok_then_crash_keeps_the_first_record(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    ok = run_scenario(fault_scenario("ok"))
    assert ok.outcome == "ok", ok.detail
    assert ok.threads_concurrent == 2 and ok.tokens_per_s and ok.tokens_per_s > 0
    append_jsonl(out, ok)
    crash = run_scenario(fault_scenario("abort"))
    append_jsonl(out, crash)
    assert crash.outcome == "crash"
    assert "SIGABRT" in (crash.detail or "")
    # No result came back, but the hardware did (the child's `built` event): a dead or hung
    # run is filed under its machine, not under "unknown".
    assert crash.hardware.device_name == "cpu", crash.hardware
    assert [r.outcome for r in read_jsonl(out)] == ["ok", "crash"]


def test_hang_is_recorded_with_every_stack() -> None:
    record = run_scenario(fault_scenario("hang", timeout_s=20))
    assert record.outcome == "hang", record.detail
    assert record.outcome_counts["hang"] == 1 and record.outcome_counts["ok"] == 1
    assert record.stacks and "fault_workloads.py" in record.stacks  # where the thread hangs


def test_processes_start_their_steps_together() -> None:
    """One process ready 3 s late: without the start gate the other would have finished its
    steps (~0.3 s) alone, and the run would be refused as serial."""
    record = run_scenario(fault_scenario("late_start", strategy="processes"))
    assert record.outcome == "ok", record.detail
    assert record.threads_concurrent == record.threads_asked == 2


def test_error_is_other_error_not_nested_fx() -> None:
    record = run_scenario(fault_scenario("raise"))
    assert record.outcome == "other_error"
    assert any("injected failure" in (t.error or "") for t in record.threads)


def test_cases_stop_at_the_first_failed_run(tmp_path: Path) -> None:
    out = tmp_path / "runs.jsonl"
    records = run_case(fault_scenario("raise"), 3, out, "test", stop_on_failure=True)
    assert [r.outcome for r in records] == ["other_error"]
    assert [r.outcome for r in read_jsonl(out)] == ["other_error"]


def test_run_case_makes_every_run_when_they_pass(tmp_path: Path) -> None:
    records = run_case(fault_scenario("ok"), 2, None, "test", stop_on_failure=True)
    assert [(r.outcome, r.repeat_index) for r in records] == [("ok", 0), ("ok", 1)]


def test_runs_side_by_side_say_their_timings_are_void(tmp_path: Path) -> None:
    """`--jobs 2` overlaps runs on one host: their records count for outcomes, not tokens/s."""
    from racegate.harness.doors import cli

    base = ["run", "--workload", FAULT, "--preset", "ok", "--strategy", "eager",
            "--devices", "cpu", "--steps", "2", "--timeout", "60", "--repeat", "2"]  # fmt: skip
    for jobs, valid in (("2", False), ("1", True)):
        out = tmp_path / f"jobs{jobs}.jsonl"
        # Clean runs of a strategy that is not the production one: the gate is UNDECIDED.
        assert cli.main([*base, "--jobs", jobs, "--out", str(out)]) == EXIT_UNDECIDED
        assert [r.timing_valid for r in read_jsonl(out)] == [valid, valid]


def test_a_child_budgets_from_the_runners_start() -> None:
    """Seconds a child spent importing torch count against the run's timeout, so its result is
    written before the runner's kill; a start from another clock is ignored."""
    import time

    from racegate.harness.run.worker import runner_start

    now = time.monotonic()
    assert runner_start(now - 5.0, 60.0) == now - 5.0
    for t0 in (None, now + 100.0, now - 500.0):
        assert runner_start(t0, 60.0) >= now


def test_a_run_after_an_interrupted_one_still_starts(tmp_path: Path) -> None:
    """An interrupted `harness run` stops its children from starting; the next one in the same
    process (a library caller, a test) starts again."""
    from racegate.harness.doors import cli
    from racegate.harness.run.runner import kill_live_children

    kill_live_children()  # what an interrupt or a failed write leaves behind
    out = tmp_path / "after.jsonl"
    args = ["run", "--workload", FAULT, "--preset", "ok", "--strategy", "eager",
            "--devices", "cpu", "--steps", "2", "--timeout", "60", "--out", str(out)]  # fmt: skip
    assert cli.main(args) == EXIT_UNDECIDED  # ran clean; the production strategy did not run
    assert [r.outcome for r in read_jsonl(out)] == ["ok"]


def test_a_cases_runs_side_by_side_say_their_timings_are_void(tmp_path: Path) -> None:
    """run_case(jobs=2): both runs land, in repeat order from first_index, appended as records,
    and marked timing_valid False (they overlapped each other); one job keeps timings valid."""
    out = tmp_path / "runs.jsonl"
    both = run_case(fault_scenario("ok"), 2, out, "test", jobs=2, first_index=3)
    assert [r.repeat_index for r in both] == [3, 4]
    assert all(r.outcome == "ok" and not r.timing_valid for r in both)
    alone = run_case(fault_scenario("ok"), 1, out, "test", jobs=2)
    assert alone[0].timing_valid  # a batch of one overlapped nothing
    assert len(read_jsonl(out)) == 3

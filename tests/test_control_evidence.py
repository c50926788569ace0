"""The one rule of which outcomes show the race (racegate.harness.judge.race_evidence), and the
verdict that gives the positive control power only from those: a control that failed for another
reason never makes a strategy SAFE, nor itself unsafe."""

from __future__ import annotations

import pytest

from racegate.harness.judge.gate import decide_gate
from racegate.harness.judge.race_evidence import other_reason, shows_race, timed_out
from racegate.harness.judge.verdict import (
    Calibration,
    Status,
    control_rates,
    decide,
    render,
    repeats_for,
)
from racegate.harness.run.record import RunRecord
from tests.test_verdict import GONE, HAZARD, record, runs, status

# torch 2.10's error when two threads' compiles write one process-global MetricsContext.
METRICS = (
    "RuntimeError: \n\nPrevious Traceback:\n  ...\nRuntimeError: Metric(s) {'is_forward'} have "
    "already been set in the current context.  (see above for current and previous traceback)."
)
# faulthandler's fatal dump (racegate/harness/run/worker.py enables it), the faulting thread first.
FAULT_IN_COMPILE = (
    "Fatal Python error: Segmentation fault\n\n"
    "Current thread 0x00007f7090e216c0 (most recent call first):\n"
    '  File "/v/site-packages/torch/_subclasses/fake_tensor.py", line 1446 in __enter__\n'
    '  File "/v/site-packages/torch/_inductor/compile_fx.py", line 737 in fake_tensor_prop\n'
    '  File "/repo/harness/run/threads.py", line 148 in _thread_main\n'
)
FAULT_OUTSIDE = (
    "Fatal Python error: Segmentation fault\n\n"
    "Thread 0x00007fe067fff6c0 (most recent call first):\n"
    '  File "/v/site-packages/torch/_dynamo/eval_frame.py", line 1263 in _fn\n'
    "Current thread 0x00007f7090e216c0 (most recent call first):\n"
    '  File "/usr/lib/python3.12/ctypes/__init__.py", line 519 in string_at\n'
    '  File "/repo/tests/fault_workloads.py", line 150 in step\n'
    '  File "/repo/harness/run/threads.py", line 148 in _thread_main\n'
)
STALLED_OUTSIDE = (
    "Thread 0x00007fe067fff6c0 (most recent call first):\n"
    '  File "/repo/tests/fault_workloads.py", line 120 in step\n'
    '  File "/repo/harness/run/threads.py", line 148 in _thread_main\n'
)
SERIAL = (
    "thread 1's steady steps overlapped other threads' steps for 25% of its steady time "
    "(needs ≥ 50%)"
)

# Control runs that failed, each for another reason than the race.
NOT_THE_RACE = {
    "serialised": lambda: record("per_device", "not_concurrent", detail=SERIAL),
    "unrelated error": lambda: record(
        "per_device",
        "other_error",
        error_text="RuntimeError: boom",
        detail="thread 0 other_error: RuntimeError: boom",
    ),
    "SIGSEGV outside torch": lambda: record(
        "per_device", "crash", stacks=FAULT_OUTSIDE, detail="child killed by SIGSEGV"
    ),
    "crash without stacks": lambda: record(
        "per_device", "crash", detail="child killed by SIGKILL (cgroup oom_kill count unchanged)"
    ),
    "out of memory": lambda: record(
        "per_device",
        "oom",
        error_text="torch.OutOfMemoryError: CUDA out of memory.",
        detail="thread 0 oom: torch.OutOfMemoryError: CUDA out of memory.",
    ),
    "hang at the deadline": lambda: record("per_device", "hang"),
    "stall outside the compiler": lambda: record(
        "per_device", "hang", stalled_s=20.0, stacks=STALLED_OUTSIDE
    ),
    "timeout": lambda: record("per_device", "timeout", busy_at_deadline=True),
}
RACE = {
    "nested-FX error": lambda: record("per_device", "nested_fx_error"),
    "silent fallback": lambda: record("per_device", "silent_fallback"),
    "MetricsContext collision": lambda: record("per_device", "other_error", error_text=METRICS),
    "stall in the compiler": lambda: record("per_device", "hang", stalled_s=20.0),
    "fault in the compiler": lambda: record("per_device", "crash", stacks=FAULT_IN_COMPILE),
    # A thread that raced beside one still compiling at the deadline: the run reads `hang`.
    "nested-FX beside a hang": lambda: _with_thread(
        record("per_device", "hang"), 1, "nested_fx_error"
    ),
}


def _with_thread(r: RunRecord, index: int, outcome: str) -> RunRecord:
    r.threads[index].outcome = outcome
    return r


@pytest.mark.parametrize("case", list(RACE))
def test_what_shows_the_hazard(case: str) -> None:
    r = RACE[case]()
    assert shows_race(r) and other_reason(r) is None
    again = RunRecord.from_json(r.to_json())  # as a results file holds it
    assert shows_race(again)


@pytest.mark.parametrize("case", list(NOT_THE_RACE))
def test_what_does_not_show_the_hazard_says_why(case: str) -> None:
    r = NOT_THE_RACE[case]()
    assert not shows_race(r)
    assert other_reason(r), case
    assert timed_out(r) is (case == "timeout")
    assert other_reason(record("per_device")) is None and not shows_race(record("per_device"))


@pytest.mark.parametrize("probes", [HAZARD, GONE, {}], ids=["hazard", "gone", "no probe"])
@pytest.mark.parametrize("case", list(NOT_THE_RACE))
def test_a_control_that_failed_for_another_reason_never_yields_safe(case: str, probes) -> None:
    """per_device failing 7 of 7 runs, none with the race, beside 30 clean production runs:
    before, "SAFE ... would have been caught with ≥ 99%" and "per_device is unsafe here". A
    control that only timed out is not clean either: no MASKED, no SAFE from the probes."""
    control = [NOT_THE_RACE[case]() for _ in range(7)]
    v = decide(control + runs("warmup_locked", 30), production="warmup_locked", probes=probes)
    p = v.production_verdict
    assert p.status is not Status.SAFE and not v.passed, p.why
    assert p.status is Status.INCONCLUSIVE, p.why
    assert "the control failed for another reason: cold 1×2 (" in p.why, p.why
    c = next(s for s in v.strategies if s.strategy == "per_device")
    assert c.status is Status.INCONCLUSIVE, c.why
    if case not in ("timeout", "serialised"):  # neither is a failure (race_evidence.is_failed)
        assert "7 of 7 runs failed, none with the race: the control failed for another" in c.why
    assert "unsafe" not in v.advice, v.advice
    text = " ".join("\n".join(render(v, decide_gate(v))).split())
    assert "cold 1×2 0/7" in text and "7 failed for another reason, no power" in text, text
    assert "PASS" not in text


def test_the_cpu_cell_whose_only_control_failure_was_not_concurrent() -> None:
    """The 2-core CPU box, torch 2.13 (the race masked): per_device's one run came out
    not_concurrent; the cell read "per_device is unsafe here" and asked for 30 production
    runs (the cap). Now it asks for the default and says why the control gave no power."""
    control = [record("per_device", "not_concurrent", detail=SERIAL)]
    rate = control_rates(control, "per_device")["cold 1×2"]
    assert rate.hits == 0 and rate.others == (f"not_concurrent: {SERIAL}",)
    assert repeats_for(rate, default=3, cal=Calibration())[0] == 3
    v = decide(control + runs("warmup_locked", 3), production="warmup_locked", probes=HAZARD)
    assert status(v, "per_device") is Status.INCONCLUSIVE
    assert "per_device is unsafe here" not in v.advice, v.advice
    assert v.production_verdict.status is Status.INCONCLUSIVE and not v.passed


def test_hazard_evidence_beside_other_failures_gives_power_from_it_alone() -> None:
    """8 runs: 4 nested-FX errors and 4 serialised. Power comes from 4 of 8 (20 runs asked),
    not 8 of 8 (5), and the control is UNSAFE: it did show the race."""
    control = runs("per_device", 4, 4) + [NOT_THE_RACE["serialised"]() for _ in range(4)]
    rate = control_rates(control, "per_device")["cold 1×2"]
    assert (rate.hits, rate.runs, len(rate.others)) == (4, 8, 4)
    assert rate.needed(Calibration()) == 20
    v = decide(control + runs("warmup_locked", 5), production="warmup_locked", probes=HAZARD)
    assert v.production_verdict.status is Status.INCONCLUSIVE and v.production_verdict.more_runs
    assert status(v, "per_device") is Status.UNSAFE
    assert v.advice.endswith("per_device is unsafe here.")


def test_a_metrics_context_collision_and_a_fault_in_the_compiler_give_power() -> None:
    """torch 2.10's MetricsContext collision and 2.11's SIGSEGV inside a compile
    (results/cpu-torch-releases-probes-and-races) are the control's race there."""
    control = [RACE["MetricsContext collision"]() for _ in range(4)]
    control += [RACE["fault in the compiler"]() for _ in range(4)]
    v = decide(control + runs("warmup_locked", 5), production="warmup_locked", probes=HAZARD)
    assert v.passed, v.production_verdict.why
    assert "per_device failed 8 of 8 cold runs here" in v.production_verdict.why

"""The company phase: threads keep stepping beside each other long enough to be judged, counted
from the last compile of a schedule that compiles after the first steady steps
(racegate.harness.run.threads._may_stop)."""

from __future__ import annotations

import time

import pytest

from racegate.harness.run import threads
from racegate.harness.scenario.vocab import Schedule


def coordinator(schedule: Schedule, *, deleted: bool = False) -> threads._Coordinator:
    plan = threads.Plan(
        schedule, warmup_steps=1, steps=2, shapes=[1, 2, 3], deadline=time.monotonic() + 60,
        switch_shape_after_hook=deleted,
    )  # fmt: skip
    co = threads._Coordinator(2, plan)
    for i in range(2):  # both steady long ago, both did their steps, both stepped after a switch
        co.released[i].set()
        co.quota_done[i].set()
        co.stepped_after_switch[i].set()
    co.all_steady_at = time.monotonic() - 10 * threads.MIN_COMPANY_S
    return co


@pytest.mark.parametrize(("schedule", "deleted"), [(Schedule.RECOMPILE, False),
                                                   (Schedule.BARRIER, True)])  # fmt: skip
def test_threads_keep_company_a_while_after_the_last_compile(
    schedule: Schedule, deleted: bool
) -> None:
    """Steady for 10 s, but the last thread compiled its new shape just now: no thread stops
    yet (it did, and a deleted-cache run had 2 steady steps a thread to be judged on)."""
    co = coordinator(schedule, deleted=deleted)
    for i in range(2):
        co.switched[i].set()
    co.mark_switched()
    assert not threads._may_stop(co, 0)
    co.all_switched_at = time.monotonic() - threads.MIN_COMPANY_S
    assert threads._may_stop(co, 0)


def test_without_a_compile_after_steady_steps_company_counts_from_steady() -> None:
    co = coordinator(Schedule.BARRIER)
    assert threads._may_stop(co, 0)
    co.all_steady_at = time.monotonic()
    assert not threads._may_stop(co, 0)

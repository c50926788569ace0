"""racegate.harness.run.threads' schedules, on real threads with a stand-in replica (no torch
step)."""

from __future__ import annotations

import itertools
import time

from racegate.harness.run import threads
from racegate.harness.scenario.vocab import Schedule


class _SlowReplica:
    """A step of 20 ms; 200 ms for the first step of a shape (a compile, slower, as real ones)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def step(self, shape: int) -> object:
        time.sleep(0.02 if shape in self.seen else 0.2)
        self.seen.add(shape)
        return type("Result", (), {"tokens": 1})()

    def eager_fallbacks(self) -> int:
        return 0


def test_recompile_threads_keep_company_in_a_steady_step_after_the_last_switch() -> None:
    """Each thread's quota can end with its own switch (its last steps a compile): then its
    steady steps all fell beside the others' compiles, and the judge's co-activity had too few
    looks at steady beside steady steps. Every thread now makes a whole step after the last
    switch."""
    runs = [threads.ThreadRun(i, "cpu", _SlowReplica()) for i in range(2)]
    plan = threads.Plan(Schedule.RECOMPILE, 1, 2, [1, 2, 3], time.monotonic() + 60)
    assert threads.run_threads(runs, plan) == []
    assert all(r.error_text is None and r.finished for r in runs)
    last_switch = max(next(s.end for s in r.steps if s.shape != 1) for r in runs)
    for r in runs:
        after = [s for s in r.steps if s.start >= last_switch]
        assert after and not any(s.compiled_shape for s in after), [
            (s.shape, s.compiled_shape, s.start - last_switch) for s in r.steps
        ]


def test_recompile_threads_take_turns_through_every_new_shape_one_compile_at_a_time() -> None:
    """With more new shapes than threads each thread compiles several, in turns (thread 0's
    first, thread 1's first, thread 0's second, ...), never two at once, and the other thread
    steps beside each compile: every turn is a window for the race (issue 55)."""
    runs = [threads.ThreadRun(i, "cpu", _SlowReplica()) for i in range(2)]
    plan = threads.Plan(Schedule.RECOMPILE, 1, 2, [1, 2, 3, 4, 5], time.monotonic() + 60)
    assert threads.run_threads(runs, plan) == []
    assert all(r.error_text is None and r.finished for r in runs)
    compiles = sorted(
        (s.start, s.end, r.index, s.shape) for r in runs for s in r.steps if s.compiled_shape
    )
    switches = [(who, shape) for _, _, who, shape in compiles if shape != 1]
    assert switches == [(0, 2), (1, 3), (0, 4), (1, 5)]
    new = [(start, end, who) for start, end, who, shape in compiles if shape != 1]
    for (_, end, _), (start, _, _) in itertools.pairwise(new):
        assert end <= start  # one compile at a time
    for start, end, who in new:  # the other thread stepped a compiled shape beside it
        other = runs[1 - who]
        assert any(s.start < end and s.end > start and not s.compiled_shape for s in other.steps)

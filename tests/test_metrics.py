"""Steady-state throughput, spread, memory growth, MFU and detection-rate intervals."""

from __future__ import annotations

import pytest

from racegate.harness.judge import metrics


def test_steady_steps_drop_warmup_and_compiles() -> None:
    compiled = [True, False, True, False]  # per step
    steady = [n for n, c in enumerate(compiled) if metrics.is_steady(n, c, warmup_steps=1)]
    assert steady == [1, 3]
    assert metrics.rate([(1.0, 100), (1.0, 300)]) == 200
    assert metrics.rate([]) is None


def test_windows_and_aggregate() -> None:
    steps = [(1.0, 10)] * 7
    ws = metrics.windows(steps, 3)
    assert [len(w) for w in ws] == [3, 2, 2]
    # Two threads at 10 tok/s each: 20 tok/s together in every window.
    assert metrics.aggregate_windows([steps, steps], 3) == [20.0, 20.0, 20.0]
    assert metrics.median_and_spread([9.0, 10.0, 11.0]) == (10.0, pytest.approx(0.2))
    assert metrics.median_and_spread([]) == (None, None)


def test_memory_growth() -> None:
    assert metrics.memory_growth([100, 100, 100], 0) == 0
    assert metrics.memory_growth([50, 100, 103], 1) == pytest.approx(0.03)
    assert metrics.memory_growth([100], 0) is None


def test_mfu() -> None:
    assert metrics.mfu(395e12, "NVIDIA H200", 1) == pytest.approx(0.5)
    assert metrics.mfu(395e12, "NVIDIA H200", 2) == pytest.approx(0.25)
    assert metrics.mfu(1e12, "cpu", 1) is None


def test_wilson_interval() -> None:
    lo, hi = metrics.wilson_interval(10, 10)
    assert hi == 1.0 and 0.69 < lo < 0.73  # 10/10 is not proof of 100%
    lo, hi = metrics.wilson_interval(0, 20)
    assert lo == 0.0 and 0.15 < hi < 0.18


def test_base_shape_memory_stops_at_the_first_new_shape() -> None:
    steady = [(0, 10), (0, None), (0, 12), (1, 50), (0, 13)]
    assert metrics.base_shape_memory(steady) == [10, 12]
    assert metrics.base_shape_memory([]) == []

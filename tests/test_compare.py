"""racegate.harness.judge.compare on synthetic samples: the t quantile, the interval, the call."""

from __future__ import annotations

import math
import random

import pytest

from racegate.harness.judge.compare import (
    Change,
    call,
    compare,
    ratio_interval,
    t_cdf,
    t_quantile,
)


@pytest.mark.parametrize(
    ("df", "expected"),  # two-sided 95% critical values from any t table
    [(1, 12.7062), (2, 4.3027), (3, 3.1824), (5, 2.5706), (10, 2.2281), (30, 2.0423)],
)
def test_t_quantile_matches_tables(df: float, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-4)


def test_t_quantile_tends_to_normal_and_inverts_cdf() -> None:
    assert t_quantile(0.975, 1e7) == pytest.approx(1.95996, abs=1e-4)
    for df in (1.5, 4.2, 17.0):  # Welch's df is fractional
        for p in (0.6, 0.9, 0.995):
            assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, abs=1e-9)


def test_clear_slowdown_is_slower_and_mirror_is_faster() -> None:
    ref, slow = [100.0, 101.0, 99.0, 100.5], [90.0, 91.0, 89.5, 90.5]
    down = compare(ref, slow)
    assert down.change is Change.LOWER and down.word == "slower" and down.regressed
    assert down.high < 1.0 and down.ratio == pytest.approx(0.9, abs=0.01)
    up = compare(slow, ref)
    assert up.change is Change.HIGHER and up.word == "faster" and not up.regressed
    # symmetric on logs: swapping sides inverts ratio and interval exactly
    assert up.ratio == pytest.approx(1 / down.ratio)
    assert up.low == pytest.approx(1 / down.high) and up.high == pytest.approx(1 / down.low)


def test_significant_but_within_tolerance_is_no_change() -> None:
    ref, cand = [100.0, 100.1, 99.9], [98.0, 98.1, 97.9]  # 2% slower, tight interval
    comp = compare(ref, cand)
    assert comp.high < 1.0 and comp.change is Change.NONE
    assert compare(ref, cand, tolerance=0.01).change is Change.LOWER


def test_overlapping_interval_is_no_change_even_with_big_ratio() -> None:
    comp = compare([100.0, 50.0, 120.0], [60.0, 110.0, 40.0])
    assert comp.ratio < 0.97 and comp.low < 1.0 < comp.high and comp.change is Change.NONE


def test_call_rules_directly() -> None:
    assert call(0.95, 0.90, 0.99) is Change.LOWER
    assert call(0.98, 0.96, 0.99) is Change.NONE  # below 1 but inside the 3% tolerance
    assert call(0.90, 0.80, 1.01) is Change.NONE  # interval reaches 1
    assert call(1.05, 1.01, 1.10) is Change.HIGHER
    with pytest.raises(ValueError, match="tolerance"):
        call(1.0, 0.9, 1.1, tolerance=1.5)


def test_memory_without_spread_is_a_certain_difference() -> None:
    more = compare([1000, 1000, 1000], [1100, 1100, 1100], metric="peak_mem_bytes")
    assert (more.low, more.high) == (pytest.approx(1.1), pytest.approx(1.1))
    assert more.change is Change.HIGHER and more.word == "more memory" and more.regressed
    same = compare([1000, 1000], [1000, 1000], metric="peak_mem_bytes")
    assert same.change is Change.NONE and not same.regressed


@pytest.mark.parametrize(
    ("ref", "cand", "match"),
    [
        ([100.0], [100.0, 101.0], "reference has 1 tokens_per_s sample"),
        ([100.0, 101.0], [], "candidate has 0"),
        ([100.0, 0.0], [100.0, 101.0], "not a positive finite number"),
        ([100.0, math.nan], [100.0, 101.0], "not a positive finite number"),
    ],
)
def test_bad_samples_name_the_side(ref: list[float], cand: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compare(ref, cand)


def test_unknown_metric_names_choices() -> None:
    with pytest.raises(ValueError, match="unknown metric 'x'; choose from: tokens_per_s"):
        compare([1.0, 2.0], [1.0, 2.0], metric="x")


def _lognormal(rng: random.Random, n: int, median: float, sigma: float) -> list[float]:
    return [median * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def test_false_alarm_rate_and_power_by_simulation() -> None:
    """The interval's coverage holds at few runs: A/A calls ≈ 5% at most (less with the
    tolerance), and a 5% slowdown at qwen3-8b-drafter-like noise (0.3%) is caught at 2 runs."""
    rng = random.Random(21)
    trials = 2000
    aa_raw = sum(
        ratio_interval(_lognormal(rng, 3, 1e4, 0.05), _lognormal(rng, 3, 1e4, 0.05))[2] < 1.0
        or ratio_interval(_lognormal(rng, 3, 1e4, 0.05), _lognormal(rng, 3, 1e4, 0.05))[1] > 1.0
        for _ in range(trials)
    )
    # two independent A/A draws per trial, each one-sided 2.5%: ≈ 5% of trials
    assert 0.02 < aa_raw / trials < 0.08
    aa_called = sum(
        compare(_lognormal(rng, 3, 1e4, 0.05), _lognormal(rng, 3, 1e4, 0.05)).change
        is not Change.NONE
        for _ in range(trials)
    )
    assert aa_called / trials < 0.05
    caught = sum(
        compare(_lognormal(rng, 2, 1e4, 0.003), _lognormal(rng, 2, 0.95e4, 0.003)).regressed
        for _ in range(200)
    )
    assert caught >= 190


def test_runs_needed_grows_with_spread_and_is_checked_by_simulation() -> None:
    from racegate.harness.judge.compare import log_spread, runs_needed

    assert runs_needed(0.003, 0.05) == 2  # qwen3-8b-drafter-like spread: 2 runs per side
    assert runs_needed(0.10, 0.05) > 50  # small-like spread: not affordable
    assert runs_needed(0.01, 0.02) is None  # inside the 3% tolerance: never called
    assert log_spread([100.0, 100.0, 100.0]) == 0.0
    n = runs_needed(0.02, 0.05)
    assert n is not None
    rng = random.Random(5)
    caught = sum(
        compare(_lognormal(rng, n, 1e4, 0.02), _lognormal(rng, n, 0.95e4, 0.02)).regressed
        for _ in range(400)
    )
    assert caught / 400 >= 0.85  # the promised ≈ 90%, with sampling slack

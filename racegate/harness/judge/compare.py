"""A/B statistics: the ratio candidate/reference of per-run samples, its 95% interval, the call.

Pure functions on lists of per-run numbers (steady-state tokens/s, peak memory); no torch, no
records. Used by racegate.harness.ab, which runs both sides interleaved on one machine.

Why Welch's t on logs, not a bootstrap of the ratio of medians: a comparison has few runs
per side (2–10: a `qwen3-8b-drafter` run costs over a minute). A bootstrap of a median of 3
has only a handful of distinct values, so its percentile interval is too narrow and its
coverage is well below 95% at these sizes; the t interval is exact for log-normal noise and
widens correctly (t quantile with Welch–Satterthwaite degrees of freedom) as runs get fewer
or sides differ in spread. Logs make the interval one for a ratio (tokens/s noise is
multiplicative) and symmetric in which side is called reference. An outlier run (a burst of
load) inflates that side's variance, which widens the interval: it errs toward "no
significant change", never toward a false alarm. This is pyperf `compare_to`'s choice too
(a t-test on per-run values). The t quantile is computed here (regularised incomplete beta
by continued fraction) rather than importing scipy for one function.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 1
CHANGE_TOLERANCE = 0.03  # a change smaller than 3% is not called, however significant
DEFAULT_CONFIDENCE = 0.95
MIN_RUNS = 2  # per side: one run has no spread, so no interval


class Change(StrEnum):
    """Which way the candidate moved a metric, if significantly."""

    LOWER = "lower"
    HIGHER = "higher"
    NONE = "no significant change"


@dataclass(frozen=True)
class MetricSpec:
    """How a compared metric reads: which direction is a regression, and the words for each."""

    name: str
    unit: str
    higher_is_better: bool
    lower_word: str
    higher_word: str

    def word(self, change: Change) -> str:
        return {
            Change.LOWER: self.lower_word,
            Change.HIGHER: self.higher_word,
            Change.NONE: str(Change.NONE),
        }[change]

    def regressed(self, change: Change) -> bool:
        worse = Change.LOWER if self.higher_is_better else Change.HIGHER
        return change is worse


METRICS: dict[str, MetricSpec] = {
    "tokens_per_s": MetricSpec("tokens_per_s", "tok/s", True, "slower", "faster"),
    "peak_mem_bytes": MetricSpec("peak_mem_bytes", "B", False, "less memory", "more memory"),
}


@dataclass(frozen=True)
class Comparison:
    """One metric compared: per-run samples of both sides, the ratio, its interval, the call."""

    metric: str
    reference: list[float]
    candidate: list[float]
    ratio: float  # candidate / reference, of geometric means
    low: float  # the interval for the ratio at `confidence`
    high: float
    confidence: float
    tolerance: float
    change: Change
    schema_version: int = field(default=SCHEMA_VERSION)

    @property
    def spec(self) -> MetricSpec:
        return METRICS[self.metric]

    @property
    def word(self) -> str:
        """'slower', 'faster', 'more memory', ... or 'no significant change'."""
        return self.spec.word(self.change)

    @property
    def regressed(self) -> bool:
        return self.spec.regressed(self.change)

    def ratio_text(self) -> str:
        """The ratio and its interval, e.g. `0.952x [0.931, 0.974]`."""
        return f"{self.ratio:.3f}x [{self.low:.3f}, {self.high:.3f}]"

    def line(self) -> str:
        """One line for a terminal or a report, e.g. `tokens_per_s: 0.952x [...]: slower`."""
        pct = round(self.confidence * 100)
        return (
            f"{self.metric}: {self.ratio_text()} ({pct}% CI, "
            f"{len(self.reference)} vs {len(self.candidate)} runs, tolerance "
            f"{self.tolerance:.0%}): {self.word}"
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["change"] = str(self.change)
        return data


def is_rate(value: float | None) -> bool:
    """A sample a comparison can take: a finite number above 0 (not None, NaN or inf)."""
    return value is not None and math.isfinite(value) and value > 0


def check_samples(values: list[float], side: str, metric: str) -> list[float]:
    """The samples as floats; ValueError naming the side if too few or not all positive."""
    out = [float(v) for v in values]
    if len(out) < MIN_RUNS:
        raise ValueError(
            f"{side} has {len(out)} {metric} sample(s); a comparison needs at least {MIN_RUNS} "
            "runs per side (one run has no spread)"
        )
    bad = [v for v in out if not is_rate(v)]
    if bad:
        raise ValueError(f"{side} {metric} sample {bad[0]!r} is not a positive finite number")
    return out


def _mean_var(xs: list[float]) -> tuple[float, float]:
    mean = sum(xs) / len(xs)
    return mean, sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(ln_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t CDF for real df > 0."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with df > 0 (bisection on t_cdf; df may be fractional)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p!r}, df={df!r}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def ratio_interval(
    reference: list[float], candidate: list[float], confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float, float]:
    """(ratio, low, high): candidate/reference of geometric means, Welch's t interval on logs.

    Both sides without spread (e.g. identical peak memory every run) give the point ratio as
    the whole interval: a deterministic difference is a certain one.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence!r} must lie strictly between 0 and 1")
    ref = [math.log(v) for v in check_samples(reference, "reference", "value")]
    cand = [math.log(v) for v in check_samples(candidate, "candidate", "value")]
    (m_r, v_r), (m_c, v_c) = _mean_var(ref), _mean_var(cand)
    diff = m_c - m_r
    a, b = v_r / len(ref), v_c / len(cand)
    se = math.sqrt(a + b)
    if se == 0.0:
        return math.exp(diff), math.exp(diff), math.exp(diff)
    df = (a + b) ** 2 / (a * a / (len(ref) - 1) + b * b / (len(cand) - 1))
    half = t_quantile(0.5 + confidence / 2.0, df) * se
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def call(ratio: float, low: float, high: float, tolerance: float = CHANGE_TOLERANCE) -> Change:
    """LOWER only if the whole interval lies below 1 and the ratio below 1 − tolerance;
    HIGHER the mirror image (above 1, ratio above 1 + tolerance); else no significant change."""
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance {tolerance!r} must lie in [0, 1)")
    if high < 1.0 and ratio < 1.0 - tolerance:
        return Change.LOWER
    if low > 1.0 and ratio > 1.0 + tolerance:
        return Change.HIGHER
    return Change.NONE


def compare(
    reference: list[float],
    candidate: list[float],
    *,
    metric: str = "tokens_per_s",
    tolerance: float = CHANGE_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Comparison:
    """Compare one metric's per-run samples; ValueError names a bad metric or sample."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose from: {', '.join(METRICS)}")
    ref = check_samples(reference, "reference", metric)
    cand = check_samples(candidate, "candidate", metric)
    ratio, low, high = ratio_interval(ref, cand, confidence)
    return Comparison(
        metric,
        ref,
        cand,
        ratio,
        low,
        high,
        confidence,
        tolerance,
        call(ratio, low, high, tolerance),
    )


def log_spread(values: list[float]) -> float:
    """Run-to-run spread: the sample standard deviation of log values (≈ relative spread)."""
    logs = [math.log(v) for v in check_samples(values, "pool", "value")]
    return math.sqrt(_mean_var(logs)[1])


def runs_needed(
    spread: float,
    slowdown: float,
    *,
    tolerance: float = CHANGE_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
    power: float = 0.9,
    most: int = 1000,
) -> int | None:
    """Runs per side for `compare` to call a true `slowdown` (0.05 = 5% fewer tokens/s) slower
    with probability ≈ `power`, at run-to-run `spread` (log_spread) on both sides.

    Normal approximation of the log ratio's estimate: both conditions of `call` must hold
    `power` of the time (estimate below 1 − tolerance, interval's top below 1). None if more
    than `most` runs, or never (a slowdown within the tolerance is not called by design).
    """
    effect = -math.log1p(-slowdown)
    margin = effect + math.log1p(-tolerance)  # how far below the tolerance line it lies
    if margin <= 0:
        return None
    z = t_quantile(power, 1e9)
    for n in range(MIN_RUNS, most + 1):
        se = spread * math.sqrt(2.0 / n)
        t = t_quantile(0.5 + confidence / 2.0, 2 * n - 2)
        if se == 0.0 or (margin >= z * se and effect >= (t + z) * se):
            return n
    return None

"""A/B statistics: each metric's ratio candidate/reference, with its interval and call.

A run's record becomes a sample (sample_of; fail closed where a number is missing). The
samples of both sides give tokens/s and peak memory compared (compare_samples), each device's
peak and growth over the steady steps (compare_devices), and, from pools of runs, the A/A false
alarms and the catches of disjoint comparisons (power_summary). The ratio, interval and call
themselves are racegate.harness.judge.compare's.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from racegate.harness.judge.baselines import MEMORY_GROWTH_LIMIT
from racegate.harness.judge.compare import (
    CHANGE_TOLERANCE,
    DEFAULT_CONFIDENCE,
    Change,
    Comparison,
    compare,
    log_spread,
    runs_needed,
)
from racegate.harness.judge.metrics import memory_growth
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.vocab import Outcome

SIDES = ("reference", "candidate")


@dataclass(frozen=True)
class RunSample:
    """What one run contributes: its steady tokens/s and peak memory, from its record."""

    side: str
    index: int  # position in the interleaved order
    tokens_per_s: float
    peak_mem_bytes: int | None  # summed over devices; None where none was measured (CPU)
    versions: dict[str, str]
    wall_s: float
    # The UUIDs of the GPUs the run stepped on (racegate.harness.scenario.versions.hardware); ()
    # where its record names none: a CPU run, or a record from before racegate recorded them.
    gpus: tuple[str, ...] = ()
    # Each device's peak (the record's peak_mem_bytes) and relative growth of its peak over
    # the steady steps (from the record's mem_series, where the record judged growth at all);
    # empty where none was measured (CPU), or in an ab.json from before they were kept.
    peak_by_device: dict[str, int] = field(default_factory=dict)
    growth_by_device: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceMemory:
    """One device's memory, candidate against reference: its peak compared as any metric is
    (ratio of the runs' peaks, interval, call), and its growth over the steady steps: the
    candidate's median growth above the reference's by more than `growth_limit` (the gate's
    flatness limit, docs/gate.md) is a leak the candidate brought."""

    device: str
    peak: Comparison
    growth_reference: list[float]  # per run; empty where growth was not measured
    growth_candidate: list[float]
    growth_limit: float = MEMORY_GROWTH_LIMIT

    @property
    def growth_excess(self) -> float | None:
        """Candidate's median growth less the reference's (None: not measured on both)."""
        if not self.growth_reference or not self.growth_candidate:
            return None
        return statistics.median(self.growth_candidate) - statistics.median(self.growth_reference)

    @property
    def grows(self) -> bool:
        excess = self.growth_excess
        return excess is not None and excess > self.growth_limit

    @property
    def regressed(self) -> bool:
        return self.peak.regressed or self.grows

    def peak_line(self) -> str:
        """e.g. `peak_mem_bytes on cuda:0: 1.250x [1.250, 1.250] (36.00 → 45.00 GiB median,
        95% CI, 3 vs 3 runs, tolerance 3%): more memory`: which device, and by how much."""
        c = self.peak
        gib = [statistics.median(v) / 2**30 for v in (c.reference, c.candidate)]
        return (
            f"{c.metric} on {self.device}: {c.ratio_text()} ({gib[0]:,.2f} → {gib[1]:,.2f} GiB "
            f"median, {round(c.confidence * 100)}% CI, {len(c.reference)} vs "
            f"{len(c.candidate)} runs, tolerance {c.tolerance:.0%}): {c.word}"
        )

    def growth_line(self) -> str:
        """The growth of the peak over steady steps, reference → candidate, and the call."""
        excess = self.growth_excess
        if excess is None:
            return f"mem_growth on {self.device}: not compared (not measured on both sides)"
        ref, cand = (statistics.median(v) for v in (self.growth_reference, self.growth_candidate))
        word = "grows (a leak)" if self.grows else "no growth beyond the reference's"
        return (
            f"mem_growth on {self.device}: {ref:+.2%} → {cand:+.2%} over steady steps (median "
            f"of {len(self.growth_reference)} vs {len(self.growth_candidate)} runs; "
            f"{excess:+.2%} points, limit +{self.growth_limit:.0%}): {word}"
        )

    def cell(self) -> str:
        """The report's short form: `cuda:0 36.00 → 45.00 GiB, growth +0.0% → +0.0%`."""
        gib = [statistics.median(v) / 2**30 for v in (self.peak.reference, self.peak.candidate)]
        text = f"{self.device} {gib[0]:,.2f} → {gib[1]:,.2f} GiB"
        if self.peak.regressed:
            text += f" ({self.peak.word})"
        if self.growth_excess is not None:
            ref, cand = (
                statistics.median(v) for v in (self.growth_reference, self.growth_candidate)
            )
            text += f", growth {ref:+.1%} → {cand:+.1%}" + (" (grows)" if self.grows else "")
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "peak": self.peak.to_json(),
            "growth_reference": self.growth_reference,
            "growth_candidate": self.growth_candidate,
            "growth_limit": self.growth_limit,
            "regressed": self.regressed,
        }


def sample_of(record: RunRecord, side: str, index: int) -> RunSample:
    """The run's numbers; ValueError naming what is missing (fail closed)."""
    if record.outcome != Outcome.OK:
        raise ValueError(f"outcome {record.outcome}: {record.detail or 'no detail'}")
    if not record.timing_valid:
        raise ValueError("its timing is not valid (it overlapped another run)")
    if not record.tokens_per_s:
        raise ValueError("it recorded no steady-state tokens/s")
    mem = sum(record.peak_mem_bytes.values()) if record.peak_mem_bytes else None
    gpus = tuple(u for u in record.hardware.device_uuids or () if u)
    growth: dict[str, float] = {}
    if record.mem_growth is not None:  # the record judged growth (one thread per device)
        made = {d: memory_growth(s, 0) for d, s in record.mem_series.items()}
        growth = {d: g for d, g in made.items() if g is not None}
    return RunSample(
        side, index, record.tokens_per_s, mem, record.versions.to_json(), record.wall_s, gpus,
        peak_by_device=dict(record.peak_mem_bytes), growth_by_device=growth,
    )  # fmt: skip


def _gpus(gpus: tuple[str, ...]) -> str:
    return ", ".join(gpus) if gpus else "no recorded GPU"


def gpu_mismatch(samples: Sequence[RunSample]) -> str | None:
    """Why the runs did not all step on the same GPUs, or None (they did, or none recorded any).

    An A/B compares both sides on one machine's GPU. Two H200s differ by 0.4-1.5% in the 8B's
    speed (results/h200-ab-power-8b), so a side whose environment points its runs
    at another GPU (CUDA_VISIBLE_DEVICES in --candidate-env) compares machines, not versions."""
    if len({x.gpus for x in samples}) <= 1:
        return None
    first = samples[0]
    other = next(x for x in samples if x.gpus != first.gpus)
    return (
        f"the runs did not all step on the same GPU: run {first.index + 1} ({first.side}) on "
        f"{_gpus(first.gpus)}, run {other.index + 1} ({other.side}) on {_gpus(other.gpus)}; "
        "an A/B compares both sides on one GPU"
    )


def by_side(samples: list[RunSample]) -> dict[str, list[RunSample]]:
    """The samples of each side, in run order."""
    return {s: [x for x in samples if x.side == s] for s in SIDES}


def _compare_peaks(
    peaks: dict[str, list[float]], tolerance: float, confidence: float
) -> Comparison:
    """Peak memory, candidate against reference: compared as tokens/s are (a rise is worse)."""
    return compare(
        peaks["reference"],
        peaks["candidate"],
        metric="peak_mem_bytes",
        tolerance=tolerance,
        confidence=confidence,
    )


def compare_samples(
    samples: list[RunSample], tolerance: float, confidence: float
) -> tuple[Comparison, Comparison | None, str | None]:
    """Throughput and (where every run measured it) peak memory, reference vs candidate."""
    by = by_side(samples)
    tput = compare(
        [x.tokens_per_s for x in by["reference"]],
        [x.tokens_per_s for x in by["candidate"]],
        tolerance=tolerance,
        confidence=confidence,
    )
    mems = {s: [x.peak_mem_bytes for x in by[s]] for s in SIDES}
    if any(m is None for s in SIDES for m in mems[s]):
        return tput, None, "no peak memory recorded (CPU runs measure none)"
    memory = _compare_peaks(mems, tolerance, confidence)  # type: ignore[arg-type]
    return tput, memory, None


def compare_devices(
    samples: list[RunSample], tolerance: float, confidence: float
) -> list[DeviceMemory]:
    """Each device every run measured: its peak compared (ratio, interval, call) and its
    growth, where every run measured that too. A device only some runs measured is none of
    these (the summed peak, compare_samples, still counts it)."""
    by = by_side(samples)
    if not by["reference"] or not by["candidate"]:
        return []
    devices = [d for d in samples[0].peak_by_device if all(d in x.peak_by_device for x in samples)]
    out = []
    for device in sorted(devices):
        peaks = {s: [x.peak_by_device[device] for x in by[s]] for s in SIDES}
        peak = _compare_peaks(peaks, tolerance, confidence)
        measured = all(device in x.growth_by_device for x in samples)
        growth = {s: [x.growth_by_device[device] for x in by[s]] if measured else [] for s in SIDES}
        out.append(DeviceMemory(device, peak, growth["reference"], growth["candidate"]))
    return out


def power_comparisons(
    reference: list[RunSample],
    candidate: list[RunSample],
    per_side: int,
    *,
    tolerance: float = CHANGE_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[list[Comparison], list[Comparison]]:
    """(A/A comparisons, reference-vs-candidate comparisons), each set disjoint within itself.

    A/A: consecutive blocks of 2·per_side runs of one side, split alternately (runs close in
    time land on both halves), from the reference pool and then from the candidate pool (the
    same versions on both halves either way). A/B: the i-th block of per_side reference runs
    against the i-th block of per_side candidate runs.
    """
    if per_side < 2:
        raise ValueError(f"per_side must be ≥ 2 (one run has no spread), got {per_side}")
    tps = [x.tokens_per_s for x in reference]
    cand = [x.tokens_per_s for x in candidate]
    kw = {"tolerance": tolerance, "confidence": confidence}
    aa = [
        compare(b[0::2], b[1::2], **kw)
        for pool in (tps, cand)
        for b in (pool[i : i + 2 * per_side] for i in range(0, len(pool), 2 * per_side))
        if len(b) == 2 * per_side
    ]
    n_ab = min(len(tps), len(cand)) // per_side
    ab = [
        compare(
            tps[i * per_side : (i + 1) * per_side], cand[i * per_side : (i + 1) * per_side], **kw
        )
        for i in range(n_ab)
    ]
    return aa, ab


@dataclass(frozen=True)
class PoolSpread:
    """One pool's run-to-run spread, and the runs per side it needs to catch `slowdown`."""

    side: str
    runs: int
    spread: float  # log_spread of its tokens/s
    runs_needed: int | None  # None: more than runs_needed searches (> 1000)


@dataclass(frozen=True)
class PowerSummary:
    """What `power` finds in two pools: the comparisons, false alarms, catches, and spreads."""

    per_side: int
    slowdown: float
    aa: list[Comparison]
    ab: list[Comparison]
    pools: list[PoolSpread]
    gpus: dict[tuple[str, ...], int] = field(default_factory=dict)  # GPUs -> runs, both pools

    @property
    def false_alarms(self) -> int:
        """A/A comparisons that called any change (either way is a false alarm)."""
        return sum(c.change is not Change.NONE for c in self.aa)

    @property
    def caught(self) -> int:
        """Reference-vs-candidate comparisons that called the candidate a regression."""
        return sum(c.regressed for c in self.ab)

    def lines(self) -> list[str]:
        out = []
        k = self.per_side
        for title, comps in (("A/A", self.aa), ("reference vs candidate", self.ab)):
            out.append(f"{title}: {len(comps)} disjoint comparison(s) of {k} vs {k}")
            out += [f"  {i:2d}. {comp.line()}" for i, comp in enumerate(comps, 1)]
        out += [
            f"{p.side} pool: {p.runs} runs, run-to-run spread {p.spread:.2%}; runs per side to "
            f"catch a {self.slowdown:.0%} slowdown 90% of the time: {p.runs_needed or '> 1000'}"
            for p in self.pools
        ]
        if len(self.gpus) > 1:  # pools from several calls: a comparison may pair two machines
            each = "; ".join(f"{_gpus(g)} ({n} runs)" for g, n in self.gpus.items())
            out.append(f"the pools span {len(self.gpus)} GPUs: {each}")
        out.append(
            f"A/A false alarms: {self.false_alarms} of {len(self.aa)}; "
            f"candidate called slower: {self.caught} of {len(self.ab)}"
        )
        return out


def power_summary(
    reference: list[RunSample],
    candidate: list[RunSample],
    per_side: int,
    *,
    slowdown: float = 0.05,
    tolerance: float = CHANGE_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
) -> PowerSummary:
    """power_comparisons(), with each pool's spread and the runs per side `slowdown` needs."""
    aa, ab = power_comparisons(
        reference, candidate, per_side, tolerance=tolerance, confidence=confidence
    )
    pools = []
    for name, pool in (("reference", reference), ("candidate", candidate)):
        if len(pool) >= 2:
            spread = log_spread([x.tokens_per_s for x in pool])
            need = runs_needed(spread, slowdown, tolerance=tolerance)
            pools.append(PoolSpread(name, len(pool), spread, need))
    gpus = Counter(x.gpus for x in (*reference, *candidate))
    return PowerSummary(per_side, slowdown, aa, ab, pools, dict(gpus))

"""Throughput, memory and MFU from per-step logs (steady state only, medians over windows), and
the statistics of detection rates (their interval, what more runs are likely to show).

Pure functions over numbers, so they are unit-tested without torch or GPUs.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence

# bf16 dense matmul peak per device, FLOP/s. Measured on this project's lent H200s: an
# 8192³ bf16 torch.matmul ran at 769–798 TFLOP/s (device KINDS.md; DESIGN §7 uses 790).
PEAK_BF16_FLOPS: dict[str, float] = {"NVIDIA H200": 790e12, "NVIDIA H100 80GB HBM3": 760e12}


def is_steady(n: int, compiled: bool, warmup_steps: int) -> bool:
    """Step `n` of a thread counts for throughput and memory: past warm-up, and not compiling."""
    return n >= warmup_steps and not compiled


def rate(steps: Sequence[tuple[float, int]]) -> float | None:
    seconds = sum(s for s, _ in steps)
    return sum(t for _, t in steps) / seconds if seconds > 0 else None


def windows(steps: Sequence[tuple[float, int]], n_windows: int) -> list[list[tuple[float, int]]]:
    """Split steps into up to `n_windows` contiguous, near-equal windows (each ≥ 1 step)."""
    n = min(n_windows, len(steps))
    if n == 0:
        return []
    size, extra = divmod(len(steps), n)
    out, start = [], 0
    for w in range(n):
        end = start + size + (1 if w < extra else 0)
        out.append(list(steps[start:end]))
        start = end
    return out


def aggregate_windows(
    per_thread: Sequence[Sequence[tuple[float, int]]], n_windows: int
) -> list[float]:
    """Tokens/s of all threads together in each window: the sum of each thread's window rate."""
    split = [windows(steps, n_windows) for steps in per_thread if steps]
    if not split:
        return []
    n = min(len(s) for s in split)
    return [sum(rate(s[w]) or 0.0 for s in split) for w in range(n)]


def median_and_spread(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Median and (max − min) / median; (None, None) for no values."""
    if not values:
        return None, None
    med = statistics.median(values)
    spread = (max(values) - min(values)) / med if med > 0 and len(values) > 1 else 0.0
    return med, spread


def memory_growth(series: Sequence[int], first_steady: int) -> float | None:
    """Relative growth of peak memory from the first steady step to the last; None if too short."""
    tail = list(series[first_steady:])
    if len(tail) < 2 or tail[0] <= 0:
        return None
    return (tail[-1] - tail[0]) / tail[0]


def mfu(flops_per_s: float | None, device_name: str | None, n_devices: int) -> float | None:
    """Model FLOPs utilisation: analytic FLOP/s over the devices' bf16 peak (None if unknown)."""
    peak = PEAK_BF16_FLOPS.get(device_name or "")
    if flops_per_s is None or peak is None or n_devices < 1:
        return None
    return flops_per_s / (peak * n_devices)


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a detection rate `hits / n` (sane at 0 and n, unlike ±√)."""
    if n <= 0:
        return 0.0, 1.0
    p = hits / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def predictive_hits(hits: int, runs: int, more: int) -> list[float]:
    """P(x of `more` further runs hit), for x = 0 … more, where `hits` of `runs` hit so far: the
    beta-binomial (a uniform prior on the per-run rate, updated by the runs seen)."""
    if not 0 <= hits <= runs or more < 0:
        raise ValueError(f"need 0 ≤ hits ≤ runs and more ≥ 0, got {hits}, {runs}, {more}")
    a, b = hits + 1, runs - hits + 1
    log_beta_ab = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    return [
        math.comb(more, x)
        * math.exp(
            math.lgamma(x + a) + math.lgamma(more - x + b) - math.lgamma(more + a + b) - log_beta_ab
        )
        for x in range(more + 1)
    ]


def merge(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals as sorted, disjoint intervals (touching ones joined)."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if end < start:
            raise ValueError(f"interval ends before it starts: {(start, end)}")
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def intersect(
    a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The time in both `a` and `b`, as sorted, disjoint intervals."""
    mine, theirs = merge(a), merge(b)
    out, k = [], 0
    for start, end in mine:
        while k < len(theirs) and theirs[k][1] <= start:
            k += 1
        j = k
        while j < len(theirs) and theirs[j][0] < end:
            lo, hi = max(start, theirs[j][0]), min(end, theirs[j][1])
            if hi > lo:
                out.append((lo, hi))
            j += 1
    return out


def overlap_share(
    own: Sequence[tuple[float, float]], others: Sequence[tuple[float, float]]
) -> float | None:
    """Share of the time in `own` intervals during which some interval of `others` was open;
    None when `own` covers no time."""
    mine, theirs = merge(own), merge(others)
    total = sum(e - s for s, e in mine)
    if total <= 0:
        return None
    covered, k = 0.0, 0
    for start, end in mine:
        while k < len(theirs) and theirs[k][1] <= start:
            k += 1
        j = k
        while j < len(theirs) and theirs[j][0] < end:
            covered += min(end, theirs[j][1]) - max(start, theirs[j][0])
            j += 1
    return covered / total


# Looks at two threads this close in time are one look of the sampler's: it reads one thread's
# state after the other's, microseconds apart (racegate.harness.run.activity).
SAME_LOOK_S = 0.001

Looks = tuple[Sequence[float], Sequence[int]]  # one thread's look times, and 1 where it ran


def _ran_near(looks: Looks, t: float, near_s: float) -> bool:
    """Whether a look within `near_s` of `t` found the thread running (False where none looked
    at it then: the thread had ended, or was not found yet)."""
    times, running = looks
    lo = bisect.bisect_left(times, t - near_s)
    hi = bisect.bisect_right(times, t + near_s)
    return any(running[lo:hi])


def coactivity(
    mine: Looks,
    others: Sequence[Looks],
    inside: Sequence[tuple[float, float]],
    alone_s: float,
) -> tuple[float | None, int]:
    """Of the looks inside the `inside` intervals that found one thread running (on a core, or
    ready for one), the share that found it in company: not inside a stretch of at least
    `alone_s` (first look to last) over which no look found another thread running. None: no
    look found it running; and how many looks found it running.

    Threads that take turns under a whole-step lock run alone for each turn: near 0. Threads
    of one process also hand the GIL to each other, a few milliseconds at a time (its switch
    interval is 5 ms), so at single looks they are apart often (the fault kit's `ok`: 0.51-0.96
    at one instant); a stretch alone shorter than `alone_s` is such a hand-over, not a turn.
    Each look is an instant, not an average over the time since the one before, so a late look
    (the sampler starved of a core) blurs nothing: a turn still spans the looks inside it.
    """
    times, running = mine
    company = [any(_ran_near(other, t, SAME_LOOK_S) for other in others) for t in times]
    alone = [False] * len(times)  # inside a stretch alone of at least alone_s
    k = 0
    while k < len(times):
        j = k
        while not company[j] and j + 1 < len(times) and not company[j + 1]:
            j += 1
        if not company[k] and times[j] - times[k] >= alone_s:
            alone[k : j + 1] = [True] * (j + 1 - k)
        k = j + 1
    windows = merge(inside)
    ran = met = 0
    for t, was_running, was_alone in zip(times, running, alone, strict=True):
        w = bisect.bisect_right(windows, (t, float("inf"))) - 1
        if not was_running or w < 0 or t >= windows[w][1]:
            continue
        ran += 1
        met += not was_alone
    return (met / ran if ran else None), ran


def base_shape_memory(steady: Sequence[tuple[int, int | None]]) -> list[int]:
    """Device peak after each steady (shape, peak) step on the first shape, up to its first
    switch of shape: a new shape legitimately needs more memory; a leak grows within one."""
    out: list[int] = []
    for shape, mem in steady:
        if shape != steady[0][0]:
            break
        if mem is not None:
            out.append(mem)
    return out

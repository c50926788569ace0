"""Throughput, memory and MFU from per-step logs: steady state only, medians over windows.

Pure functions over numbers, so they are unit-tested without torch or GPUs.
"""

from __future__ import annotations

import bisect
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


# A look at a thread's demand may always come this long after the one before (5× the
# sampler's period, harness.run.activity): a judge asks for no finer looks than it can take.
SHORTEST_LOOK_GAP_S = 0.01


def demand_rates(
    times: Sequence[float], demand_s: Sequence[float], longest_gap_s: float
) -> list[tuple[float, float, float]]:
    """(start, end, cores) between consecutive looks at one thread's demand, cores in [0, 1];
    a look longer than `longest_gap_s` after the one before is left out (the runner was
    starved: averaging over it would blur turns taken into work done together)."""
    out = []
    for k in range(1, len(times)):
        dt = times[k] - times[k - 1]
        if 0 < dt <= longest_gap_s:
            cores = max(0.0, demand_s[k] - demand_s[k - 1]) / dt
            out.append((times[k - 1], times[k], min(1.0, cores)))
    return out


def coactivity(
    mine: Sequence[tuple[float, float, float]],
    others: Sequence[Sequence[tuple[float, float, float]]],
    inside: Sequence[tuple[float, float]],
    *,
    bound: bool = False,
) -> tuple[float | None, int]:
    """Of one thread's demand inside the `inside` intervals, the share met by other threads'
    demand at the same time (None: it demanded nothing there), and how many looks at it that
    rests on.

    Each of its looks (start, end, cores) whose middle lies inside counts its cores a against
    the others' cores b (summed, at most 1) at that middle. Short looks: a·b of it was met, so
    threads that work together give near 1, threads that take turns near 0 (a long look that
    spans a turn's hand-over blurs the two). `bound`, for looks of any length: at least
    (a + b − 1) of it overlapped theirs, since two demands that never overlap fit in the look
    together. Turns give 0 at any look length; work done together gives less than it is, the
    less the longer the looks: a lower bound, never a pass by blur.
    """
    windows = merge(inside)
    starts = [[s for s, _, _ in o] for o in others]
    work = met = 0.0
    looks = 0
    for start, end, cores in mine:
        mid = (start + end) / 2
        k = bisect.bisect_right(windows, (mid, float("inf"))) - 1
        if k < 0 or mid >= windows[k][1]:
            continue
        dt = end - start
        looks += 1
        theirs = 0.0
        for other, firsts in zip(others, starts, strict=True):
            j = bisect.bisect_right(firsts, mid) - 1
            if j >= 0 and mid < other[j][1]:
                theirs += other[j][2]
        theirs = min(1.0, theirs)
        work += cores * dt
        met += (min(cores, max(0.0, cores + theirs - 1.0)) if bound else cores * theirs) * dt
    return (met / work if work > 0 else None), looks


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

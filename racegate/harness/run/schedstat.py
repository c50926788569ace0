"""A thread's CPU demand, read from Linux schedstat: the one reader for the stall watch (which
reads the child's threads from the runner) and the step loop (each stepping thread, its own).

Demand is time on a CPU plus time waiting on a run queue (schedstat's first two fields): a
thread that computes, or is ready to and waits for a core, whether or not the host has one free
(so an overloaded host does not lower it). A thread blocked on a lock, a futex or a sleep adds
nothing. One waiting for the GIL wakes every switch interval to ask for it, so at the race
cases' 10 µs it counts as demand (two pure-Python threads summed 1.95 cores). A GPU wait adds
too while CUDA spins (its default schedule when the host has at least as many cores as CUDA
contexts).
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

# The calling thread's own schedstat (Linux ≥ 3.17), and this process's main thread's.
THREAD_SELF = Path("/proc/thread-self/schedstat")
PROCESS_SELF = Path("/proc/self/schedstat")


def _counts(schedstat: Path) -> tuple[int, int] | None:
    with contextlib.suppress(OSError, ValueError):
        run_ns, wait_ns = (int(v) for v in schedstat.read_text().split()[:2])
        return run_ns, wait_ns
    return None


@functools.cache
def counts_kept(probe: Path = PROCESS_SELF) -> bool:
    """Whether this kernel keeps the counts: this process's main thread has run by now, so
    zeros there mean a kernel that keeps the file but not the counts (delay accounting off).
    A thread's own zeros mean nothing: a thread that has only just started reads 0 0 0."""
    counts = _counts(probe)
    return counts is not None and any(counts)


def demand_s(schedstat: Path = THREAD_SELF) -> float | None:
    """Seconds the thread has run or waited to run; None when there is no such evidence: the
    file is absent (not Linux, a kernel without CONFIG_SCHED_INFO, the thread ended) or the
    kernel keeps no counts (`counts_kept`)."""
    counts = _counts(schedstat)
    if counts is None or not counts_kept():
        return None
    return sum(counts) / 1e9

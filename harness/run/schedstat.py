"""A thread's CPU demand, read from Linux schedstat: the one reader for the stall watch (which
reads the child's threads from the runner) and the step loop (each stepping thread, its own).

Demand is time on a CPU plus time waiting on a run queue (schedstat's first two fields): a
thread that computes, or is ready to and waits for a core, whether or not the host has one free
(so an overloaded host does not lower it). A thread blocked on a lock, a futex, the GIL or a
sleep adds nothing. A GPU wait adds too while CUDA spins (its default schedule when the host has
at least as many cores as CUDA contexts).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

# The calling thread's own schedstat (Linux ≥ 3.17).
THREAD_SELF = Path("/proc/thread-self/schedstat")


def demand_s(schedstat: Path = THREAD_SELF) -> float | None:
    """Seconds the thread has run or waited to run; None when there is no such evidence: the
    file is absent (not Linux, a kernel without CONFIG_SCHED_INFO, the thread ended) or reads
    all zeros (a kernel that keeps the file but not the counts: delay accounting off)."""
    with contextlib.suppress(OSError, ValueError):
        run_ns, wait_ns = (int(v) for v in schedstat.read_text().split()[:2])
        if run_ns or wait_ns:
            return (run_ns + wait_ns) / 1e9
    return None

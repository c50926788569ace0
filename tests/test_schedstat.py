"""racegate.harness.run.schedstat: a thread's CPU demand, read from the real kernel (Linux only)."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from racegate.harness.run import schedstat

pytestmark = pytest.mark.skipif(
    not schedstat.THREAD_SELF.exists(), reason="no /proc/thread-self/schedstat on this kernel"
)


def compute_for(seconds: float) -> None:
    """CPU work with the GIL released, on this thread alone (hashlib releases it over 2 KiB)."""
    block = bytes(1 << 18)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        hashlib.sha256(block).digest()


def _demand_during(work) -> float:
    """The demand a new thread's own `work` adds, read by that thread (as the step loop does)."""
    seen: list[float] = []

    def main() -> None:
        before = schedstat.demand_s()
        work()
        after = schedstat.demand_s()
        assert before is not None and after is not None
        seen.append(after - before)

    t = threading.Thread(target=main)
    t.start()
    t.join(30)
    return seen[0]


def test_computing_demands_its_wall_time() -> None:
    # Demand counts time waiting for a core too, so a loaded host does not lower it. Waits for
    # the GIL between hashes do: another thread of this process (pytest's, xdist's) can hold it,
    # preempted on a loaded host. A fresh-clone CI run read 0.234 s of 0.3; a wait for a lock
    # or a sleep reads under 0.05 (below).
    assert _demand_during(lambda: compute_for(0.3)) > 0.15


def test_waiting_for_a_lock_or_sleeping_demands_nothing() -> None:
    lock = threading.Lock()
    lock.acquire()
    threading.Timer(0.3, lock.release).start()
    assert _demand_during(lambda: (lock.acquire(), lock.release())) < 0.05
    assert _demand_during(lambda: time.sleep(0.3)) < 0.05


def test_no_file_or_no_counts_is_no_evidence(tmp_path: Path) -> None:
    zeros = tmp_path / "schedstat"
    zeros.write_text("0 0 0\n")
    assert not schedstat.counts_kept(zeros)  # a kernel that keeps the file but not the counts
    assert schedstat.counts_kept()  # this one keeps them
    # A thread that has only just started reads zeros too: that is a demand of 0, not none
    # (treating it as none made the first read of a new thread fail at random).
    assert schedstat.demand_s(zeros) == 0.0
    assert schedstat.demand_s(tmp_path / "absent") is None


def test_a_new_threads_first_read_is_evidence() -> None:
    seen: list[float | None] = []
    for _ in range(50):
        t = threading.Thread(target=lambda: seen.append(schedstat.demand_s()))
        t.start()
        t.join(10)
    assert None not in seen and len(seen) == 50

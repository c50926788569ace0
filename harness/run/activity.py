"""Sample each stepping thread's CPU demand from the runner, every few milliseconds: the
evidence for the judge's co-activity check (harness.judge.decide.coactive_shares).

Why: a step's start and end times cannot tell threads that take turns under a whole-step lock
from threads that step together, since a thread blocked on the lock is inside its step too.
What differs is whether the threads *work* at the same time. A thread blocked on a lock, a
futex or a sleep adds no demand (harness.run.schedstat), one that computes, waits for a core
or spins on a GPU wait does. Sampled here, in the parent, the child's threads are read without
taking the child's GIL or changing its timing: the kernel keeps the counts
(/proc/<pid>/task/<tid>/schedstat), the runner only reads them.

The stepping threads are found by the native ids the child reports (harness.run.stall
reads the same event); a child that never reports them leaves no trace here.
"""

from __future__ import annotations

import contextlib
import threading
import time
from array import array
from pathlib import Path

from harness.run import schedstat, stall
from harness.run.protocol import ThreadActivity

SAMPLE_EVERY_S = 0.005  # 200 looks a second: well under a step of the cases (≥ 20 ms)
_LOOKUP_EVERY_S = 0.1  # until a child has reported its stepping threads


class ActivitySampler:
    """A daemon thread of the runner sampling the children's stepping threads until stopped."""

    def __init__(self, children: dict[int, Path], every_s: float = SAMPLE_EVERY_S) -> None:
        self._children = children  # pid → its run dir (where progress.jsonl lands)
        self._every_s = every_s
        self._tids: dict[int, list[int]] = {}
        self._looked: dict[int, float] = {}
        # pid → tid → (times, demand seconds): one array pair per thread, appended per look
        self._traces: dict[int, dict[int, tuple[array, array]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="racegate-activity", daemon=True)

    def __enter__(self) -> ActivitySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def traces(self, pid: int) -> tuple[ThreadActivity, ...]:
        """The child's stepping threads' traces, in the order it reported them (its threads'
        order); () when it never reported them or the kernel keeps no schedstat."""
        mine = self._traces.get(pid, {})
        return tuple(
            ThreadActivity(tid=tid, times=tuple(mine[tid][0]), demand_s=tuple(mine[tid][1]))
            for tid in self._tids.get(pid, [])
            if tid in mine
        )

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            self.look(time.monotonic())

    def look(self, now: float) -> None:
        """One look at every child's stepping threads (public: tests drive it by hand)."""
        for pid, run_dir in self._children.items():
            if pid not in self._tids:
                if now - self._looked.get(pid, -1e9) < _LOOKUP_EVERY_S:
                    continue
                self._looked[pid] = now
                if (tids := stall.reported_tids(run_dir)) is None:
                    continue
                self._tids[pid] = tids
            mine = self._traces.setdefault(pid, {})
            for tid in self._tids[pid]:
                demand = None
                with contextlib.suppress(OSError):
                    demand = schedstat.demand_s(Path(f"/proc/{pid}/task/{tid}/schedstat"))
                if demand is None:  # the thread ended, or the kernel keeps no counts
                    continue
                times, demands = mine.setdefault(tid, (array("d"), array("d")))
                times.append(time.monotonic())
                demands.append(demand)

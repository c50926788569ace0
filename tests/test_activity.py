"""harness.run.activity: the runner's looks at stepping threads' CPU demand, on real threads of
this process (the kernel's own schedstat counts, nothing mocked)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from harness.judge.metrics import demand_rates
from harness.run import schedstat
from harness.run.activity import ActivitySampler
from harness.run.protocol import STEPPING, ProgressEvent

pytestmark = pytest.mark.skipif(
    not schedstat.counts_kept(), reason="this kernel keeps no schedstat counts"
)


def test_a_busy_thread_demands_a_core_and_one_waiting_on_a_lock_none(tmp_path: Path) -> None:
    lock, stop, ready = threading.Lock(), threading.Event(), threading.Barrier(3)
    lock.acquire()

    def busy() -> None:
        ready.wait()
        while not stop.is_set():
            pass

    def blocked() -> None:
        ready.wait()
        with lock:
            pass

    threads = [threading.Thread(target=busy), threading.Thread(target=blocked)]
    for t in threads:
        t.start()
    tids = [t.native_id for t in threads]
    event = ProgressEvent(STEPPING, time.monotonic(), {"tids": tids})
    (tmp_path / "progress.jsonl").write_text(event.to_line())
    ready.wait()
    try:
        with ActivitySampler({os.getpid(): tmp_path}) as sampler:
            time.sleep(0.6)
    finally:
        stop.set()
        lock.release()
        for t in threads:
            t.join()
    traces = sampler.traces(os.getpid())
    assert [t.tid for t in traces] == tids
    cores = []
    for trace in traces:
        assert len(trace.times) > 30  # every 2 ms, for 0.6 s, on a loaded box too
        looks = demand_rates(trace.times, trace.demand_s, 0.05)
        cores.append(sum(c * (e - s) for s, e, c in looks) / sum(e - s for s, e, _ in looks))
    # The spinning thread shares the GIL with this one (sleeping) and the sampler: ~1 core.
    assert cores[0] > 0.5 and cores[1] < 0.02, cores


def test_a_child_that_never_names_its_threads_is_not_sampled(tmp_path: Path) -> None:
    with ActivitySampler({os.getpid(): tmp_path}) as sampler:
        time.sleep(0.05)
    assert sampler.traces(os.getpid()) == ()

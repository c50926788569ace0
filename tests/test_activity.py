"""racegate.harness.run.activity: the runner's looks at stepping threads' scheduler state, on real
threads of this process (the kernel's own /proc state, nothing mocked)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from racegate.harness.run import stall
from racegate.harness.run.activity import SAMPLER_NICE, ActivitySampler
from racegate.harness.run.protocol import ProgressEvent, Stepping

# Every test here starts child processes: the process tier (tests/conftest.py).
pytestmark = pytest.mark.process


def test_a_busy_thread_is_found_running_and_one_waiting_on_a_lock_never(tmp_path: Path) -> None:
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
    event = ProgressEvent(time.monotonic(), Stepping(tuple(tids)))
    (tmp_path / "progress.jsonl").write_text(event.to_line())
    ready.wait()
    try:
        with ActivitySampler({os.getpid(): tmp_path}) as sampler:
            time.sleep(1.5)  # the sampler's start-up (a Python) is part of it
    finally:
        stop.set()
        lock.release()
        for t in threads:
            t.join()
    traces = sampler.traces(os.getpid())
    assert [t.tid for t in traces] == tids
    for trace in traces:
        assert len(trace.times) > 30  # every 2 ms, for 1.5 s, on a loaded box too
    # Running or ready to run at nearly every look, though it shares the host with the sampler
    # and the GIL with this thread. Its CPU time (schedstat) would not have said so: the kernel
    # brings it up to date only at scheduler ticks, and looks read it as 1 0 1 0 ... cores.
    busy, blocked = (sum(t.running) / len(t.running) for t in traces)
    assert busy > 0.9 and blocked == 0, (busy, blocked)


def test_a_child_that_never_names_its_threads_is_not_sampled(tmp_path: Path) -> None:
    with ActivitySampler({os.getpid(): tmp_path}) as sampler:
        time.sleep(0.05)
    assert sampler.traces(os.getpid()) == ()


def test_the_sampler_takes_a_higher_priority_where_allowed(tmp_path: Path) -> None:
    """On a loaded host it must get a core when it looks: nice -10 as root, else as it was."""
    want = SAMPLER_NICE if os.geteuid() == 0 else os.getpriority(os.PRIO_PROCESS, 0)
    with ActivitySampler({os.getpid(): tmp_path}) as sampler:
        assert sampler.pid is not None
        stat = Path(f"/proc/{sampler.pid}/stat")
        deadline = time.monotonic() + 10  # it sets its priority once Python has started
        while (nice := int((stall.stat_fields(stat) or ["0"] * 17)[16])) != want:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
    assert nice == want

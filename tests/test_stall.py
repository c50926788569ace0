"""The stall watch: its reading of faulthandler dumps (harness.run.stacks) and of threads' CPU."""

from __future__ import annotations

import faulthandler
import os
import threading
import time
from pathlib import Path

from harness.run import lifeline, stacks, stall, threads
from harness.vocab import Schedule


def test_an_empty_or_headerless_dump_has_no_stack_to_compare() -> None:
    # A dump that did not land (the child ignored SIGUSR1, or it was still being written):
    # on the H200 cell the watch's first reader of it raised and failed every case it met.
    assert stacks.ours("") == ""
    assert stacks.ours("Fatal Python error: Segmentation fault\n") == ""


def test_only_our_own_threads_count_and_the_signalled_thread_is_no_change() -> None:
    ours = '  File "/r/harness/run/threads.py", line 149 in _thread_main\n'
    poller = '  File "/t/torch/_inductor/compile_worker/timer.py", line {} in check\n'
    head = " (most recent call first):\n"
    first = f"Thread 0xa{head}{poller.format(43)}Current thread 0xb{head}{ours}"
    later = f"Current thread 0xa{head}{poller.format(41)}Thread 0xb{head}{ours}"
    assert stacks.ours(first) == stacks.ours(later) != ""
    moved = later.replace("line 149", "line 150")
    assert stacks.ours(moved) != stacks.ours(first)


def test_a_real_dump_keeps_exactly_the_thread_waiting_in_harness_run(tmp_path: Path) -> None:
    """faulthandler's own text: a thread parked in harness/run/threads.py is ours, this test's
    main thread (in tests/) is not."""
    co = threads._Coordinator(1, threads.Plan(Schedule.BARRIER, 0, 1, [1], time.monotonic() + 60))
    parked = threading.Event()
    waiter = threading.Thread(target=co.wait, args=(parked,), daemon=True)
    waiter.start()
    time.sleep(0.2)
    path = tmp_path / "dump.txt"
    with path.open("w") as fh:
        faulthandler.dump_traceback(file=fh, all_threads=True)
    parked.set()
    waiter.join()
    mine = stacks.ours(path.read_text())
    assert len(stacks.blocks(mine)[1]) == 1, mine
    assert f"harness{os.sep}run{os.sep}threads.py" in mine and "test_stall.py" not in mine


def test_named_stepping_threads_are_found_and_their_cpu_read() -> None:
    stop = threading.Event()

    def spin() -> None:
        lifeline.name_this_thread(f"{lifeline.THREAD_PREFIX}7")
        while not stop.is_set():
            pass

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    time.sleep(0.5)
    try:
        cpu, found = stall.stepping_cpu_seconds([os.getpid()])
    finally:
        stop.set()
        t.join()
    assert found == 1
    assert cpu > 0.05  # it spun for half a second (CPU clock ticks are 10 ms)


def test_dumps_fold_to_each_threads_last_stack() -> None:
    head = " (most recent call first):\n"
    first = (
        f'Thread 0xa{head}  File "x.py", line 1 in f\nThread 0xb{head}  File "y.py", line 2 in g\n'
    )
    later = f'Fatal Python error: Aborted\n\nCurrent thread 0xa{head}  File "x.py", line 9 in f\n'
    folded = stacks.dedupe(first + later)
    assert folded.splitlines()[0] == "Fatal Python error: Aborted"
    assert "line 9 in f" in folded and "line 1 in f" not in folded  # 0xa's later stack wins
    assert "line 2 in g" in folded  # 0xb appeared once: kept

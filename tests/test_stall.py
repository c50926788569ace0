"""The stall watch: its reading of faulthandler dumps (harness.run.stacks) and of threads' CPU."""

from __future__ import annotations

import faulthandler
import os
import threading
import time
from pathlib import Path

from harness.run import lifeline, stacks, stall


def real_dump(tmp_path: Path) -> str:
    """faulthandler's own text for this process, with a thread parked in harness/run code."""
    path = tmp_path / "dump.txt"
    with path.open("w") as fh:
        faulthandler.dump_traceback(file=fh, all_threads=True)
    return path.read_text()


def test_an_empty_or_headerless_dump_has_no_stack_to_compare() -> None:
    # A dump that did not land (the child ignored SIGUSR1, or it was still being written):
    # on the H200 cell this raised in zip(strict=True) and failed every case it met.
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


def test_a_real_dump_parses_into_this_threads_block(tmp_path: Path) -> None:
    text = real_dump(tmp_path)
    assert text.strip()
    # This test's own frames are not under harness/run/: nothing of ours to compare.
    assert stacks.ours(text) == ""


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

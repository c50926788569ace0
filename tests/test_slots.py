"""The session's shared run slots: how many a case gets, and that a dead holder frees its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.run.slots import SlotPool, release


def test_a_case_gets_only_the_slots_left_free(tmp_path: Path) -> None:
    pool = SlotPool(tmp_path, 3)
    first = pool.take(2)
    assert len(first) == 2
    second = pool.take(5)  # one left
    assert len(second) == 1
    assert pool.take(1) == [] and pool.take(0) == []
    release(first)
    assert len(pool.take(4)) == 2  # the two given back; the third is still held
    release(second)


def test_a_pool_needs_a_slot(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="≥ 1 slot, got 0"):
        SlotPool(tmp_path, 0)


@pytest.mark.process
def test_a_killed_holder_frees_its_slots(tmp_path: Path) -> None:
    """Another process (a pytest-xdist worker) holds 2 of 3 slots; SIGKILLed, it gives them back:
    the kernel drops a flock with its holder, so no crash leaves the host short of slots."""
    holder = textwrap.dedent(
        f"""
        import sys, time
        from harness.run.slots import SlotPool
        held = SlotPool(__import__("pathlib").Path({str(tmp_path)!r}), 3).take(2)
        print(len(held), flush=True)
        time.sleep(300)
        """
    )
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-c", holder], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "2"
        pool = SlotPool(tmp_path, 3)
        mine = pool.take(3)
        assert len(mine) == 1  # the holder's two are busy
        release(mine)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert len(SlotPool(tmp_path, 3).take(3)) == 3

"""The host's run slots, shared by one session's race cases across pytest-xdist workers.

harness.sizing sizes the workers to the host (cores, GPU memory): one run each. A case that
stops at its first failure, or a worker with no case left, leaves its slot free; a case with
many runs to make (the production strategy at its power cap, the control's runs) takes the free
ones for a batch, so the host stays as full as the sizing allows and no fuller. A slot is an
exclusive `flock` on one of N files in a private folder the controller made: the kernel frees
it when its holder exits, however it exits, so a crashed or killed worker never keeps one
(a counter in a shared file would need its own crash recovery).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path


class Slot:
    """One held slot: an open file with an exclusive lock on it."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None


class SlotPool:
    """N slots in `folder` (files 0 … N-1)."""

    def __init__(self, folder: Path, size: int) -> None:
        if size < 1:
            raise ValueError(f"a slot pool needs ≥ 1 slot, got {size}")
        self.folder, self.size = folder, size

    @classmethod
    def make(cls, size: int) -> SlotPool:
        """A new pool in a new private folder (0700, unpredictable name)."""
        return cls(Path(tempfile.mkdtemp(prefix="racegate-slots-")), size)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def take(self, most: int) -> list[Slot]:
        """Up to `most` free slots, without waiting: [] when none is free (or most ≤ 0)."""
        held: list[Slot] = []
        for i in range(self.size):
            if len(held) >= most:
                break
            fd = os.open(self.folder / str(i), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            held.append(Slot(fd))
        return held


def release(slots: list[Slot]) -> None:
    for slot in slots:
        slot.release()

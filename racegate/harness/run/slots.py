"""The host's run slots, shared by one session's race cases across pytest-xdist workers.

racegate.harness.doors.sizing sizes the workers to the host (cores, GPU memory): one run each. A
case that stops at its first failure, or a worker with no case left, leaves its slot free; a case
with many runs to make (the production strategy at its power cap, the control's runs) takes the free
ones for a batch, so the host stays as full as the sizing allows and no fuller. A slot is an
exclusive `flock` on one of N files in a private folder the controller made: the kernel frees
it when its holder exits, however it exits, so a crashed or killed worker never keeps one
(a counter in a shared file would need its own crash recovery).

Each case waits for a slot of its own (SlotPool.own), so a session never makes more runs at
once than the host has slots. A parent that runs several sessions at once (`racegate upgrade`:
the current side's and the candidate's) makes one pool sized to the host and hands it to each
through env_names.SLOTS (`SIZE:FOLDER`), so all the sessions together keep to it too.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

# How often a case waiting for its own slot looks for a free one.
WAIT_POLL_S = 0.2
# Beside the slot files: a case waiting for its own slot holds an exclusive lock on it.
WAITING = "waiting"
# The longest a case waits for its own slot: well inside the slack of a race
# case's time limit (racegate.cases.test_race: its runs get 80% of at least 900 s).
OWN_WAIT_S = 120.0


def _lock(fd: int, kind: int) -> bool:
    """A flock of `kind` on fd, without waiting: whether it was had."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class Slot:
    """One held slot: an open file with an exclusive lock on it."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None


class SlotPool:
    """N slots in `folder` (files 0 … N-1). from_parent: a process above the session made it
    and shares it with other sessions, and removes it (the session's own pool, its controller)."""

    def __init__(self, folder: Path, size: int, *, from_parent: bool = False) -> None:
        if size < 1:
            raise ValueError(f"a slot pool needs ≥ 1 slot, got {size}")
        self.folder, self.size, self.from_parent = folder, size, from_parent

    @classmethod
    def make(cls, size: int) -> SlotPool:
        """A new pool in a new private folder (0700, unpredictable name)."""
        return cls(Path(tempfile.mkdtemp(prefix="racegate-slots-")), size)

    def handoff(self) -> str:
        """The pool as env_names.SLOTS (or a worker) reads it back: `SIZE:FOLDER`."""
        return f"{self.size}:{self.folder}"

    @classmethod
    def from_handoff(cls, value: str, where: str, *, from_parent: bool) -> SlotPool:
        """The pool `value` (`SIZE:FOLDER`, from `where`) names; ValueError, one line naming
        both, where SIZE is not a whole number ≥ 1 or FOLDER not a private folder of ours."""
        size, _, folder = value.partition(":")
        usage = f"give SIZE:FOLDER, a number ≥ 1 and a 0700 folder of user {os.getuid()}"
        if not size.isdigit() or int(size) < 1 or not folder:
            raise ValueError(f"{where} {value!r}: {usage}")
        path = Path(folder)
        if not path.is_absolute():
            raise ValueError(f"{where} {value!r}: {folder} is not an absolute folder; {usage}")
        try:
            st = os.lstat(path)  # a link is no folder of ours, wherever it points
        except OSError as exc:
            raise ValueError(f"{where} {value!r}: {folder}: {exc.strerror}; {usage}") from None
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISDIR(st.st_mode):
            raise ValueError(f"{where} {value!r}: {folder} is not an absolute folder; {usage}")
        if st.st_uid != os.getuid() or mode != 0o700:
            raise ValueError(
                f"{where} {value!r}: {folder} is not private (owner uid {st.st_uid}, mode "
                f"{mode:04o}); {usage}"
            )
        return cls(path, int(size), from_parent=from_parent)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def take(self, most: int) -> list[Slot]:
        """Up to `most` free slots, without waiting: [] when none is free (or most ≤ 0)."""
        held: list[Slot] = []
        try:
            for i in range(self.size):
                if len(held) >= most:
                    break
                fd = self._open(str(i))
                if _lock(fd, fcntl.LOCK_EX):
                    held.append(Slot(fd))
                else:
                    os.close(fd)
        except BaseException:  # a Ctrl-C mid-way: no slot stays locked for the worker's life
            release(held)
            raise
        return held

    def own(self, wait_s: float = OWN_WAIT_S) -> list[Slot]:
        """A case's own slot, waited for: a case that ran without one would put more runs on
        the host than it has slots (one H200, the session's own pool, before this waited: 10–12
        runs at once on 8 slots for the first 180 s, a run up to 2.4 times as long). While
        it waits it holds the lock on WAITING (one waiter at a time), and no batch takes extra
        slots (extra), so a freed slot goes to a case before a batch that frees and takes again
        at once would have it (the production strategy's batches, minutes of them, against the
        case's time limit). Cases hold extras one batch of runs at a time, but a batch whose
        runs hang lasts their whole deadline, so the wait ends after wait_s all the same: []
        then, and the case runs over the pool's size (one run more than the host's slots beats
        a case killed by its time limit, whose wait counts against it). No deadlock: a waiter
        holds no slot, and a holder never waits. The same in a session's own pool (one slot
        per xdist worker, borrowed by batches between a worker's cases) and in a parent's
        (other sessions share it)."""
        mine = self.take(1)
        if mine:
            return mine
        deadline = time.monotonic() + wait_s
        fd = self._open(WAITING)
        try:
            while not _lock(fd, fcntl.LOCK_EX):  # one waiter at a time
                if time.monotonic() >= deadline:
                    return []
                time.sleep(WAIT_POLL_S)
            while not (mine := self.take(1)):
                if time.monotonic() >= deadline:
                    return []
                time.sleep(WAIT_POLL_S)
            return mine
        finally:
            os.close(fd)

    def extra(self, most: int) -> list[Slot]:
        """Up to `most` free slots for a batch's extra runs, without waiting; none while a case
        waits for its own slot (own)."""
        if most <= 0:
            return []
        fd = self._open(WAITING)
        try:  # batches share it; a waiter holds it alone
            return self.take(most) if _lock(fd, fcntl.LOCK_SH) else []
        finally:
            os.close(fd)

    def _open(self, name: str) -> int:
        return os.open(self.folder / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)


def release(slots: list[Slot]) -> None:
    for slot in slots:
        slot.release()

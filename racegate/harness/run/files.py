"""Every file racegate writes, written by one of two helpers that never follow a link.

`write_whole`: a private temporary beside the target, renamed over it. A reader sees the old
file or the new one, never half of either; the temporary has an unpredictable name made with
O_EXCL|O_NOFOLLOW (tempfile.mkstemp), and os.replace renames over a link planted at the target
(the link goes, its target is untouched), so nothing is written through a link, before or
during the write; a failed write leaves no temporary behind.

`append_line`: one line appended to a file opened with O_NOFOLLOW (a link at the path, planted
before the open, is refused: ELOOP), under an exclusive lock, in whole or not at all: a short
write (a full disk) is cut back to where the file was.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from pathlib import Path

PRIVATE = 0o600  # records, decisions, anything of a run's
PUBLISHED = 0o644  # report pages and charts, made to be published (a CI artifact, a summary)


def write_whole(path: Path, data: str | bytes, *, mode: int = PRIVATE) -> None:
    """Replace `path` with `data`, with permission bits `mode`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)  # by the descriptor: nothing else can be at that name meanwhile
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _refused_link(path: Path, exc: OSError) -> OSError:
    if exc.errno == errno.ELOOP:
        return OSError(
            errno.ELOOP,
            "is a symbolic link; racegate writes nothing through a link: remove it",
            str(path),
        )
    return exc


def open_append(path: Path, *, mode: int = PRIVATE) -> int:
    """A descriptor of `path` for appending (made with `mode` if absent), never through a
    link: a link at `path` is an OSError (ELOOP) saying so."""
    try:
        return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, mode)
    except OSError as exc:
        raise _refused_link(Path(path), exc) from None


def append_line(path: Path, line: bytes, *, mode: int = PRIVATE) -> None:
    """Append `line` (ending in a newline) to `path`, made with `mode` if absent. A last line
    with no newline (a writer killed mid-line) is closed off first. On any failure the file is
    cut back to its size before, so no reader ever sees part of `line`."""
    fd = open_append(path, mode=mode)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another racegate appending: one repairs, one waits
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        try:
            done = os.write(fd, line)
            if done != len(line):  # a short write: a full disk or a file-size limit
                raise OSError(errno.ENOSPC, "short write (disk or file size limit full)", str(path))
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)  # releases the lock

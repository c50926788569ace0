"""The state folder: where every run's records land unless --results names a file.

`<checkout>/.racegate/runs/<UTC time>-<id>/records.jsonl`, each folder private (0700) and
git-ignored; one of them that is a symbolic link is refused, never followed or chmodded.
`python -m racegate report` with no records reads the latest one. `results/` only receives
what someone copies there and commits on purpose.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import secrets
import stat
from pathlib import Path

from racegate.harness.run.files import write_whole
from racegate.harness.scenario import settings

STATE_DIR = ".racegate"
RECORDS = "records.jsonl"
# In a run folder whose run ended before its end (Ctrl-C, a full disk): why. `report` with no
# records never takes such a folder for the latest run.
INCOMPLETE = "INCOMPLETE"


def checkout_root(start: Path | None = None) -> Path:
    """The folder holding pyproject.toml above `start` (the checkout), else `start` itself."""
    pyproject = settings.find_pyproject(start)
    return pyproject.parent if pyproject is not None else (start or Path.cwd()).resolve()


def runs_dir(root: Path) -> Path:
    return root / STATE_DIR / "runs"


def refuse_link(path: Path, what: str) -> None:
    """ValueError (one line) when `path` is a symbolic link (lstat: the link, not its target)."""
    try:
        is_link = stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return
    if is_link:
        raise ValueError(
            f"{what} {path} is a symbolic link (to {os.readlink(path)}); racegate writes or reads "
            "nothing through a link: remove it"
        )


def _private_dir(path: Path, *, exist_ok: bool = True) -> None:
    """Make `path` (or take it) as a private folder of this user's, refusing a link at it.

    Opened with O_NOFOLLOW and chmodded through that descriptor: a link planted at `path`,
    before or after the mkdir, is never followed."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not exist_ok:
            raise
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            refuse_link(path, "the state folder")
        raise
    try:
        if os.fstat(fd).st_uid != os.getuid():
            raise ValueError(f"the state folder {path} belongs to another user: remove it")
        os.fchmod(fd, 0o700)  # mkdir's mode is masked by the umask
    finally:
        os.close(fd)


def new_run(root: Path) -> Path:
    """A fresh private run folder; returns the records file path inside it (not yet created)."""
    for folder in (root / STATE_DIR, runs_dir(root)):
        _private_dir(folder)
    # Microseconds, so names sort in start order even for runs begun in the same second.
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    run = runs_dir(root) / f"{stamp}-{secrets.token_hex(3)}"
    _private_dir(run, exist_ok=False)  # never share a folder with another run
    return run / RECORDS


def discard_if_empty(records: Path) -> None:
    """Remove a run folder that received no record (a session that ran no scenario; an empty
    records file, as a write cut back on a full disk leaves, counts as none)."""
    folder = records.parent
    with contextlib.suppress(OSError):
        if not records.is_symlink() and records.is_file() and records.stat().st_size == 0:
            records.unlink()
    if (
        not folder.is_symlink()
        and not records.exists()
        and folder.is_dir()
        and not any(folder.iterdir())
    ):
        folder.rmdir()


def end_incomplete(records: Path, why: str) -> None:
    """A run folder whose run stopped before its end: removed where no record landed in it,
    else marked INCOMPLETE with `why` (best effort: the disk may be what failed)."""
    discard_if_empty(records)
    folder = records.parent
    if folder.is_dir() and not folder.is_symlink():
        with contextlib.suppress(OSError):
            write_whole(folder / INCOMPLETE, why + "\n")


def latest_records(root: Path) -> Path | None:
    """The newest complete run's records file that holds at least one record, or None (a
    folder marked INCOMPLETE is passed over)."""
    folder = runs_dir(root)
    for path in (root / STATE_DIR, folder):
        refuse_link(path, "the state folder")
    if not folder.is_dir():
        return None
    for run in sorted(folder.iterdir(), reverse=True):
        refuse_link(run, "the run folder")
        records = run / RECORDS
        refuse_link(records, "the records file")
        if not run.is_dir() or (run / INCOMPLETE).exists():
            continue
        if records.is_file() and records.stat().st_size > 0:
            return records
    return None

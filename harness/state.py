"""The state folder: where every run's records land unless --results names a file.

`<checkout>/.racegate/runs/<UTC time>-<id>/records.jsonl`, each folder private (0700) and
git-ignored; `python -m harness report` with no records reads the latest one. `results/`
only receives what someone copies there and commits on purpose.
"""

from __future__ import annotations

import datetime
import secrets
from pathlib import Path

from harness import settings

STATE_DIR = ".racegate"
RECORDS = "records.jsonl"


def checkout_root(start: Path | None = None) -> Path:
    """The folder holding pyproject.toml above `start` (the checkout), else `start` itself."""
    pyproject = settings.find_pyproject(start)
    return pyproject.parent if pyproject is not None else (start or Path.cwd()).resolve()


def runs_dir(root: Path) -> Path:
    return root / STATE_DIR / "runs"


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, exist_ok=True)
    path.chmod(0o700)  # mkdir's mode is masked by the umask


def new_run(root: Path) -> Path:
    """A fresh private run folder; returns the records file path inside it (not yet created)."""
    for folder in (root / STATE_DIR, runs_dir(root)):
        _private_dir(folder)
    # Microseconds, so names sort in start order even for runs begun in the same second.
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    run = runs_dir(root) / f"{stamp}-{secrets.token_hex(3)}"
    run.mkdir(mode=0o700)  # exist_ok=False: never share a folder with another run
    run.chmod(0o700)
    return run / RECORDS


def discard_if_empty(records: Path) -> None:
    """Remove a run folder that received no record (a session that ran no scenario)."""
    folder = records.parent
    if not records.exists() and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def latest_records(root: Path) -> Path | None:
    """The newest run's records file that holds at least one record, or None."""
    folder = runs_dir(root)
    if not folder.is_dir():
        return None
    for run in sorted((p for p in folder.iterdir() if p.is_dir()), reverse=True):
        records = run / RECORDS
        if records.is_file() and records.stat().st_size > 0:
            return records
    return None

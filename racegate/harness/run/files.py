"""Files written whole: a private temporary beside the target, renamed over it.

A reader sees the old file or the new one, never half of either; the temporary has an
unpredictable name made with O_EXCL (tempfile.mkstemp), so a link planted beside the target is
never written through, and a failed write leaves no temporary behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_whole(path: Path, text: str, *, mode: int = 0o600) -> None:
    """Replace `path` with `text`, with permission bits `mode`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)  # by the descriptor: nothing else can be at that name meanwhile
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

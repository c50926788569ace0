"""Read faulthandler's dumps: each thread's block, folded per thread or narrowed to ours.

The runner keeps a run's dumps (watchdog, requested, final) as evidence, folded to each thread's
last stack; the stall watch compares one dump with the next, on racegate's own threads only.
Both read the text faulthandler writes, through `blocks`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

_HEADER = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")
# racegate's own threads (the stepping threads, the worker's main thread) have a frame here.
_OURS = f"{os.sep}harness{os.sep}run{os.sep}"
# A stepping thread's outermost own frame (the worker's main thread joins them in threads.py too).
_STEPPING = re.compile(re.escape(f"{_OURS}threads.py") + r'", line \d+ in _thread_main$')


def blocks(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(notes, blocks): the other lines (e.g. "Fatal Python error"), and each thread's block,
    in order, as (thread id, [header, frame lines]); a thread may appear once per dump."""
    notes: list[str] = []
    found: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            current = [line]
            found.append((header.group(1), current))
        elif line.startswith("  ") and current is not None:
            current.append(line)
        else:
            current = None
            if line.strip():
                notes.append(line)
    return notes, found


def dedupe(text: str) -> str:
    """Dumps folded to each thread's last stack (a later dump replaces an earlier one)."""
    notes, found = blocks(text)
    last = {ident: block for ident, block in found}
    return "\n".join([*dict.fromkeys(notes), *("\n".join(b) for b in last.values())])


def ours(dump: str) -> str:
    """One dump narrowed to racegate's own threads, as the stall watch compares it.

    Other threads poll on their own (inductor's compile-worker timer, tqdm's monitor), so
    their stacks move in a deadlock too; racegate's threads are the ones that must progress.
    Which thread took the signal ("Current thread") is not a change either."""
    return "\n".join(_kept(dump, lambda line: _OURS in line))


def stepping(dump: str) -> frozenset[str]:
    """The stepping threads' stacks in a dump (or in a folded one): what must match for those
    threads to have stayed where they were."""
    return frozenset(_kept(dump, _STEPPING.search))


def _kept(dump: str, frame: Callable[[str], object]) -> list[str]:
    """The blocks with a frame line `frame` accepts, each headed "Thread <id>" (without the
    "Current" of the thread that took the signal)."""
    _, found = blocks(dump)
    return [
        "\n".join([f"Thread {ident}", *block[1:]])
        for ident, block in found
        if any(frame(line) for line in block[1:])
    ]

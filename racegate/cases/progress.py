"""Progress on a long race session: one line per run as it lands in the session's results file.

A race case makes its runs inside one pytest test, so pytest's own progress (a dot and `[ 40%]`
per case) stands still for minutes: on the 2-core box the production case's 13-30 runs took
2-5 minutes behind one dot. The controller (the only process that writes to the terminal
under pytest-xdist) reads the results file every POLL_S in a thread of its own and says each
new run: when it landed, its case, its outcome and how long it took, and how many runs have
landed. It reads the file the verdict reads (racegate.cases.terminal.session_records), so a
line is a record, and stops before the verdict block. Registered by racegate.cases.race_session
in the controller only, and silent under `-q`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from racegate.harness.judge.verdict import cell_of
from racegate.harness.run.record import RunRecord

PLUGIN_NAME = "racegate-progress"
# How often the results file is read for new runs.
POLL_S = 1.0


def line(record: RunRecord, elapsed_s: float, landed: int, of: int | None = None) -> str:
    """One run's progress line: `racegate [1:02 · 7 runs] per_device cold 1×2 run 3 of 4:
    nested_fx_error in 12.5 s` (the session's time, its runs landed so far, then this one; `of`:
    the runs its case makes, where known)."""
    minutes, seconds = divmod(int(elapsed_s), 60)
    runs = f"{landed} run{'' if landed == 1 else 's'}"
    run = f"run {record.repeat_index + 1}" + (f" of {of}" if of else "")
    return (
        f"racegate [{minutes}:{seconds:02d} · {runs}] {record.scenario.strategy} "
        f"{cell_of(record)} {run}: {record.outcome} in {record.wall_s:.1f} s"
    )


class RunProgress:
    """The thread that says each run as it lands, from the session's start to its finish."""

    def __init__(
        self,
        records: Callable[[], list[RunRecord]],
        say: Callable[[str], None],
        stamp: Callable[[], object] = lambda: None,
        planned: Callable[[RunRecord, list[RunRecord]], int | None] = lambda r, rs: None,
    ) -> None:
        """records: the session's records so far; say: writes one line; stamp: something that
        changes when records may have (the file's size): unchanged, the file is not read;
        planned: the runs a record's case makes, given the records so far (None: not known)."""
        self._records, self._say, self._stamp = records, say, stamp
        self._planned = planned
        self._seen: object = ()
        self._said = 0
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="racegate-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the thread, then says what landed since its last look (the last runs)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._look()

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            self._look()

    def _look(self) -> None:
        try:
            if (stamp := self._stamp()) is not None and stamp == self._seen:
                return
            self._seen = stamp
            records = self._records()
        except (OSError, ValueError):  # a torn or unreadable file: the verdict will say so
            return
        elapsed = time.monotonic() - self._start
        for record in records[self._said :]:
            self._said += 1
            of = self._planned(record, records[: self._said])
            self._say(line(record, elapsed, self._said, of))


class ProgressPlugin:
    """pytest's side: starts RunProgress with the session, stops it before the summary.

    Its lines go to the terminal pytest had when the session was configured (a duplicate of
    stdout's file descriptor, made then, while pytest's capture is suspended), not through
    pytest's writer: without -n the case runs in this process with its output captured (stdout
    points at pytest's capture file), and suspending that capture from this thread could race
    pytest's own suspending and resuming in the main thread."""

    def __init__(
        self,
        config: pytest.Config,
        results: Path,
        records: Callable[[], list[RunRecord]],
        planned: Callable[[RunRecord, list[RunRecord]], int | None],
    ) -> None:
        self._config = config
        self._out = os.dup(sys.__stdout__.fileno()) if sys.__stdout__ is not None else None
        self._width = 0  # pytest's writer's line width after our last line

        def size() -> int:  # the results file only grows (records are appended whole)
            return results.stat().st_size if results.exists() else 0

        self._progress = RunProgress(records, self._say, size, planned)

    def _say(self, text: str) -> None:
        if self._out is None:
            return
        reporter = self._config.pluginmanager.get_plugin("terminalreporter")
        # pytest's dots may have begun a line since our last one: ours starts a new one. (Its
        # writer does not see our lines, so its width is where it was after our last.)
        width = reporter._tw.width_of_current_line if reporter is not None else 0
        mid_line, self._width = width not in (0, self._width), width
        sys.stdout.flush()
        # The terminal gone (a closed pipe): progress is not worth a failure.
        with contextlib.suppress(OSError):
            os.write(self._out, f"{chr(10) if mid_line else ''}{text}\n".encode())

    @pytest.hookimpl(trylast=True)  # after racegate.cases.terminal has counted earlier records
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._progress.start()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._progress.stop()
        if self._out is not None:
            os.close(self._out)
            self._out = None

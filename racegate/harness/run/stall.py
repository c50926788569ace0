"""Tell a stalled run early: racegate's threads' stacks unchanged while the run sits idle.

A deadlocked run otherwise waits out its whole timeout (minutes), although its threads stop
moving within seconds. The runner samples each live child through the faulthandler dump it
already arms (lifeline.DUMP_SIGNAL, written by a C signal handler: it needs no GIL, so a
thread hung holding the GIL is seen too), but only while the run is idle (its stepping threads
burn no CPU, the whole run little), so a busy run is never interrupted. When racegate's
threads' stacks in every child stayed identical for `stall_s` seconds, the run is stalled: the
runner asks the child to stop (lifeline.GIVE_UP_SIGNAL: its threads are given up, its report
written) and kills it after a short grace if it cannot.

Why not a heartbeat from the threads: a step may legitimately take long (a compile, a big
kernel), and a heartbeat says nothing about *where* a thread stopped; the stacks do both.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from racegate.harness.run import schedstat, stacks
from racegate.harness.run.lifeline import DUMP_SIGNAL
from racegate.harness.run.protocol import ProgressEvent, ProtocolError, Stepping

SAMPLE_EVERY_S = 2.0  # between two looks at the run's CPU demand (and, when idle, its stacks)
# Cores here are CPU demand: time on a CPU plus time waiting on a run queue (_task_demand), so a
# starved thread of an overloaded host is as busy as a running one.
# Idle: racegate's stepping threads (by the native ids the child reports) use below OURS_IDLE_CORES
# and the whole run below RUN_IDLE_CORES; a deadlocked GPU run still burns 0.2-0.6 of a core
# in torch's helper threads and processes (results/h200-cell-stall-watch). With
# no stepping thread to look at (a priming run), the whole run must stay below IDLE_CORES.
# RUN_IDLE_CORES sits between that and one busy compile worker (a core), which a thread
# waiting on its compile must not be stalled beside.
OURS_IDLE_CORES = 0.05
RUN_IDLE_CORES = 0.8
IDLE_CORES = 0.15
# Working, for a run that met its timeout (too slow, not hung): positive evidence, stricter than
# "not idle" (which errs towards not interrupting): its stepping threads burned at least
# OURS_WORKING_CORES or, none reported yet, the whole run at least WORKING_CORES, above the
# 0.2-0.6 of a core a deadlocked GPU run's helpers burn.
OURS_WORKING_CORES = 0.2
WORKING_CORES = 1.0
DUMP_WAIT_S = 1.0  # longest wait for a requested dump to land in the stacks file
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


_OWN, _REAPED = (11, 12), (13, 14)  # utime stime; cutime cstime (reaped children), after comm


def stat_fields(stat: Path) -> list[str] | None:
    """A /proc .../stat file's fields after "pid (comm) " (state first), None when it is gone
    (the process or thread ended): the one reader of those files here."""
    with contextlib.suppress(OSError, ValueError):
        text = stat.read_text()
        return text[text.rindex(")") + 2 :].split()
    return None


def _ticks(stat: Path, which: tuple[int, ...]) -> int:
    """Clock ticks from a /proc .../stat file (0 when it is gone: the process or thread ended)."""
    fields = stat_fields(stat) or []
    with contextlib.suppress(ValueError, IndexError):
        return sum(int(fields[k]) for k in which)
    return 0


def _task_demand(task: Path) -> float:
    """Seconds a thread has run or waited to run (racegate.harness.run.schedstat), so a thread
    starved on an overloaded host counts as busy, not idle (a compile getting half a core is no
    deadlock). Its stat's CPU time where the kernel keeps no schedstat; 0 when the thread is
    gone."""
    demand = schedstat.demand_s(task / "schedstat")
    return demand if demand is not None else _ticks(task / "stat", _OWN) / _TICK


def demand_seconds(pids: list[int]) -> float:
    """Run + run-queue time of every thread of these processes, and the CPU of their reaped
    children (a compiler that has exited)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                total += _task_demand(Path(f"/proc/{pid}/task/{tid}"))
        total += _ticks(Path(f"/proc/{pid}/stat"), _REAPED) / _TICK
    return total


def stepping_demand_seconds(tids: dict[int, list[int]]) -> tuple[float, int]:
    """Run + run-queue time of racegate's stepping threads (pid → their native thread ids),
    and how many of them are still alive.

    By id, not by the kernel name they carry (racegate.harness.run.threads names them for humans): a
    thread that a stepping thread starts (torch's helpers, a workload's own) inherits the name.
    """
    total, found = 0.0, 0
    for pid, mine in tids.items():
        for tid in mine:
            task = Path(f"/proc/{pid}/task/{tid}")
            if task.exists():  # else the thread (or its process) ended
                total += _task_demand(task)
                found += 1
    return total, found


def reported_tids(run_dir: Path) -> list[int] | None:
    """The stepping threads' native ids a child reported (its `stepping` progress event), or
    None while it has not (yet)."""
    with contextlib.suppress(OSError), (run_dir / "progress.jsonl").open() as fh:
        for line in fh:
            # A torn last line is one being written: the event shows up at a later look.
            with contextlib.suppress(ValueError, TypeError, ProtocolError):
                event = ProgressEvent.from_line(line)
                if isinstance(event.data, Stepping):
                    return list(event.data.tids)
    return None


def request_dumps(files: dict[int, Path]) -> dict[int, str]:
    """Ask every child (pid → its stacks file) for one dump of every stack (DUMP_SIGNAL), all at
    once, then wait for them together; each one's text, or "" where none came."""
    start: dict[int, int] = {}
    for pid, path in files.items():
        try:
            size = path.stat().st_size
            os.kill(pid, DUMP_SIGNAL)
        except OSError:  # the child is gone, or its stacks file is not there (yet)
            continue
        start[pid] = size
    size, pending = dict(start), set(start)
    deadline = time.monotonic() + DUMP_WAIT_S
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        for pid in list(pending):
            try:
                new = files[pid].stat().st_size
            except OSError:
                pending.discard(pid)
                continue
            if new > start[pid] and new == size[pid]:  # grew, then stopped: the dump is whole
                pending.discard(pid)
            size[pid] = new
    dumps = dict.fromkeys(files, "")
    for pid, offset in start.items():
        with contextlib.suppress(OSError), files[pid].open("rb") as fh:
            fh.seek(offset)
            dumps[pid] = fh.read(4 * 1024 * 1024).decode(errors="replace")
    return dumps


def _started(pid: int) -> int | None:
    """When a live process started (clock ticks after boot, /proc/<pid>/stat field 22); None
    once it has exited. A pid and this tell one process from a later one given its pid."""
    fields = stat_fields(Path(f"/proc/{pid}/stat"))
    if not fields or fields[0] in ("Z", "X"):
        return None
    with contextlib.suppress(ValueError, IndexError):
        return int(fields[19])
    return None


def _alive(pid: int) -> bool:
    """A process that has not exited (a zombie has: its environ, and so the scan, is gone)."""
    return _started(pid) is not None


def descendants(roots: list[int]) -> set[int]:
    """These processes and all their live descendants (/proc/<pid>/task/<tid>/children)."""
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        # A zombie is no process of the run to the scan either (nor would it rescan forever).
        if pid in found or not _alive(pid):
            continue
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:  # it exited
            continue
        found.add(pid)
        for tid in tasks:
            with contextlib.suppress(OSError, ValueError):
                children = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
                todo += [int(c) for c in children]
    return found


@dataclass
class RunProcesses:
    """A run's processes, for its CPU time: `scan` (which reads every process's environ) runs
    again only when the set may have changed.

    It may have when a process of the set ended (its children re-parent, perhaps out of the
    children's tree) or when the children's tree holds a process the set does not; walking that
    tree costs a few reads per process of the run, the scan one per process of the host. A
    process is known by its pid and start time: a pid the kernel gave to another process since
    the scan is an ended process of the set, not a live one (its CPU is not the run's)."""

    scan: Callable[[], list[int]]
    scans: int = 0
    _known: dict[int, int] | None = None  # pid → its start time, as the scan found them

    def __call__(self, live: list[int]) -> list[int]:
        known = self._known
        if (
            known is None
            or any(_started(pid) != started for pid, started in known.items())
            or not descendants(live) <= known.keys()
        ):
            found = ((pid, _started(pid)) for pid in self.scan())
            self._known = known = {pid: t for pid, t in found if t is not None}
            self.scans += 1
        return list(known)


@dataclass
class StallWatch:
    """One run's watch over its live children (pid → its run dir); `sample()` as time passes."""

    stall_s: float
    children: dict[int, Path]
    pids_of_run: Callable[[list[int]], list[int]]  # live children → the run's processes
    until: float  # time.monotonic() after which it stops sampling (the timeout's dumps take over)
    _last_cpu: float | None = None
    _last_ours: float = 0.0
    _last_at: float = 0.0
    _dumps: dict[int, str] = field(default_factory=dict)
    _same_since: float | None = None
    idle_cores: float | None = None  # CPU over the last sample, in cores (for the reason)
    dumps_taken: int = 0
    busy: bool | None = None  # what its last look found (None: it has not looked yet)
    working: bool | None = None  # its last look found the run at work (OURS_WORKING_CORES)
    dumps_empty: int = 0  # looks where a dump never came (a handler replaced, a slow host)
    _changed_at: float | None = None  # when a dump last differed from the one before
    _looked_at: float | None = None  # when it last took dumps
    _tids: dict[int, list[int]] = field(default_factory=dict)  # stepping threads, as reported

    def note(self, now: float) -> str:
        """What the watch saw, for a run it did not call stalled (e.g. one that timed out)."""
        if self.stall_s <= 0:
            return "stall watch off"
        cpu = "no sample" if self.idle_cores is None else f"{self.idle_cores:.2f} cores"
        moved = (
            ""
            if self._changed_at is None
            else f", stacks last moved {now - self._changed_at:.0f} s before"
        )
        empty = f" ({self.dumps_empty} came back empty)" if self.dumps_empty else ""
        return f"stall watch: last CPU {cpu}, {self.dumps_taken} dump(s) taken{empty}{moved}"

    def sample(self, live: list[int], now: float) -> float | None:
        """Seconds the run has been stalled when that reaches stall_s, else None."""
        if self.stall_s <= 0 or now - self._last_at < SAMPLE_EVERY_S:
            return None
        elapsed = now - self._last_at
        idle = self._idle(live, now)
        if idle is None:
            return None
        self.busy = not idle
        if not idle:
            self._forget()
            return None
        if now >= self.until:
            # The children's own deadline dumps take over: no stack is asked for any more, but
            # the CPU still counts, for `busy` and `stalled_through` at the end.
            return None
        files = {pid: self.children[pid] / "stacks.txt" for pid in live}
        raw = request_dumps(files)
        dumps = {pid: stacks.ours(text) for pid, text in raw.items()}
        self.dumps_taken += 1
        self.dumps_empty += any(not text for text in raw.values())
        self._looked_at = now
        unchanged = all(d and self._dumps.get(pid) == d for pid, d in dumps.items())
        if self._dumps and not unchanged:
            self._changed_at = now
        self._dumps = dumps
        if not unchanged or not dumps:
            self._same_since = None
            return None
        if self._same_since is None:
            # The previous sample already showed these stacks: they have not moved since then.
            self._same_since = now - elapsed
        stalled = now - self._same_since
        return stalled if stalled >= self.stall_s else None

    def _idle(self, live: list[int], now: float) -> bool | None:
        """Whether the run sat idle since the last look (None at the first: nothing to compare)."""
        cpu = demand_seconds(self.pids_of_run(live))
        ours, stepping = stepping_demand_seconds(self._stepping(live))
        elapsed = now - self._last_at
        last_cpu, self._last_cpu, self._last_at = self._last_cpu, cpu, now
        last_ours, self._last_ours = self._last_ours, ours
        if last_cpu is None:
            return None
        self.idle_cores = max(0.0, cpu - last_cpu) / elapsed
        ours_cores = max(0.0, ours - last_ours) / elapsed
        if stepping:
            self.working = ours_cores >= OURS_WORKING_CORES
            return ours_cores < OURS_IDLE_CORES and self.idle_cores < RUN_IDLE_CORES
        self.working = self.idle_cores >= WORKING_CORES
        return self.idle_cores < IDLE_CORES

    def stalled_through(self, final: dict[int, str], now: float) -> float | None:
        """For a run whose threads did not finish: how long its stepping threads were stuck,
        when the watch's last dumps already showed them where each child's final stacks (its
        own dump at its deadline) have them, and the run stayed idle since; else None.

        A deadlock that begins less than stall_s before the watch stops asking for dumps
        (`until`) is called here instead of early, at the end of its timeout."""
        if self.stall_s <= 0 or self.busy is not False or self._looked_at is None:
            return None
        if not self._dumps or set(self._dumps) != set(final):
            return None
        for pid, seen in self._dumps.items():
            last = stacks.stepping(final[pid])
            if not last or last != stacks.stepping(seen):
                return None
        since = self._same_since if self._same_since is not None else self._looked_at
        stalled = now - since
        return stalled if stalled >= self.stall_s else None

    def _stepping(self, live: list[int]) -> dict[int, list[int]]:
        for pid in live:
            if pid not in self._tids and (tids := reported_tids(self.children[pid])) is not None:
                self._tids[pid] = tids
        return {pid: self._tids[pid] for pid in live if pid in self._tids}

    def _forget(self) -> None:
        self._dumps, self._same_since = {}, None

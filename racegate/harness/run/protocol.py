"""The child → parent protocol: typed, versioned reports of what a run did, and the evidence.

The worker writes a `ChildReport` (result.json) and `ProgressEvent`s (progress.jsonl, each
with its kind's typed data: EventData) as JSON; the runner reads them back into these
dataclasses, adds what only the parent sees (exit status, kill, OOM-killer count, stacks,
output tails) as `ChildEvidence`, and hands one `RunEvidence` to the judge. Nothing here
decides an outcome.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

PROTOCOL_VERSION = 3  # 2: Step.demand_s; 3: Step.cpu_at_return

# A thread that could not finish its steps before the run's deadline writes this mark in its
# error; the judge files it as a hang (docs/vocabulary.md).
DEADLINE_MARK = "racegate deadline"


class ProtocolError(ValueError):
    """A child's report does not match this protocol (version, kind or fields)."""


D = TypeVar("D")


@dataclass(frozen=True)
class Step:
    """One step of one thread: monotonic start/end (system-wide on Linux), what it did."""

    shape: int
    start: float
    end: float
    tokens: int
    compiled_shape: bool  # first step of this shape in this thread: it compiled, not steady
    mem_peak: int | None  # device peak bytes after the step (None on CPU)
    # The stepping thread's own CPU demand during the step (racegate.harness.run.schedstat: on a CPU
    # or waiting for one), seconds; None: the kernel gave no schedstat to read.
    demand_s: float | None
    # The stepping thread's own CPU time at the step's start (time.thread_time: the kernel's
    # sum_exec_runtime, the counter the runner's looks read from schedstat), seconds; None: not
    # read. The judge tells a thread at work in its step from one parked in it by this
    # (racegate.harness.judge.decide.interleaving).
    cpu0_s: float | None = None
    # When the workload's step call returned (monotonic), before the harness waits for the
    # device: a lock held around the call is released by then. None: not recorded.
    call_end: float | None = None
    # Each stepping thread of this process (in its slot order, this one included) at the
    # instant this step's call returned: its CPU time (its own clock, time.pthread_getcpuclockid:
    # exact, read from this thread), seconds; -1 where not readable (not started, or ended). The
    # judge tells whether another thread was at work inside its own step then
    # (racegate.harness.judge.decide.met_at_work).
    cpu_at_return: tuple[float, ...] = ()

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class ThreadReport:
    index: int
    device: str
    finished: bool
    error_text: str | None
    eager_fallbacks: int
    steps: tuple[Step, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ThreadReport:
        data = _fields(cls, raw)
        data["steps"] = tuple(_step(s) for s in raw["steps"])
        return cls(**data)


@dataclass(frozen=True)
class ChildReport:
    """result.json: everything a child that got to the end says about its run."""

    threads: tuple[ThreadReport, ...]
    versions: dict[str, str]
    hardware: dict[str, Any]
    cache_counters: dict[str, int]
    warmup_s: float | None
    flops_per_step: dict[str, float | None]  # str(shape) → analytic FLOPs
    flops_error: str | None  # the workload's flops_per_step raised this (the report still lands)
    version: int = PROTOCOL_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ChildReport:
        raw = json.loads(text)
        if raw.get("version") != PROTOCOL_VERSION:
            raise ProtocolError(
                f"child report version {raw.get('version')!r}; this runner reads {PROTOCOL_VERSION}"
            )
        data = _fields(cls, raw)
        data["threads"] = tuple(ThreadReport.from_json(t) for t in raw["threads"])
        return cls(**data)


@dataclass(frozen=True)
class Built:
    """The child built its replicas: how many threads it runs, and on what (the hardware goes
    out now, as racegate.harness.scenario.versions.hardware reads it: a run that hangs later writes
    no report)."""

    threads: int
    hardware: dict[str, Any]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Built:
        return cls(_int(raw["threads"]), dict(raw["hardware"]))


@dataclass(frozen=True)
class Stepping:
    """Its threads are stepping: their native ids, as the kernel lists them in
    /proc/<pid>/task, for the runner's stall watch (racegate.harness.run.stall) and sampler."""

    tids: tuple[int, ...]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Stepping:
        return cls(tuple(_int(t) for t in raw["tids"]))


@dataclass(frozen=True)
class CacheDeleted:
    """A `deleted` state's mid-run deletion: the bytes removed, and when it began (monotonic;
    it ended at the event's `at`)."""

    bytes: int
    start: float

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> CacheDeleted:
        return cls(_int(raw["bytes"]), float(raw["start"]))


@dataclass(frozen=True)
class StartGateWait:
    """A process of a run with one process per worker waited at its start barrier
    (racegate.harness.run.child_spec.StartGate): `met` when every sibling arrived, false when it
    gave up waiting."""

    met: bool

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> StartGateWait:
        if not isinstance(raw["met"], bool):
            raise ProtocolError(f"start_gate met is {raw['met']!r}; expected true or false")
        return cls(raw["met"])


# Each kind of progress event, the name its JSON line carries, and its data: a ThreadReport
# is a thread's report as it lands (a crash later loses nothing of it).
EventData = Built | Stepping | ThreadReport | CacheDeleted | StartGateWait
EVENT_KINDS: dict[str, type[EventData]] = {
    "built": Built,
    "stepping": Stepping,
    "thread": ThreadReport,
    "cache_deleted": CacheDeleted,
    "start_gate": StartGateWait,
}
_KIND_OF = {cls: kind for kind, cls in EVENT_KINDS.items()}


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"{value!r} is no integer")
    return value


@dataclass(frozen=True)
class ProgressEvent:
    """One progress.jsonl line: when (`at`, monotonic) and what (`data`, one of EventData);
    as JSON its kind (EVENT_KINDS' name), at, data and the protocol version."""

    at: float
    data: EventData
    version: int = PROTOCOL_VERSION

    @property
    def kind(self) -> str:
        return _KIND_OF[type(self.data)]

    def to_line(self) -> str:
        line = {"kind": self.kind, "at": self.at, "data": asdict(self.data)}
        return json.dumps({**line, "version": self.version}) + "\n"

    @classmethod
    def from_line(cls, line: str) -> ProgressEvent:
        """ProtocolError on another version, an unknown kind or data that is not its kind's;
        ValueError on a line that is no JSON (a torn line). Readers skip either."""
        raw = json.loads(line)
        if not isinstance(raw, dict):
            raise ProtocolError(f"progress event {raw!r} is no object")
        if raw.get("version") != PROTOCOL_VERSION:
            raise ProtocolError(f"progress event version {raw.get('version')!r}")
        kind = EVENT_KINDS.get(raw.get("kind"))
        if kind is None:
            known = ", ".join(EVENT_KINDS)
            raise ProtocolError(f"progress event kind {raw.get('kind')!r}; known: {known}")
        try:
            return cls(float(raw["at"]), kind.from_json(raw["data"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"progress event {raw['kind']!r} malformed: {exc!r}") from None


@dataclass(frozen=True)
class ThreadActivity:
    """One stepping thread's looks as the runner took them (racegate.harness.run.activity):
    monotonic times (system-wide, as the steps') and whether it was running or ready to run then
    (1/0)."""

    tid: int
    times: tuple[float, ...]
    running: tuple[int, ...]
    # Its CPU time at each look (schedstat's first field, seconds: up to date for a thread that
    # is not running, up to a scheduler tick behind for one that is); () where not read.
    cpu: tuple[float, ...] = ()


@dataclass(frozen=True)
class ChildEvidence:
    """What the parent knows of one child after it ended (or was killed)."""

    returncode: int | None  # negative: killed by that signal
    timed_out: bool  # the runner's deadline passed; the runner killed it
    oom_kills: int | None  # rise of the cgroup's memory.events oom_kill in its life (None: unread)
    report: ChildReport | None  # result.json, when the child got that far
    report_error: str | None  # result.json present but unreadable (why)
    progress: tuple[ProgressEvent, ...]  # always, up to a crash
    stacks: str  # every thread's last stack, one block per thread
    stderr_tail: str
    wall_s: float
    # Its stepping threads' looks, in its threads' order; () where none was sampled.
    activity: tuple[ThreadActivity, ...] = ()
    activity_error: str = (
        ""  # why the runner's sampler gave no looks (racegate.harness.run.activity)
    )
    # Its processes' PID namespace (racegate.harness.run.pidns): CONTAINED, "none: why", "" not
    # known.
    containment: str = ""
    # Its namespace's processes still alive when its worker ended, which the kernel killed.
    left_in_namespace: tuple[int, ...] = ()
    # How its worker started (racegate.harness.run.launcher): "fork", "fresh: why", "" not known.
    launch: str = ""

    def events(self, kind: type[D]) -> list[tuple[float, D]]:
        """(at, data) of each of its progress events of one kind, in order."""
        return [(e.at, e.data) for e in self.progress if isinstance(e.data, kind)]

    def threads(self) -> tuple[ThreadReport, ...]:
        """Per-thread reports: the final report's, else what progress got before a crash."""
        if self.report is not None:
            return self.report.threads
        return tuple(report for _, report in self.events(ThreadReport))

    def threads_built(self) -> int | None:
        built = self.events(Built)
        return built[0][1].threads if built else None


@dataclass(frozen=True)
class WatchEvidence:
    """What the stall watch saw of children run together (a run's, or its priming run's)."""

    stalled_s: float | None = None  # every stack unchanged, idle, this long: stopped early
    note: str = ""  # what the watch saw, when it did not call a stall
    # It called no stall and its last look found the run busy (computing, not idle): a run
    # stopped at its timeout then was too slow for it, which says nothing of a deadlock.
    busy_at_end: bool = False
    # stalled_s was found at the end (stalled_through): the run was not stopped early.
    at_deadline: bool = False


@dataclass(frozen=True)
class CacheEvidence:
    state: str
    dir: str
    prime: ChildEvidence | None  # the priming run of a warm/deleted state
    bytes_before_run: int | None
    counters: dict[str, int]  # summed over the run's children
    deleted_bytes: int | None  # summed `cache_deleted` events; None: no deletion happened
    prime_watch: WatchEvidence = WatchEvidence()  # the stall watch over the priming run
    # The cache was copied from a priming run shared by the scenario's runs (prime is its).
    prime_copied: bool = False


@dataclass(frozen=True)
class RunEvidence:
    """Everything the judge needs to decide one run; made by racegate.harness.run.runner."""

    scenario: dict[str, Any]
    children: tuple[ChildEvidence, ...]
    cache: CacheEvidence
    overridden_env: dict[str, str]  # the user's value of each variable the run replaced
    timing_valid: bool  # False when other runs overlapped this one on the host
    command: str
    repeat_index: int
    started_at: str
    wall_s: float
    parent_versions: dict[str, str]  # read by the runner, for children that never reported
    processes_left: list[int]  # pids of the run still alive after its children ended (killed)
    watch: WatchEvidence = WatchEvidence()  # the stall watch over the run's children
    test_slowdown: str | None = None  # the children's env set the test slowdown (vocab)

    @property
    def containment(self) -> str | None:
        """The run's containment: the first child's that was not contained, else theirs;
        None where no child said."""
        said = [c.containment for c in self.children if c.containment]
        return next((c for c in said if c != said[0]), said[0]) if said else None

    @property
    def launch(self) -> str | None:
        """How the run's workers started: the first child's that was not forked, else theirs;
        None where no child said."""
        said = [c.launch for c in self.children if c.launch]
        return next((c for c in said if c != said[0]), said[0]) if said else None


def _step(raw: dict[str, Any]) -> Step:
    data = _fields(Step, raw)
    data["cpu_at_return"] = tuple(float(x) for x in data["cpu_at_return"])  # JSON: a list
    return Step(**data)


def _fields(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` limited to `cls`'s fields, every one of them present (no silent defaults)."""
    names = [f.name for f in fields(cls)]
    missing = [n for n in names if n not in raw and n != "version"]
    if missing:
        raise ProtocolError(f"{cls.__name__} lacks {', '.join(missing)}")
    return {n: raw[n] for n in names if n in raw}

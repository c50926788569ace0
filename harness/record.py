"""Run records: dataclasses for one run and its threads, serialised only at the JSON boundary.

JSON Lines files are appended one whole line per write (O_APPEND + fsync, under a lock), so a
crash or hang in a later run never loses or corrupts what an earlier run recorded; a line a
killed writer tore is closed off before the next append and counted by every reader.
Schema 2: every field is written and every field must be there to read a record, except the
few added to it since (`ADDED_TO_SCHEMA_2`), which records written before them lack.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
# Fields added to schema 2 after records of it were committed (results/): a record without one
# reads as that field's default, which must say "not recorded" (None). Every other field must
# be there, and no unknown one may be.
ADDED_TO_SCHEMA_2 = frozenset(
    # ThreadRecord's: the last 3
    {
        "stalled_s",
        "busy_at_deadline",
        "test_slowdown",
        "containment",
        "step_demand_s",
        "demand_share",
        "coactive_share",
    }
)


class TornRecordsError(ValueError):
    """A records file holds lines a killed writer left unfinished."""


@dataclass
class ThreadRecord:
    index: int
    device: str
    outcome: str
    steps_done: int = 0
    error: str | None = None  # "Type: first line"
    error_text: str | None = None  # the whole chain, truncated
    eager_fallbacks: int = 0
    compile_s: float | None = None  # first step's wall time (it compiles)
    tokens_per_s: float | None = None
    step_s: list[float] = field(default_factory=list)
    shapes: list[int] = field(default_factory=list)
    span: tuple[float, float] | None = None  # monotonic start/end of its stepping
    # Share of its steady time during which another thread was inside a step (None: alone).
    overlap_share: float | None = None
    # CPU demand of each step, as step_s (seconds on a CPU or waiting for one: the step's own
    # work, not its waits for locks or sleeps); an item is None where the kernel gave
    # no schedstat. None: the record predates it.
    step_demand_s: list[float | None] | None = None
    # Its steady steps' demand over their wall time (cores), recorded, not judged (why: in
    # harness.judge.decide.demand_shares). None: no steady step with demand, or predates it.
    demand_share: float | None = None
    # Of the runner's looks that found it running in its steady steps, the share in company,
    # not in a turn alone (harness.judge.decide.coactive_shares). None: alone, or too few
    # looks found it running; or the record predates it.
    coactive_share: float | None = None


# RunRecord.hardware["device_name"] of a run none of whose children said what it ran on.
UNREPORTED_DEVICE = "unknown (child did not report)"


@dataclass
class RunRecord:
    scenario: dict[str, Any]
    outcome: str
    outcome_counts: dict[str, int]
    threads: list[ThreadRecord]
    threads_asked: int
    threads_concurrent: int
    versions: dict[str, str]
    hardware: dict[str, Any]
    tokens_per_s: float | None = None  # steady state, all threads together (median of windows)
    tokens_per_s_spread: float | None = None  # (max − min) / median over windows
    tokens_per_s_windows: list[float] = field(default_factory=list)
    compile_s: float | None = None
    peak_mem_bytes: dict[str, int] = field(default_factory=dict)
    mem_growth: float | None = None  # relative growth of peak memory over steady-state steps
    mem_series: dict[str, list[int]] = field(default_factory=dict)
    mfu: float | None = None
    flops_per_s: float | None = None
    cache: dict[str, Any] = field(default_factory=dict)  # dir, counters: proof of the state
    detail: str | None = None  # why the run as a whole got its outcome
    stacks: str | None = None  # every thread's stack, on a hang
    # A hang the stall watch called: every stack of racegate's threads unchanged, the run idle,
    # this long. None: it called none (a hang then hit the timeout), or the record predates it.
    stalled_s: float | None = None
    # A hang the stall watch did not call whose run its last look found busy: too slow for its
    # timeout (a loaded host), no deadlock shown. None: no such hang, or the record predates it.
    busy_at_deadline: bool | None = None
    wall_s: float = 0.0
    started_at: str = ""
    repeat_index: int = 0
    command: str = ""
    # False when other runs overlapped this one on the same host (`--jobs` > 1, pytest-xdist):
    # its outcome counts, its tokens/s do not (a host-bound step slows with its neighbours).
    timing_valid: bool = True
    # The user's value of each cache/temp variable the run pointed into its private root.
    overridden_env: dict[str, str] = field(default_factory=dict)
    # The test slowdown the run's children ran under ("RACEGATE_TEST_SLOWDOWN=0.05": the
    # built-in drafter adds that share of a step as extra work, for A/B calibrations), or None:
    # none, or a record from before the field. Its tokens/s judge nothing but a calibration.
    test_slowdown: str | None = None
    # Whether every process the run started died with it by the kernel: "pid_namespace" (each
    # worker's children in a PID namespace killed whole, harness.run.pidns), or "none: why"
    # (a child left behind then outlives a SIGKILLed runner). None: predates it.
    containment: str | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def timed(self) -> bool:
        """Its tokens/s may judge throughput (floors, the gate, a faster strategy): it ran alone
        on the host (timing_valid) and not under the test slowdown."""
        return self.timing_valid and self.test_slowdown is None

    @property
    def why_untimed(self) -> str:
        """Why its tokens/s judge nothing ('' when they do)."""
        if self.test_slowdown is not None:
            return f"it ran under {self.test_slowdown}, a test tool that adds work to each step"
        return "" if self.timing_valid else "it overlapped other runs (timing_valid false)"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"record schema_version {version!r}; this racegate reads {SCHEMA_VERSION}"
            )
        data = _exactly(cls, data, optional=ADDED_TO_SCHEMA_2)
        threads = [_exactly(ThreadRecord, t, optional=ADDED_TO_SCHEMA_2) for t in data["threads"]]
        for t in threads:  # JSON has no tuples
            t["span"] = tuple(t["span"]) if t["span"] is not None else None
        data["threads"] = [ThreadRecord(**t) for t in threads]
        return cls(**data)


def _exactly(
    cls: type, data: dict[str, Any], optional: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """`data` when it has every field of `cls` (those in `optional` may be absent: they take
    their default) and no other; else ValueError naming them."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__} is {type(data).__name__}, not an object")
    names = {f.name for f in fields(cls)}
    missing, extra = sorted(names - optional - data.keys()), sorted(data.keys() - names)
    if missing or extra:
        raise ValueError(
            f"{cls.__name__} fields: missing {missing or 'none'}, unknown {extra or 'none'}"
        )
    return dict(data)


def append_jsonl(path: Path, record: RunRecord) -> None:
    """Append one record as one line, atomically with respect to other appenders.

    A last line with no newline (a writer killed mid-line) is closed off first, so the new
    record is not glued onto it; readers count that torn line.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record.to_json(), sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another racegate appending: one repairs, one waits
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock


def read_jsonl_counted(path: Path) -> tuple[list[RunRecord], list[int]]:
    """Every complete record in `path`, and the line numbers of torn lines (not JSON)."""
    records, torn = [], []
    with path.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                torn.append(n)
                continue
            try:
                records.append(RunRecord.from_json(raw))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{n}: not a racegate record: {exc}") from exc
    return records, torn


def read_jsonl(path: Path, *, skip_torn: bool = False) -> list[RunRecord]:
    """Every record in `path`; torn lines raise TornRecordsError unless `skip_torn`."""
    records, torn = read_jsonl_counted(path)
    if torn and not skip_torn:
        raise TornRecordsError(
            f"{path}: {len(torn)} torn line(s) (a writer killed mid-line) at line "
            f"{', '.join(map(str, torn[:5]))}; skip them explicitly to read the rest"
        )
    return records

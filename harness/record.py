"""Run records: dataclasses for one run and its threads, serialised only at the JSON boundary.

JSON Lines files are appended one whole line per write (O_APPEND + fsync), so a crash or
hang in a later run never loses or corrupts what an earlier run recorded.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


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
    wall_s: float = 0.0
    started_at: str = ""
    repeat_index: int = 0
    command: str = ""
    # False when other runs overlapped this one on the same host (`--jobs` > 1, pytest-xdist):
    # its outcome counts, its tokens/s do not (a host-bound step slows with its neighbours).
    timing_valid: bool = True
    # The user's value of each cache/temp variable the run pointed into its private root.
    overridden_env: dict[str, str] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        data = dict(data)
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"record schema_version {version!r}; this racegate reads {SCHEMA_VERSION}"
            )
        data["threads"] = [ThreadRecord(**t) for t in data.get("threads", [])]
        return cls(**data)


def append_jsonl(path: Path, record: RunRecord) -> None:
    """Append one record as one line, atomically with respect to other appenders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record.to_json(), sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[RunRecord]:
    """Every complete record in `path`; a torn last line (a killed writer) is skipped."""
    records = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(RunRecord.from_json(json.loads(line)))
        except json.JSONDecodeError:
            continue
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: not a racegate record: {exc}") from exc
    return records

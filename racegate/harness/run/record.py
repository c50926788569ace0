"""Run records: dataclasses for one run, its threads and what it ran on, JSON only at the edge.

JSON Lines files are appended one whole line per write (O_APPEND + fsync, under a lock), so a
crash or hang in a later run never loses or corrupts what an earlier run recorded; a line a
killed writer tore is closed off before the next append and counted by every reader.
Schema 2: every field is written and every field must be there to read a record, except the
few added to it since (`ADDED_TO_SCHEMA_2`, `ADDED_TO_SCHEMA_3`), which records written before
them lack. Reading one checks every field's type and the rules every record obeys
(`check_record_json`), so each reader of records (racegate.harness.judge.inputs) refuses the
same ones, with one line. A record's
scenario, versions, hardware and cache proof are typed (Scenario, Versions, Hardware,
CacheProof) and read and write the JSON that dicts of them did, so schema 2 stands.
Schema 3 adds a run's identity (`invocation`, `run_id`): a run is counted once however often
its record is given (`unique_runs`); schema 2 records, which have none, are told apart by their
content (`RunRecord.identity`), so an exact repeat still counts once.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import math
import os
import secrets
from collections.abc import Callable, Iterable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from racegate.harness.run import checked as values
from racegate.harness.run import files
from racegate.harness.scenario.spec import Scenario, make_scenario
from racegate.harness.scenario.vocab import CacheState, Outcome, Schedule, Strategy, StrategySpec

SCHEMA_VERSION = 3
# Schema 2 records are read too: they lack the identity schema 3 added (ADDED_IN_SCHEMA_3).
READS_SCHEMAS = frozenset({2, 3})
ADDED_IN_SCHEMA_3 = frozenset({"invocation", "run_id"})
# Fields added to schema 2 after records of it were committed (results/): a record without one
# reads as that field's default, which must say "not recorded" (None). Every other field must
# be there, and no unknown one may be.
ADDED_TO_SCHEMA_2 = frozenset(
    # ThreadRecord's: the last 5
    {
        "stalled_s",
        "busy_at_deadline",
        "test_slowdown",
        "containment",
        "step_demand_s",
        "demand_share",
        "coactive_share",
        "steps_at_work",
        "steps_interleaved",
    }
)
# Fields added to schema 3 after records of it were written (ThreadRecord's steps_met and
# steps_met_at_work, RunRecord's launch): may be absent too.
ADDED_TO_SCHEMA_3 = frozenset({"steps_met", "steps_met_at_work", "launch"})


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
    # racegate.harness.judge.decide.demand_shares). None: no steady step with demand, or predates
    # it.
    demand_share: float | None = None
    # Of the runner's looks that found it running in its steady steps, the share in company,
    # not in a turn alone (racegate.harness.judge.decide.coactive_shares). None: alone, or too few
    # looks found it running; or the record predates it.
    coactive_share: float | None = None
    # Its steady steps the runner saw it at work in (its CPU time moved since the step began),
    # and of those the steps during which another thread moved on in its own step call
    # (racegate.harness.judge.decide.interleaving). None: not measured, or the record predates it.
    steps_at_work: int | None = None
    steps_interleaved: int | None = None
    # Its steady steps at whose return another thread of its process was inside a step call
    # (met), and of those the steps at whose return that thread was at work in it
    # (racegate.harness.judge.decide.met_at_work).
    # None: no other thread in its process, or the record predates it.
    steps_met: int | None = None
    steps_met_at_work: int | None = None


# RunRecord.hardware.device_name of a run none of whose children said what it ran on.
UNREPORTED_DEVICE = "unknown (child did not report)"


def _said(data: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """`data` without the fields that are None (not recorded: absent from the JSON), but
    those in `keep`, and with tuples as the lists JSON has."""
    return {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in data.items()
        if v is not None or k in keep
    }


@dataclass(frozen=True)
class Versions:
    """What a run ran, as racegate.harness.scenario.versions.software reads it (ABSENT: not
    installed). A field None was not recorded, and its JSON leaves it out: records written before
    `cuda` was read lack it, and a lost cell's record (scripts/nightly_plan.py) names torch and
    transformers."""

    torch: str
    transformers: str
    python: str | None = None
    triton: str | None = None
    cuda: str | None = None
    # Where no child reported: the versions are the parent's own reading, and this says so
    # (racegate.harness.run.runner.installed_versions).
    source: str | None = None

    def to_json(self) -> dict[str, str]:
        return _said(asdict(self))

    @classmethod
    def from_json(cls, data: object, where: str = "versions") -> Versions:
        """GateInputError, one line, on a value that is no string or a field missing/unknown."""
        raw = _exactly(cls, _table_of(_text)(data, where), where, optional=_defaulted(cls))
        return cls(**raw)


@dataclass(frozen=True)
class Hardware:
    """What a run stepped on (racegate.harness.scenario.versions.hardware). A field None was not
    recorded, and its JSON leaves it out: a run whose children never said has only device_name."""

    device_name: str | None = None  # None: a CPU (racegate.harness.judge.baselines.hardware_key)
    cpu_count: int | None = None
    cuda_device_count: int | None = None
    device_names: tuple[str, ...] | None = None  # the run's GPUs, in its devices' order
    # They tell one GPU from another of the same name: racegate.harness.ab's sides must step on one.
    # An item is None where the torch build's device properties have none.
    device_uuids: tuple[str | None, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return _said(asdict(self))

    @classmethod
    def from_json(cls, data: object, where: str = "hardware") -> Hardware:
        """GateInputError, one line, on a field of the wrong type, or unknown."""
        raw = _exactly(cls, values.table(data, where), where, optional=_defaulted(cls))
        if raw.get("device_name") is not None:
            values.text(raw["device_name"], f"{where}.device_name")
        for name in ("cuda_device_count", "cpu_count"):
            if raw.get(name) is not None:
                values.integer(raw[name], f"{where}.{name}")
        if raw.get("device_names") is not None:
            names = _list_of(_text)(raw["device_names"], f"{where}.device_names")
            raw["device_names"] = tuple(names)
        if raw.get("device_uuids") is not None:
            uuids = _list_of(_optional(_text))(raw["device_uuids"], f"{where}.device_uuids")
            raw["device_uuids"] = tuple(uuids)
        return cls(**raw)


@dataclass(frozen=True)
class CacheProof:
    """A run's proof of its cache state (racegate.harness.judge.decide.cache_findings): where the
    cache was, its counters, the bytes deleted mid-run (None: nothing was). The rest is there where
    it applies, else None and left out of the JSON: the prime_* fields and bytes_before_run where a
    priming run made the state, proven_warm where cache hits must prove it."""

    state: str
    dir: str
    counters: dict[str, int]
    deleted_bytes: int | None
    bytes_before_run: int | None = None
    prime_ok: bool | None = None
    prime_counters: dict[str, int] | None = None
    prime_copied: bool | None = None  # a copy of one priming run the scenario's runs shared
    prime_error: str | None = None  # the failed priming run's stderr, its end
    proven_warm: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return _said(asdict(self), keep=("deleted_bytes",))

    @classmethod
    def from_json(cls, data: object, where: str = "cache") -> CacheProof | None:
        """None for `{}` (a record made by hand, not by a run); GateInputError, one line, on a
        field missing, unknown or of the wrong type."""
        if values.table(data, where) == {}:
            return None
        raw = _exactly(cls, data, where, optional=_defaulted(cls))
        checks: dict[str, Callable[[object, str], Any]] = {
            "state": lambda v, w: values.choice(CacheState, v, w),
            "dir": _text,
            "counters": _table_of(_count),
            "deleted_bytes": _optional(_count),
            "bytes_before_run": _optional(_count),
            "prime_ok": _optional(_bool),
            "prime_counters": _optional(_table_of(_count)),
            "prime_copied": _optional(_bool),
            "prime_error": _optional(_text),
            "proven_warm": _optional(_bool),
        }
        for name, value in raw.items():
            checks[name](value, f"{where}.{name}")
        return cls(**raw)


@dataclass
class RunRecord:
    scenario: Scenario
    outcome: str
    outcome_counts: dict[str, int]
    threads: list[ThreadRecord]
    threads_asked: int
    threads_concurrent: int
    versions: Versions
    hardware: Hardware
    tokens_per_s: float | None = None  # steady state, all threads together (median of windows)
    tokens_per_s_spread: float | None = None  # (max − min) / median over windows
    tokens_per_s_windows: list[float] = field(default_factory=list)
    compile_s: float | None = None
    peak_mem_bytes: dict[str, int] = field(default_factory=dict)
    mem_growth: float | None = None  # relative growth of peak memory over steady-state steps
    mem_series: dict[str, list[int]] = field(default_factory=dict)
    mfu: float | None = None
    flops_per_s: float | None = None
    cache: CacheProof | None = None  # None: no proof (a record made by hand; JSON `{}`)
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
    # worker's children in a PID namespace killed whole, racegate.harness.run.pidns), or "none: why"
    # (a child left behind then outlives a SIGKILLed runner). None: predates it.
    containment: str | None = None
    # How its workers started (racegate.harness.run.launcher): "fork" (from a launcher that had
    # imported torch, transformers and the workload) or "fresh: why". None: predates it.
    launch: str | None = None
    # The run's identity: the front-door invocation that made it (`invocation()`: one `racegate
    # run`, one pytest session with its xdist workers) and the run's own random id. None: a
    # record made by hand, or one of schema 2; it is then told apart by its content (identity).
    invocation: str | None = None
    run_id: str | None = None
    schema_version: int = SCHEMA_VERSION

    @functools.cached_property
    def identity(self) -> str:
        """What makes this run this run: `invocation/run_id`, or where the record carries no
        run id, a hash of its canonical JSON (an exact copy of the line is the same run)."""
        if self.run_id:
            return f"{self.invocation or '-'}/{self.run_id}"
        return "content:" + content_hash(self)

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
        return {
            **asdict(self),
            "scenario": self.scenario.to_json(),
            "versions": self.versions.to_json(),
            "hardware": self.hardware.to_json(),
            "cache": self.cache.to_json() if self.cache else {},
        }

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        """A record from its JSON form, every field checked (`check_record_json`): a malformed
        one is a GateInputError naming the field and what is allowed, never a half-read record."""
        data = check_record_json(data)
        threads = [ThreadRecord(**t) for t in data["threads"]]
        return cls(**{**data, "threads": threads})


def _defaulted(cls: type) -> frozenset[str]:
    """The fields of dataclass `cls` that have a default: its JSON may leave them out."""
    return frozenset(
        f.name for f in fields(cls) if f.default is not MISSING or f.default_factory is not MISSING
    )


def _exactly(
    cls: type, data: object, where: str, optional: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """`data` when it has every field of `cls` (those in `optional` may be absent: they take
    their default) and no other; else GateInputError naming them."""
    if not isinstance(data, dict):
        raise values.GateInputError(f"{where} is {_json_kind(data)}; expected a JSON object")
    names = {f.name for f in fields(cls)}
    missing, extra = sorted(names - optional - data.keys()), sorted(data.keys() - names)
    if missing or extra:
        raise values.GateInputError(
            f"{where}: fields missing {missing or 'none'}, unknown {extra or 'none'}"
        )
    return dict(data)


def _json_kind(value: object) -> str:
    kinds = {bool: "true/false", int: "a number", float: "a number", str: "a string"}
    kind = "null" if value is None else kinds.get(type(value), f"a {type(value).__name__}")
    return f"{kind} ({values.shown(value)})" if value is not None else kind


def _optional(check: Callable[[object, str], Any]) -> Callable[[object, str], Any]:
    return lambda value, where: None if value is None else check(value, where)


def _list_of(check: Callable[[object, str], Any]) -> Callable[[object, str], list[Any]]:
    def checked(value: object, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise values.GateInputError(f"{where} is {_json_kind(value)}; expected a list")
        return [check(v, f"{where}[{k}]") for k, v in enumerate(value)]

    return checked


def _table_of(check: Callable[[object, str], Any]) -> Callable[[object, str], dict[str, Any]]:
    def checked(value: object, where: str) -> dict[str, Any]:
        table = values.table(value, where)
        return {k: check(v, f"{where}[{k!r}]") for k, v in table.items()}

    return checked


def _at_least(low: float) -> Callable[[object, str], float]:
    """A finite number ≥ `low` (a share, seconds, a rate that may be 0)."""

    def checked(value: object, where: str) -> float:
        number = values.optional_number(value, where, low=low)
        if number is None:
            raise values.GateInputError(f"{where} is null; expected a finite number ≥ {low}")
        return value  # type: ignore[return-value]  # as written: an int stays an int

    return checked


def _count(value: object, where: str) -> int:
    return values.integer(value, where)


def _text(value: object, where: str) -> str:
    return values.text(value, where, empty=True)


def _name(value: object, where: str) -> str:
    return values.text(value, where)


def _bool(value: object, where: str) -> bool:
    return values.boolean(value, where)


def _outcome(value: object, where: str) -> str:
    return str(values.choice(Outcome, value, where))


def _finite(value: object, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise values.GateInputError(f"{where} is {values.shown(value)}; expected a finite number")
    return value


def _span(value: object, where: str) -> tuple[float, float]:
    pair = _list_of(_finite)(value, where)
    if len(pair) != 2:
        raise values.GateInputError(f"{where} is {values.shown(value)}; expected [start, end]")
    return pair[0], pair[1]  # JSON has no tuples


_SECONDS = _at_least(0.0)
_THREAD_FIELDS: dict[str, Callable[[object, str], Any]] = {
    "index": _count,
    "device": _name,
    "outcome": _outcome,
    "steps_done": _count,
    "error": _optional(_text),
    "error_text": _optional(_text),
    "eager_fallbacks": _count,
    "compile_s": _optional(_SECONDS),
    "tokens_per_s": _optional(_SECONDS),
    "step_s": _list_of(_SECONDS),
    "shapes": _list_of(_count),
    "span": _optional(_span),
    "overlap_share": _optional(_SECONDS),
    "step_demand_s": _optional(_list_of(_optional(_SECONDS))),
    "demand_share": _optional(_SECONDS),
    "coactive_share": _optional(_SECONDS),
    "steps_at_work": _optional(_count),
    "steps_interleaved": _optional(_count),
    "steps_met": _optional(_count),
    "steps_met_at_work": _optional(_count),
}


def _positive_rate(value: object, where: str) -> float:
    values.positive_number(value, where)
    return value  # type: ignore[return-value]


def _outcome_counts(value: object, where: str) -> dict[str, int]:
    counts = values.table(value, where)
    for name, n in counts.items():
        _outcome(name, f"{where} key {name!r}")
        values.integer(n, f"{where}[{name!r}]")
    return counts


_RUN_FIELDS: dict[str, Callable[[object, str], Any]] = {
    "scenario": lambda value, where: check_scenario_json(value, where),
    "outcome": _outcome,
    "outcome_counts": lambda value, where: _outcome_counts(value, where),
    "threads": lambda value, where: _list_of(check_thread_json)(value, where),
    "threads_asked": lambda value, where: values.integer(value, where, low=1),
    "threads_concurrent": _count,
    "versions": Versions.from_json,
    "hardware": Hardware.from_json,
    "tokens_per_s": _optional(_positive_rate),
    "tokens_per_s_spread": _optional(_SECONDS),
    "tokens_per_s_windows": _list_of(_SECONDS),
    "compile_s": _optional(_SECONDS),
    "peak_mem_bytes": _table_of(_count),
    "mem_growth": _optional(_finite),
    "mem_series": _table_of(_list_of(_count)),
    "mfu": _optional(_SECONDS),
    "flops_per_s": _optional(_SECONDS),
    "cache": CacheProof.from_json,
    "detail": _optional(_text),
    "stacks": _optional(_text),
    "stalled_s": _optional(_SECONDS),
    "busy_at_deadline": _optional(_bool),
    "containment": _optional(_name),
    "launch": _optional(_text),
    "invocation": _optional(_name),
    "run_id": _optional(_name),
    "wall_s": _SECONDS,
    "started_at": _text,
    "repeat_index": _count,
    "command": _text,
    "timing_valid": _bool,
    "overridden_env": _table_of(_text),
    "test_slowdown": _optional(_text),
    "schema_version": _count,
}


def check_thread_json(data: object, where: str) -> dict[str, Any]:
    """One thread's JSON: every field there (ADDED_TO_SCHEMA_2 and _3 may be absent) and of its
    type."""
    raw = _exactly(ThreadRecord, data, where, optional=ADDED_TO_SCHEMA_2 | ADDED_TO_SCHEMA_3)
    return {k: _THREAD_FIELDS[k](v, f"{where}.{k}") for k, v in raw.items()}


# Fields added to the scenario after records of schema 2 were committed: may be absent.
# strategy_spec: only a workload's own strategy writes it (racegate's come from the registry);
# production/control: the roles the run was judged under (absent: the built-in drafter's).
ADDED_TO_SCENARIO = frozenset({"stall_s", "strategy_spec", "production", "control"})


def check_scenario_json(data: object, where: str = "scenario") -> Scenario:
    """A record's scenario as written (`Scenario.to_json`): every field there, each of its
    type and a value `make_scenario` accepts, made into the Scenario it describes."""
    raw = _exactly(Scenario, data, where, optional=ADDED_TO_SCENARIO)
    choices = {"strategy": Strategy, "cache_state": CacheState, "schedule": Schedule}
    if raw.get("strategy_spec") is not None:  # a workload's own strategy: any name, its spec
        del choices["strategy"]
        values.text(raw["strategy"], f"{where}.strategy")
    for name, enum in choices.items():
        values.choice(enum, raw[name], f"{where}.{name}")
    values.text(raw["preset"], f"{where}.preset")
    for role in ("production", "control"):
        if raw.get(role) is not None:
            values.text(raw[role], f"{where}.{role}")
    values.text(raw["workload"], f"{where}.workload")
    _list_of(values.text)(raw["devices"], f"{where}.devices")
    _list_of(values.text)(raw["target_devices"], f"{where}.target_devices")
    for name in ("threads_per_device", "steps"):
        values.integer(raw[name], f"{where}.{name}", low=1)
    values.integer(raw["warmup_steps"], f"{where}.warmup_steps")
    values.integer(raw["seed"], f"{where}.seed")
    values.positive_number(raw["timeout_s"], f"{where}.timeout_s")
    values.optional_number(raw.get("stall_s", 0.0), f"{where}.stall_s")
    if raw["switch_interval_s"] is not None:
        values.positive_number(raw["switch_interval_s"], f"{where}.switch_interval_s")
    values.table(raw["extra"], f"{where}.extra")
    if raw.get("strategy_spec") is not None:
        raw["strategy_spec"] = _strategy_spec_json(raw["strategy_spec"], f"{where}.strategy_spec")
    try:
        return make_scenario(**raw)
    except ValueError as exc:
        raise values.GateInputError(f"{where}: {exc}") from None


# A workload strategy's spec as records wrote it before a field was renamed: old name → new.
RENAMED_IN_STRATEGY_SPEC = {"processes": "one_process_per_worker"}


def _strategy_spec_json(data: object, where: str) -> dict[str, Any]:
    """A workload strategy's spec as written (`StrategySpec` fields; those with a default may
    be absent, a field's old name reads as its new one); GateInputError naming the fields."""
    spec = values.table(data, where)
    spec = {RENAMED_IN_STRATEGY_SPEC.get(k, k): v for k, v in spec.items()}
    spec = _exactly(StrategySpec, spec, where, optional=_defaulted(StrategySpec))
    for name, value in spec.items():
        if name != "judged_by":
            values.boolean(value, f"{where}.{name}")
    if spec.get("judged_by") is not None:
        values.text(spec["judged_by"], f"{where}.judged_by")
    return spec


def check_record_json(data: object) -> dict[str, Any]:
    """A run record's JSON, checked field by field and against the rules every record obeys
    (`record_rule_broken`); GateInputError, one line, on the first thing wrong."""
    if not isinstance(data, dict):
        raise values.GateInputError(
            f"the line is {_json_kind(data)}; expected a run record (an object)"
        )
    version = data.get("schema_version")
    if version not in READS_SCHEMAS or isinstance(version, bool):
        raise values.GateInputError(
            f"schema_version is {values.shown(version)}; this racegate reads "
            f"{' and '.join(map(str, sorted(READS_SCHEMAS)))}"
        )
    optional = ADDED_TO_SCHEMA_2 | ADDED_TO_SCHEMA_3
    optional |= ADDED_IN_SCHEMA_3 if version == 2 else frozenset()
    raw = _exactly(RunRecord, data, "record", optional=optional)
    if version == 2 and raw.keys() & ADDED_IN_SCHEMA_3:
        raise values.GateInputError(
            f"schema_version 2 with {sorted(raw.keys() & ADDED_IN_SCHEMA_3)}, which schema 3 "
            "added; a record is one schema or the other"
        )
    checked = {k: _RUN_FIELDS[k](v, k) for k, v in raw.items()}
    checked["schema_version"] = SCHEMA_VERSION  # read as it is now: a run with no identity
    if broken := record_rule_broken(checked):
        raise values.GateInputError(broken)
    return checked


def record_rule_broken(record: dict[str, Any]) -> str | None:
    """What a checked record's fields (`check_record_json`) break of the rules every record
    obeys (None: nothing).

    `ok` means every thread asked for ran, finished its steps, ok, and all of them together
    (docs/vocabulary.md): racegate.harness.judge.decide writes no other `ok`."""
    asked, concurrent = record["threads_asked"], record["threads_concurrent"]
    scenario: Scenario = record["scenario"]
    per_scenario = scenario.threads
    if asked != per_scenario:
        return (
            f"threads_asked is {asked}, but the scenario asks for {per_scenario} "
            "(threads_per_device × devices)"
        )
    if concurrent > asked:
        return f"threads_concurrent is {concurrent}, more than threads_asked {asked}"
    if record["outcome"] != Outcome.OK:
        return None
    threads = record["threads"]
    quota = scenario.warmup_steps + scenario.steps
    if len(threads) != asked:
        return f"outcome ok with {len(threads)} thread record(s) of {asked} asked"
    for t in threads:
        if t["outcome"] != Outcome.OK:
            return f"outcome ok, but threads[{t['index']}].outcome is {t['outcome']!r}"
        if t["steps_done"] < quota:
            return (
                f"outcome ok, but threads[{t['index']}] did {t['steps_done']} of its "
                f"{quota} steps (warmup_steps + steps)"
            )
    if concurrent != asked:
        return (
            f"outcome ok with threads_concurrent {concurrent} of {asked} asked; a run whose "
            "threads did not all run together is not_concurrent, never ok"
        )
    return None


# pytest-xdist gives each worker of one session this id (its controller's): the workers' runs
# are one invocation's.
XDIST_RUN_ID = "PYTEST_XDIST_TESTRUNUID"
_invocation: str | None = None


def invocation() -> str:
    """This front-door invocation's id, made once per process: a pytest session's xdist
    workers share their controller's (XDIST_RUN_ID); `racegate run` starts a new one
    (`begin_invocation`)."""
    global _invocation
    if _invocation is None:
        given = os.environ.get(XDIST_RUN_ID, "")
        ok = 0 < len(given) <= 64 and given.isascii() and given.isalnum()
        _invocation = given if ok else secrets.token_hex(8)
    return _invocation


def begin_invocation() -> str:
    """A new invocation for this process, whatever it inherited (the CLI's main)."""
    global _invocation
    _invocation = secrets.token_hex(8)
    return _invocation


def content_hash(record: RunRecord) -> str:
    """A hash of the record's canonical JSON (sorted keys): equal for equal records."""
    text = json.dumps(record.to_json(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def unique_runs(
    records: Iterable[RunRecord], seen: Iterable[RunRecord] = ()
) -> tuple[list[RunRecord], int]:
    """`records` with each run once (by RunRecord.identity; those also in `seen` left out),
    and how many were dropped as duplicates. Two records that claim one run id but differ are
    a GateInputError: one of them is not what that run recorded."""
    kept: dict[str, RunRecord] = {r.identity: r for r in seen}
    out, dropped = [], 0
    for r in records:
        key = r.identity
        if key in kept:
            if r.run_id and content_hash(r) != content_hash(kept[key]):
                raise values.GateInputError(
                    f"two different records claim run {key} (invocation/run id); a run is "
                    "recorded once: remove the one that was edited or made by hand"
                )
            dropped += 1
            continue
        kept[key] = r
        out.append(r)
    return out, dropped


def append_jsonl(path: Path, record: RunRecord) -> None:
    """Append one record as one line, whole or not at all (racegate.harness.run.files.append_line:
    never through a link, one write, a short write cut back), atomically with respect to other
    appenders. A last line with no newline (a writer killed mid-line) is closed off first, so the
    new record is not glued onto it; readers count that torn line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.append_line(path, (json.dumps(record.to_json(), sort_keys=True) + "\n").encode())


def read_jsonl_counted(path: Path) -> tuple[list[RunRecord], list[int]]:
    """Every record in `path`, each checked (RunRecord.from_json), and the line numbers of
    torn lines (not JSON: a writer killed mid-line). A line that is JSON but no valid record,
    or a file none of whose lines is JSON, is a GateInputError naming `path:line`."""
    records, torn, lines = [], [], 0
    try:
        with path.open(encoding="utf-8") as fh:
            # A shared lock against append_jsonl's exclusive one: a record being appended is
            # read whole or not at all, never as a torn line (cases read the session's file
            # while others append to it: racegate.cases.test_race polls it).
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH)
            text = fh.read()  # newlines translated: "\n" ends every line
    except UnicodeDecodeError:
        raise values.GateInputError(
            f"{path}: not a JSON-lines file (not UTF-8 text); give racegate's records files"
        ) from None
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        lines += 1
        try:
            raw = json.loads(line)
        except json.JSONDecodeError:
            torn.append(n)
            continue
        try:
            records.append(RunRecord.from_json(raw))
        except values.GateInputError as exc:
            raise values.GateInputError(f"{path}:{n}: {exc}") from None
    if torn and len(torn) == lines:
        raise values.GateInputError(
            f"{path}:{torn[0]}: not a JSON-lines file (no line of it is JSON); give racegate's "
            "records files (pytest --racegate-results / racegate run --out)"
        )
    return records, torn


def read_jsonl(path: Path, *, skip_torn: bool = False) -> list[RunRecord]:
    """Every record in `path`; torn lines raise TornRecordsError unless `skip_torn`."""
    records, torn = read_jsonl_counted(path)
    if torn and not skip_torn:
        raise TornRecordsError(
            f"{path}:{torn[0]}: {len(torn)} torn line(s), not JSON (a writer killed mid-line?), "
            f"at line {', '.join(map(str, torn[:5]))}; delete them to read the rest"
        )
    return records

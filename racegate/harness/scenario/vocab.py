"""The shared vocabulary (docs/vocabulary.md): strategies, cache states, schedules, outcomes.

Every other module, the CLI, pytest and nox name things through these, so an
unknown value is rejected in one place with one message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from racegate.harness.scenario import env_names

E = TypeVar("E", bound=StrEnum)


class Strategy(StrEnum):
    """How the workload compiles its attention (docs/vocabulary.md)."""

    PER_DEVICE = "per_device"  # dict of torch.compile(flex) keyed by device, the incident's code
    SINGLETON = "singleton"  # transformers' own process-global compiled flex
    WARMUP = "warmup"  # per_device, compiled single-threaded up front, then fail_on_recompile
    # warmup + one process-wide lock around the compiled call: dynamo's cache lookup can miss a
    # matching entry when threads look up at once (results/guard-lookup-spurious-miss)
    WARMUP_LOCKED = "warmup_locked"
    PROCESSES = "processes"  # one process per device, no threads (harness-level)
    NESTED_FX_OFF = "nested_fx_off"  # per_device + error_on_nested_fx_trace=False: the silent "fix"
    EAGER = "eager"  # flex_attention uncompiled
    SDPA_DENSE = (
        "sdpa_dense"  # dense boolean-mask SDPA, uncompiled: reference and CPU training path
    )


@dataclass(frozen=True, kw_only=True)
class StrategySpec:
    """What a strategy is, as data: every list, check and report reads these fields.

    Keyword-only, and every field is read somewhere (racegate/model/strategies.py,
    racegate/harness/run/*, racegate/harness/doors/options.py, the judge): adding a strategy is a
    row here, its kernel in racegate/model/strategies.py if it has a new one, and its row in
    docs/vocabulary.md."""

    compiled: bool  # calls a torch.compile'd kernel (so a silent eager fallback can exist)
    warmed_up: bool  # compiled single-threaded up front, then set_stance("fail_on_recompile")
    locked: bool  # the compiled call runs under one process-wide lock
    one_process_per_worker: bool  # one process per worker, no threads (the harness's topology)
    counts_fallbacks: bool  # the replica counts its compiled kernel's eager fallbacks
    trains_on_cpu: bool  # has a CPU training path (flex has no CPU backward)
    in_suite: bool  # the race suite runs it by default
    # Compiles lazily in a thread while other threads run compiled code: exposed to the
    # cross-thread tracing race, so a clean run only means something if the race was
    # producible here (docs/gate.md, "masked").
    races_lazily: bool
    # Stands in for another strategy's floor: the same compiled step without the race.
    judged_by: str | None = None
    # Sets dynamo's error_on_nested_fx_trace=False in the replica's thread: the incident's
    # silent "fix", which turns the race into a silent eager fallback.
    nested_fx_trace_off: bool = False
    # Has a throughput case of its own against a measured floor (racegate/cases/test_throughput.py).
    has_floor: bool = False


STRATEGIES: dict[Strategy, StrategySpec] = {
    Strategy.PER_DEVICE: StrategySpec(
        compiled=True,
        warmed_up=False,
        locked=False,
        one_process_per_worker=False,
        counts_fallbacks=True,
        trains_on_cpu=True,
        in_suite=True,
        races_lazily=True,
        has_floor=True,
    ),
    Strategy.SINGLETON: StrategySpec(
        compiled=True,
        warmed_up=False,
        locked=False,
        one_process_per_worker=False,
        counts_fallbacks=False,
        trains_on_cpu=False,
        in_suite=True,
        races_lazily=True,
    ),
    Strategy.WARMUP: StrategySpec(
        compiled=True,
        warmed_up=True,
        locked=False,
        one_process_per_worker=False,
        counts_fallbacks=True,
        trains_on_cpu=True,
        in_suite=True,
        races_lazily=False,
        has_floor=True,
    ),
    Strategy.WARMUP_LOCKED: StrategySpec(
        compiled=True,
        warmed_up=True,
        locked=True,
        one_process_per_worker=False,
        counts_fallbacks=True,
        trains_on_cpu=True,
        in_suite=True,
        races_lazily=False,
        judged_by="warmup",
        has_floor=True,
    ),
    Strategy.PROCESSES: StrategySpec(
        compiled=True,
        warmed_up=False,
        locked=False,
        one_process_per_worker=True,
        counts_fallbacks=True,
        trains_on_cpu=True,
        in_suite=True,
        races_lazily=False,
    ),
    Strategy.NESTED_FX_OFF: StrategySpec(
        compiled=True,
        warmed_up=False,
        locked=False,
        one_process_per_worker=False,
        counts_fallbacks=True,
        trains_on_cpu=True,
        in_suite=True,
        races_lazily=True,
        judged_by="warmup",
        nested_fx_trace_off=True,
    ),
    Strategy.EAGER: StrategySpec(
        compiled=False,
        warmed_up=False,
        locked=False,
        one_process_per_worker=False,
        counts_fallbacks=False,
        trains_on_cpu=False,
        in_suite=False,
        races_lazily=False,
    ),
    Strategy.SDPA_DENSE: StrategySpec(
        compiled=False,
        warmed_up=False,
        locked=False,
        one_process_per_worker=False,
        counts_fallbacks=False,
        trains_on_cpu=True,
        in_suite=False,
        races_lazily=False,
    ),
}


# The fields that say how a strategy meets the race (what it compiles, when, under which lock,
# in which topology): two strategies alike in these meet the same facts about torch, whatever
# their names (racegate/harness/expectations/race.toml's `about = "torch"` rows).
RACE_FIELDS = (
    "compiled",
    "warmed_up",
    "locked",
    "one_process_per_worker",
    "races_lazily",
    "nested_fx_trace_off",
)


def same_race_spec(a: StrategySpec, b: StrategySpec) -> bool:
    """The two specs meet the race alike (RACE_FIELDS)."""
    return all(getattr(a, f) == getattr(b, f) for f in RACE_FIELDS)


def strategies_where(**fields: bool) -> tuple[Strategy, ...]:
    """The strategies whose spec has every given field value, in registry order."""
    return tuple(
        s for s, spec in STRATEGIES.items() if all(getattr(spec, k) == v for k, v in fields.items())
    )


def spec_of(name: str, own: Mapping[str, StrategySpec] | None = None) -> StrategySpec:
    """The spec of strategy `name`: the registry's for a built-in name, else the workload's own
    (`own`, from its roles()); ValueError naming the known ones otherwise."""
    if name in set(Strategy):
        return STRATEGIES[Strategy(name)]
    if own and name in own:
        return own[name]
    known = [*map(str, Strategy), *(own or {})]
    raise ValueError(f"unknown strategy {name!r}; choose from: {', '.join(known)}")


# Strategies the harness warms up (every device × shape, one thread) and then runs under
# set_stance("fail_on_recompile").
WARMED_UP = frozenset(strategies_where(warmed_up=True))

# Strategies that compile nothing: no silent fallback to detect, no compile cache to prove.
UNCOMPILED = frozenset(strategies_where(compiled=False))


class CacheState(StrEnum):
    COLD = "cold"  # empty private inductor/triton cache
    WARM = "warm"  # filled by a prior single-threaded run of the same scenario
    DELETED = "deleted"  # filled, then removed while the run is in progress

    @property
    def spec(self) -> CacheStateSpec:
        return CACHE_STATES[self]

    @property
    def primed(self) -> bool:
        """A priming run fills the cache before the run (warm, deleted)."""
        return self.spec.primed


@dataclass(frozen=True, kw_only=True)
class CacheStateSpec:
    """What a cache state is, as data: the runner, worker, CLI and decide read these fields, so
    adding a state is a row here, its effect where a new field is read, and its docs row."""

    primed: bool  # a single-threaded priming run fills the private cache first (runner)
    proven_by_hits: bool  # the run must show cache hits, else the state was not reached (decide)
    # The cache is deleted at the first steady step while the run goes on (worker); a run
    # that deleted nothing did not reach the state (decide); needs a second shape (CLI).
    deleted_mid_run: bool


CACHE_STATES: dict[CacheState, CacheStateSpec] = {
    CacheState.COLD: CacheStateSpec(primed=False, proven_by_hits=False, deleted_mid_run=False),
    CacheState.WARM: CacheStateSpec(primed=True, proven_by_hits=True, deleted_mid_run=False),
    CacheState.DELETED: CacheStateSpec(primed=True, proven_by_hits=False, deleted_mid_run=True),
}


class Schedule(StrEnum):
    """When each thread starts compiling relative to the others."""

    BARRIER = "barrier"  # all threads released together
    STAGGERED = "staggered"  # thread i starts once threads < i are in steady state
    RECOMPILE = "recompile"  # all steady, then the threads compile new shapes in turns


class Outcome(StrEnum):
    """What happened to one thread or one run; ordered worst-first by SEVERITY."""

    OK = "ok"
    NESTED_FX_ERROR = "nested_fx_error"
    SILENT_FALLBACK = "silent_fallback"
    RECOMPILE_BLOCKED = "recompile_blocked"
    OTHER_ERROR = "other_error"
    # Ran clean, but some thread's steady steps did not overlap other threads' steps enough
    # to have raced: proves nothing about the race (docs/gate.md).
    NOT_CONCURRENT = "not_concurrent"
    HANG = "hang"
    # Reached its deadline while the stall watch found its threads still at work: overload, no
    # evidence for or against a race (neither clean nor failed;
    # racegate.harness.judge.race_evidence).
    TIMEOUT = "timeout"
    OOM = "oom"
    CRASH = "crash"


# A run's outcome is its worst thread's; crash/hang first because they lose data.
SEVERITY: tuple[Outcome, ...] = (
    Outcome.CRASH,
    Outcome.HANG,
    Outcome.OOM,
    Outcome.NESTED_FX_ERROR,
    Outcome.SILENT_FALLBACK,
    Outcome.RECOMPILE_BLOCKED,
    Outcome.OTHER_ERROR,
    Outcome.TIMEOUT,
    Outcome.NOT_CONCURRENT,
    Outcome.OK,
)

# Outcomes that are neither clean nor a failure: the run shows nothing either way. `timeout`:
# too slow to judge (at work at its deadline); `not_concurrent`: its threads were not shown
# running together. Such a run never makes a strategy UNSAFE, never counts as a clean run and
# never gives the positive control power (docs/gate.md, racegate.harness.judge.race_evidence).
NO_EVIDENCE: frozenset[Outcome] = frozenset({Outcome.TIMEOUT, Outcome.NOT_CONCURRENT})


def is_failure(outcome: str) -> bool:
    """The outcome is evidence that the step failed: neither `ok` nor a NO_EVIDENCE outcome."""
    return outcome != Outcome.OK and outcome not in NO_EVIDENCE


# The built-in workload's injected slowdown, a TEST TOOL (racegate.model.workload.SlowedReplica):
# the fraction of a step added as real extra work. A/B calibrations set it on the candidate; an A/B
# reads it from a side's environment to know a calibration from an upgrade (racegate.harness.ab).
TEST_SLOWDOWN_ENV = env_names.TEST_SLOWDOWN


def injected_slowdown(env: Mapping[str, str]) -> str | None:
    """The test slowdown an environment sets ("RACEGATE_TEST_SLOWDOWN=0.05"), or None where it
    adds no work (unset, empty or zero). A value that is no number still counts: the run
    refuses it, and nothing may be judged from a run that asked for it."""
    value = str(env.get(TEST_SLOWDOWN_ENV, "")).strip()
    try:
        if float(value or 0) == 0:
            return None
    except ValueError:
        pass
    return f"{TEST_SLOWDOWN_ENV}={value}"


def parse_choice(enum: type[E], value: str, field: str) -> E:
    """`value` as a member of `enum`, or ValueError naming the field and the allowed values."""
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise ValueError(f"unknown {field} {value!r}; choose from: {allowed}") from None

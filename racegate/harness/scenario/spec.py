"""Scenarios (docs/vocabulary.md) as plain data: what one isolated run executes, checked once.

pytest, nox and the CLI all build `Scenario` objects; nothing here touches torch's
compile state, so it is safe to import anywhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from racegate.harness.scenario.vocab import (
    CacheState,
    Schedule,
    Strategy,
    StrategySpec,
    parse_choice,
    spec_of,
)
from racegate.harness.scenario.workload_api import DEFAULT_WORKLOAD

_CUDA_DEVICE = re.compile(r"^cuda:(\d+)$")
# Seconds every stack of a run may stay unchanged, its processes idle, before the run is a
# `hang` (racegate.harness.run.stall): a deadlock is then called in seconds, not at the timeout.
STALL_S = 15.0


@dataclass(frozen=True)
class Scenario:
    """One run: workload preset × devices × threads per device × strategy × cache × schedule."""

    preset: str = "tiny"
    strategy: str = Strategy.PER_DEVICE  # a Strategy, or a workload's own name with its spec
    cache_state: CacheState = CacheState.COLD
    schedule: Schedule = Schedule.BARRIER
    devices: tuple[str, ...] = ("cpu",)
    threads_per_device: int = 2
    steps: int = 6  # steady-state steps per thread, after warm-up
    warmup_steps: int = 1  # first steps per thread excluded from tokens/s (they compile)
    timeout_s: float = 300.0
    stall_s: float = STALL_S  # 0: no early stall detection, only the timeout
    switch_interval_s: float | None = None  # sys.setswitchinterval in the child, to widen races
    target_devices: tuple[str, ...] = ()  # where the target runs; () = on each drafter's device
    workload: str = DEFAULT_WORKLOAD
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # workload factory options
    # The spec of a strategy the workload names itself (its roles()); None for racegate's own.
    strategy_spec: StrategySpec | None = None
    # The roles the run was judged under (racegate.harness.doors.options.bind_roles): the workload's
    # production strategy and positive control, so a report of its records decides as its session
    # did. None: not said (records written before runs named them read as the built-in drafter's).
    production: str | None = None
    control: str | None = None

    @property
    def spec(self) -> StrategySpec:
        """What the strategy is (warmed up? one process per worker? compiled?)."""
        own = {str(self.strategy): self.strategy_spec} if self.strategy_spec else None
        return spec_of(str(self.strategy), own)

    @property
    def threads(self) -> int:
        """Concurrent workers asked for (threads, or processes for `processes`)."""
        return self.threads_per_device * len(self.devices)

    @property
    def uses_cuda(self) -> bool:
        return any(d.startswith("cuda") for d in self.devices + self.target_devices)

    def label(self) -> str:
        """Short human name, e.g. `tiny/per_device/cold/barrier/cpu×2` (see `scenario_key`)."""
        return scenario_key(self)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("strategy", "cache_state", "schedule"):
            data[key] = str(data[key])
        data["devices"] = list(self.devices)
        data["target_devices"] = list(self.target_devices)
        if self.strategy_spec is None:  # racegate's own strategy: its spec is the registry's
            del data["strategy_spec"]
        for role in ("production", "control"):
            if data[role] is None:
                del data[role]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Scenario:
        return make_scenario(**data)


def scenario_key(scenario: Scenario) -> str:
    """A scenario's one name (`Scenario.label`, a record's `scenario`):
    `preset/strategy/cache_state/schedule/devices×threads`, as `tiny/per_device/cold/barrier/cpu×2`.

    Records, the CLI's lines and the summaries group runs by it. Three keys group coarser, on
    purpose, and are built beside their one reader: a throughput floor
    (`racegate.harness.judge.baselines.floor_key`: no cache state, the step count, the GPU count not
    the GPU names), a report column (`racegate.harness.report.matrix.Column.key`: the hardware model
    instead of device names, so two machines' runs meet in one column) and a race case's pytest id
    (racegate/cases/test_race.py: `strategy-cache_state-devicesxthreads`, the run-wide preset and
    schedule left out, no `/` so `-k` selects it).
    """
    s = scenario
    return (
        f"{s.preset}/{s.strategy}/{s.cache_state}/{s.schedule}/"
        f"{','.join(s.devices)}×{s.threads_per_device}"
    )


def parse_devices(
    text: str | list[str] | tuple[str, ...], field_name: str = "devices"
) -> tuple[str, ...]:
    """'cpu' | '0,1' | 'cuda:0,cuda:1' | a list → canonical device names; ValueError otherwise."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in (s.strip() for s in items):
        if not raw:
            continue
        if raw == "cpu":
            out.append("cpu")
        elif raw.isdigit():
            out.append(f"cuda:{raw}")
        elif raw == "cuda":
            out.append("cuda:0")
        elif _CUDA_DEVICE.match(raw):
            out.append(raw)
        else:
            raise ValueError(
                f"unknown {field_name} entry {raw!r}; use 'cpu', a GPU index like '0', or 'cuda:N'"
            )
    if len(set(out)) != len(out):
        raise ValueError(f"{field_name} {','.join(out)!r} names a device twice")
    return tuple(out)


def make_scenario(**fields: Any) -> Scenario:
    """Build and validate a Scenario from loose values (strings from a CLI, TOML or JSON)."""
    f = dict(fields)
    own = f.get("strategy_spec")
    if isinstance(own, Mapping):
        own = f["strategy_spec"] = StrategySpec(**own)
    name = str(f.get("strategy", Strategy.PER_DEVICE))
    if own is None or name in set(Strategy):
        f["strategy"] = parse_choice(Strategy, name, "strategy")
        f["strategy_spec"] = None  # a racegate name keeps the registry's spec
    else:
        f["strategy"] = name
    f["cache_state"] = parse_choice(
        CacheState, str(f.get("cache_state", CacheState.COLD)), "cache state"
    )
    f["schedule"] = parse_choice(Schedule, str(f.get("schedule", Schedule.BARRIER)), "schedule")
    f["devices"] = parse_devices(f.get("devices", "cpu"))
    f["target_devices"] = parse_devices(f.get("target_devices", ()), "target devices")
    if not f["devices"]:
        raise ValueError("devices is empty; give 'cpu' or GPU indices like '0,1'")
    if "cpu" in f["devices"] and len(f["devices"]) > 1:
        raise ValueError(f"devices {','.join(f['devices'])!r} mixes cpu and GPUs; choose one kind")
    for name in ("threads_per_device", "steps"):
        if int(f.get(name, 1)) < 1:
            raise ValueError(f"{name.replace('_', ' ')} must be ≥ 1, got {f[name]!r}")
    if int(f.get("warmup_steps", 1)) < 0:
        raise ValueError(f"warmup steps must be ≥ 0, got {f['warmup_steps']!r}")
    if float(f.get("timeout_s", 1)) <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {f['timeout_s']!r}")
    stall = float(f.get("stall_s", STALL_S))
    if not math.isfinite(stall) or stall < 0:
        raise ValueError(f"stall must be ≥ 0 seconds (0: off), got {f['stall_s']!r}")
    si = f.get("switch_interval_s")
    if si is not None and float(si) <= 0:
        raise ValueError(f"switch interval must be > 0 seconds, got {si!r}")
    known = set(Scenario.__dataclass_fields__)
    unknown = set(f) - known
    if unknown:
        raise ValueError(f"unknown scenario field(s) {sorted(unknown)}; known: {sorted(known)}")
    return Scenario(**f)


def check_devices_present(scenario: Scenario, cuda_count: int) -> None:
    """ValueError if the scenario names a GPU this machine lacks (cuda_count from torch)."""
    for dev in scenario.devices + scenario.target_devices:
        m = _CUDA_DEVICE.match(dev)
        if m and int(m.group(1)) >= cuda_count:
            have = ", ".join(f"cuda:{i}" for i in range(cuda_count)) or "none (CPU-only machine)"
            raise ValueError(f"device {dev!r} does not exist; GPUs here: {have}")

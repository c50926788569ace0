"""The committed table of race cases known to fail, by version range
(racegate/harness/expectations/race.toml).

A matching row turns a race case into `xfail(strict=...)`, so an upstream fix shows up as
an XPASS that names the row to update; a case no row covers must pass. A row that covers the
production strategy is no usage error: it is an answer, and the verdict reads UNSAFE quoting it
(racegate.harness.judge.verdict). Matching is the shared rule of
racegate.harness.judge.expectations; rows are checked key by key and type by type.

Each row says what it is about (`about`): "torch" rows are facts about torch (and the libraries
under it) and apply to any workload whose strategy meets the race alike (its spec's RACE_FIELDS
equal a listed strategy's: racegate.harness.scenario.vocab.same_race_spec), whatever its name;
"drafter" rows (the default) are about racegate's own drafter and apply to it alone, by name.
A torch row is strict only for the drafter, where its detection was measured.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from racegate.harness.judge.expectations import Scope, parse_device, parse_range, release
from racegate.harness.run.checked import (
    GateInputError,
    boolean,
    choices,
    integer,
    keys,
    table,
    text,
)
from racegate.harness.scenario.vocab import (
    STRATEGIES,
    CacheState,
    Outcome,
    Strategy,
    StrategySpec,
    same_race_spec,
    spec_of,
)

DEFAULT_TABLE = Path(__file__).resolve().parents[1] / "expectations" / "race.toml"
ROW_KEY = "expected_failure"
REQUIRED = ("torch", "strategies", "outcomes", "reason", "source")
DEFAULTS: dict[str, Any] = {  # the optional keys and their values when left out
    "transformers": "*",
    "device": "any",
    "cache_states": [str(c) for c in CacheState],
    "min_threads": 2,
    "min_devices": 1,
    "min_threads_per_device": 1,
    "strict": True,
    "about": "drafter",
}
ABOUT = ("torch", "drafter")  # what a row is a fact about (the module's docstring)
ALLOWED = frozenset(REQUIRED) | set(DEFAULTS)
FAILING_OUTCOMES = tuple(o for o in Outcome if o is not Outcome.OK)

__all__ = ["DEFAULT_TABLE", "ExpectedFailure", "load", "match", "parse", "release"]


@dataclass(frozen=True)
class ExpectedFailure:
    row: int  # 1-based position in the table, for messages
    scope: Scope
    strategies: frozenset[Strategy]
    cache_states: frozenset[CacheState]
    min_threads: int
    min_devices: int
    min_threads_per_device: int
    outcomes: tuple[Outcome, ...]
    strict: bool
    reason: str
    source: str
    about: str = "drafter"  # ABOUT: "torch" (any workload, by spec) or "drafter" (by name)
    raw: dict[str, Any] = field(default_factory=dict, compare=False)  # as written, for rewrites

    def describe(self) -> str:
        strategies = ",".join(sorted(self.strategies))
        return (
            f"racegate/harness/expectations/race.toml row {self.row} (torch {self.scope.torch} "
            f"transformers {self.scope.transformers} {self.scope.device} {strategies}: "
            f"{'|'.join(self.outcomes)}; about {self.about})"
        )

    def names(self, strategy: str, spec: StrategySpec | None, drafter: bool) -> bool:
        """The row speaks of this strategy: a torch row of any strategy whose spec meets the
        race as a listed one's does; a drafter row of the drafter's strategies it names."""
        if self.about == "drafter":
            return drafter and strategy in self.strategies
        if spec is None:
            spec = spec_of(strategy) if strategy in set(Strategy) else None
        return spec is not None and any(
            same_race_spec(spec, STRATEGIES[s]) for s in self.strategies
        )

    def strict_for(self, drafter: bool) -> bool:
        """Strict only where its detection was measured: a torch row for the drafter alone."""
        return self.strict and (drafter or self.about == "drafter")

    def covers(
        self,
        *,
        torch_version: str,
        transformers_version: str,
        device: str,
        strategy: str,
        cache_state: CacheState,
        threads_per_device: int,
        devices: int,
        spec: StrategySpec | None = None,
        drafter: bool = True,
    ) -> bool:
        return (
            self.scope.covers(
                torch_version=torch_version,
                transformers_version=transformers_version,
                device=device,
            )
            and self.names(str(strategy), spec, drafter)
            and cache_state in self.cache_states
            and threads_per_device * devices >= self.min_threads
            and devices >= self.min_devices
            and threads_per_device >= self.min_threads_per_device
        )


def parse_row(n: int, raw: object, where: str) -> ExpectedFailure:
    at = f"{where} row {n}"
    raw = table(raw, at)
    keys(raw, at, required=REQUIRED, allowed=ALLOWED)
    get = {**DEFAULTS, **raw}.__getitem__
    return ExpectedFailure(
        row=n,
        scope=Scope(
            torch=parse_range(get("torch"), at, "torch"),
            transformers=parse_range(get("transformers"), at, "transformers", every_ok=True),
            device=parse_device(get("device"), at),
        ),
        strategies=frozenset(choices(Strategy, get("strategies"), f"{at}: strategies")),
        cache_states=frozenset(choices(CacheState, get("cache_states"), f"{at}: cache_states")),
        min_threads=integer(get("min_threads"), f"{at}: min_threads", low=1),
        min_devices=integer(get("min_devices"), f"{at}: min_devices", low=1),
        min_threads_per_device=integer(
            get("min_threads_per_device"), f"{at}: min_threads_per_device", low=1
        ),
        outcomes=choices(Outcome, get("outcomes"), f"{at}: outcomes", FAILING_OUTCOMES),
        strict=boolean(get("strict"), f"{at}: strict"),
        reason=text(get("reason"), f"{at}: reason").strip(),
        source=text(get("source"), f"{at}: source").strip(),
        about=choices_one(get("about"), f"{at}: about"),
        raw=dict(raw),
    )


def choices_one(value: object, where: str) -> str:
    """`about`: one of ABOUT, or a GateInputError naming the value and the allowed ones."""
    if value not in ABOUT:
        raise GateInputError(f"{where} is {value!r}; choose from: {', '.join(ABOUT)}")
    return str(value)


def parse(data: dict[str, Any], where: str = "race.toml") -> list[ExpectedFailure]:
    """Validate a parsed table."""
    keys(data, where, required=(), allowed=(ROW_KEY,))
    raw_rows = data.get(ROW_KEY, [])
    if not isinstance(raw_rows, list):
        raise GateInputError(
            f"{where}: {ROW_KEY} is {raw_rows!r}; expected [[{ROW_KEY}]] rows (an array of tables)"
        )
    return [parse_row(n, raw, where) for n, raw in enumerate(raw_rows, 1)]


def read(path: Path) -> dict[str, Any]:
    """The table file as TOML data; an unreadable or malformed file is a GateInputError."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GateInputError(f"{path}: cannot read the race table: {exc}") from None


def load(path: Path | None = None) -> list[ExpectedFailure]:
    """Parse and validate the table (None: DEFAULT_TABLE, read when called)."""
    path = DEFAULT_TABLE if path is None else path
    return parse(read(path), path.name)


def match(
    rows: list[ExpectedFailure],
    *,
    torch_version: str,
    transformers_version: str,
    device: str,
    strategy: str,
    cache_state: CacheState,
    threads_per_device: int,
    devices: int = 1,
    spec: StrategySpec | None = None,
    drafter: bool = True,
) -> ExpectedFailure | None:
    """The first row that covers this case, or None (the case must pass). spec: the strategy's
    (None: the registry's, by name); drafter: the workload is racegate's built-in drafter."""
    case = dict(
        torch_version=torch_version,
        transformers_version=transformers_version,
        device=device,
        strategy=strategy,
        cache_state=cache_state,
        threads_per_device=threads_per_device,
        devices=devices,
        spec=spec,
        drafter=drafter,
    )
    return next((row for row in rows if row.covers(**case)), None)

"""The committed table of race cases known to fail, by version range
(racegate/harness/expectations/race.toml).

A matching row turns a race case into `xfail(strict=...)`, so an upstream fix shows up as
an XPASS that names the row to update; a case no row covers must pass. The production
strategy may never be expected to fail. Matching is the shared rule of
racegate.harness.judge.expectations; rows are checked key by key and type by type.
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
from racegate.harness.scenario.vocab import CacheState, Outcome, Strategy

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
}
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
    raw: dict[str, Any] = field(default_factory=dict, compare=False)  # as written, for rewrites

    def describe(self) -> str:
        strategies = ",".join(sorted(self.strategies))
        return (
            f"racegate/harness/expectations/race.toml row {self.row} (torch {self.scope.torch} "
            f"transformers {self.scope.transformers} {self.scope.device} {strategies}: "
            f"{'|'.join(self.outcomes)})"
        )

    def covers(
        self,
        *,
        torch_version: str,
        transformers_version: str,
        device: str,
        strategy: Strategy,
        cache_state: CacheState,
        threads_per_device: int,
        devices: int,
    ) -> bool:
        return (
            self.scope.covers(
                torch_version=torch_version,
                transformers_version=transformers_version,
                device=device,
            )
            and strategy in self.strategies
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
        raw=dict(raw),
    )


def parse(
    data: dict[str, Any], where: str = "race.toml", production: Strategy | None = None
) -> list[ExpectedFailure]:
    """Validate a parsed table; a row expecting the production strategy to fail is an error."""
    keys(data, where, required=(), allowed=(ROW_KEY,))
    raw_rows = data.get(ROW_KEY, [])
    if not isinstance(raw_rows, list):
        raise GateInputError(
            f"{where}: {ROW_KEY} is {raw_rows!r}; expected [[{ROW_KEY}]] rows (an array of tables)"
        )
    rows = [parse_row(n, raw, where) for n, raw in enumerate(raw_rows, 1)]
    for row in rows:
        if production is not None and production in row.strategies:
            raise GateInputError(
                f"{where} row {row.row} expects the production strategy {str(production)!r} to "
                "fail; the production strategy may never be expected to fail: fix the trainer "
                "or pick another production_strategy in [tool.racegate]"
            )
    return rows


def read(path: Path) -> dict[str, Any]:
    """The table file as TOML data; an unreadable or malformed file is a GateInputError."""
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GateInputError(f"{path}: cannot read the race table: {exc}") from None


def load(path: Path = DEFAULT_TABLE, production: Strategy | None = None) -> list[ExpectedFailure]:
    """Parse and validate the table; a row expecting the production strategy to fail is an error."""
    return parse(read(path), path.name, production)


def match(
    rows: list[ExpectedFailure],
    *,
    torch_version: str,
    transformers_version: str,
    device: str,
    strategy: Strategy,
    cache_state: CacheState,
    threads_per_device: int,
    devices: int = 1,
) -> ExpectedFailure | None:
    """The first row that covers this case, or None (the case must pass)."""
    case = dict(
        torch_version=torch_version,
        transformers_version=transformers_version,
        device=device,
        strategy=strategy,
        cache_state=cache_state,
        threads_per_device=threads_per_device,
        devices=devices,
    )
    return next((row for row in rows if row.covers(**case)), None)

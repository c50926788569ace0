"""The committed table of race cases known to fail, by version range (expectations/race.toml).

A matching row turns a race case into `xfail(strict=...)`, so an upstream fix shows up as
an XPASS that names the row to update. The production strategy may never be expected to fail.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from harness.judge.probe_expectations import release
from harness.vocab import CacheState, Outcome, Strategy, parse_choice

DEFAULT_TABLE = Path(__file__).resolve().parents[2] / "expectations" / "race.toml"
DEVICE_KINDS = ("cpu", "cuda", "any")


@dataclass(frozen=True)
class ExpectedFailure:
    row: int  # 1-based position in the table, for messages
    torch: SpecifierSet
    transformers: SpecifierSet
    device: str
    strategies: frozenset[Strategy]
    cache_states: frozenset[CacheState]
    min_threads: int
    min_devices: int
    min_threads_per_device: int
    outcomes: tuple[Outcome, ...]
    strict: bool
    reason: str
    source: str

    def describe(self) -> str:
        strategies = ",".join(sorted(self.strategies))
        return (
            f"expectations/race.toml row {self.row} (torch{self.torch} "
            f"transformers{self.transformers or '*'} {self.device} {strategies}: "
            f"{'|'.join(self.outcomes)})"
        )


def _spec(text: str, row: int, field: str) -> SpecifierSet:
    try:
        return SpecifierSet("" if text in ("", "*") else text)
    except InvalidSpecifier:
        raise ValueError(
            f"race.toml row {row}: bad {field} range {text!r}; e.g. '>=2.9,<2.14'"
        ) from None


def load(path: Path = DEFAULT_TABLE, production: Strategy | None = None) -> list[ExpectedFailure]:
    """Parse and validate the table; a row expecting the production strategy to fail is an error."""
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    rows = []
    for n, raw in enumerate(data.get("expected_failure", []), 1):
        missing = {"torch", "strategies", "outcomes", "reason", "source"} - set(raw)
        if missing:
            raise ValueError(f"{path.name} row {n}: missing {sorted(missing)}")
        device = raw.get("device", "any")
        if device not in DEVICE_KINDS:
            raise ValueError(
                f"{path.name} row {n}: unknown device {device!r}; "
                f"choose from: {', '.join(DEVICE_KINDS)}"
            )
        row = ExpectedFailure(
            row=n,
            torch=_spec(raw["torch"], n, "torch"),
            transformers=_spec(raw.get("transformers", "*"), n, "transformers"),
            device=device,
            strategies=frozenset(parse_choice(Strategy, s, "strategy") for s in raw["strategies"]),
            cache_states=frozenset(
                parse_choice(CacheState, c, "cache state")
                for c in raw.get("cache_states", list(CacheState))
            ),
            min_threads=int(raw.get("min_threads", 2)),
            min_devices=int(raw.get("min_devices", 1)),
            min_threads_per_device=int(raw.get("min_threads_per_device", 1)),
            outcomes=tuple(parse_choice(Outcome, o, "outcome") for o in raw["outcomes"]),
            strict=bool(raw.get("strict", True)),
            reason=raw["reason"],
            source=raw["source"],
        )
        if production is not None and production in row.strategies:
            raise ValueError(
                f"{path.name} row {n} expects the production strategy {str(production)!r} to fail; "
                "the production strategy may never be expected to fail: fix the trainer or pick "
                "another production_strategy in [tool.racegate]"
            )
        rows.append(row)
    return rows


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
    tv, xv = release(torch_version), release(transformers_version)
    kind = "cpu" if device == "cpu" else "cuda"
    for row in rows:
        if (
            tv in row.torch
            and xv in row.transformers
            and row.device in (kind, "any")
            and strategy in row.strategies
            and cache_state in row.cache_states
            and threads_per_device * devices >= row.min_threads
            and devices >= row.min_devices
            and threads_per_device >= row.min_threads_per_device
        ):
            return row
    return None

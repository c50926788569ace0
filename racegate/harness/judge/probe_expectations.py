"""The committed table of expected probe verdicts by torch range
(racegate/harness/expectations/probes.toml).

Loads and validates it (overlapping ranges, unknown probes, keys and verdicts are rejected)
and compares one probe result with it. A release the table has no entry for fails (add a
row for it); it is never skipped. Matching is the shared rule of
racegate.harness.judge.expectations."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from racegate.harness.judge.expectations import (
    DeviceKind,
    Scope,
    missing_row,
    parse_device,
    parse_range,
    release,
)
from racegate.harness.probes.runner import PROBES, ProbeResult, Verdict
from racegate.harness.run.checked import GateInputError, choice, keys, table, text

DEFAULT_TABLE = Path(__file__).resolve().parents[1] / "expectations" / "probes.toml"
# How a verdict line names that table: short enough for a 100-column line, whatever the path.
SHOWN = "racegate's probes.toml"
TABLE_VERDICTS = (Verdict.HAZARD, Verdict.SAFE, Verdict.NA)  # never hang/error: those always fail
REQUIRED = ("name", "torch", "verdict", "reason", "source")
ALLOWED = frozenset(REQUIRED) | {"device"}

__all__ = [
    "DEFAULT_TABLE",
    "Expectation",
    "Status",
    "compare",
    "load",
    "lookup",
    "parse",
    "release",
]


@dataclass(frozen=True)
class Expectation:
    entry: int  # 1-based position among the table's [[probe]] entries, for messages
    name: str
    scope: Scope
    verdict: Verdict
    reason: str
    source: str

    @property
    def device(self) -> DeviceKind:
        return self.scope.device

    def describe(self) -> str:
        return (
            f"{SHOWN} entry {self.entry}: {self.name}, "
            f"torch {self.scope.torch}, device {self.device} -> {self.verdict}"
        )


def _entry(n: int, raw: object, where: str) -> Expectation:
    at = f"{where} entry {n}"
    raw = table(raw, at)
    keys(raw, at, required=REQUIRED, allowed=ALLOWED)
    if raw["name"] not in PROBES:
        raise GateInputError(
            f"{at}: unknown probe {raw['name']!r}; choose from: {', '.join(PROBES)}"
        )
    verdict = choice(Verdict, raw["verdict"], f"{at}: verdict", TABLE_VERDICTS)
    scope = Scope(
        torch=parse_range(raw["torch"], at, "torch"),
        device=parse_device(raw.get("device", "any"), at),
    )
    reason = text(raw["reason"], f"{at}: reason").strip()
    source = text(raw["source"], f"{at}: source").strip()
    return Expectation(n, raw["name"], scope, verdict, reason, source)


def parse(data: dict[str, object], where: str = "probes.toml") -> list[Expectation]:
    """Validate a parsed table; every problem names the entry, the field and the fix."""
    keys(data, where, required=(), allowed=("probe",))
    raw_entries = data.get("probe", [])
    if not isinstance(raw_entries, list):
        raise GateInputError(f"{where}: expected [[probe]] entries")
    entries: list[Expectation] = []
    for n, raw in enumerate(raw_entries, 1):
        entry = _entry(n, raw, where)
        for other in entries:
            if other.name == entry.name and entry.scope.overlaps(other.scope):
                raise GateInputError(
                    f"{where} entry {n} overlaps entry {other.entry} ({other.name}, torch "
                    f"{other.scope.torch}, device {other.device}); one version may have only "
                    "one expected verdict"
                )
        entries.append(entry)
    return entries


def load(path: Path = DEFAULT_TABLE) -> list[Expectation]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise GateInputError(f"{path}: cannot read the probe table: {exc}") from None
    return parse(data, path.name)


def lookup(
    entries: list[Expectation], name: str, torch_version: str, device: str
) -> Expectation | None:
    """The one entry covering this probe on this torch and device, or None."""
    return next(
        (
            e
            for e in entries
            if e.name == name and e.scope.covers(torch_version=torch_version, device=device)
        ),
        None,
    )


class Status(StrEnum):
    MATCH = "match"
    MISMATCH = "mismatch"
    MISSING = "missing"  # no entry for this release: a failure that says to add one
    BROKEN = "broken"  # hang or error: no verdict at all, whatever the table says


def compare(result: ProbeResult, entries: list[Expectation]) -> tuple[Status, str]:
    """(status, message) for one result; anything but MATCH is a failure, with what to do."""
    if result.verdict not in TABLE_VERDICTS:
        return Status.BROKEN, (
            f"probe {result.name} gave no verdict on torch {result.torch_version} "
            f"({result.device}): {result.verdict}: {result.detail}. A hang means a thread never "
            "reached its hold point or never returned (torch may deadlock here); an error means "
            "the probe's own setup failed: fix the probe (racegate/harness/probes/cases.py) for "
            "this torch."
        )
    entry = lookup(entries, result.name, result.torch_version, result.device)
    if entry is None:
        where = missing_row("racegate/harness/expectations/probes.toml", result.torch_version,
                            result.device, f"probe {result.name}")  # fmt: skip
        return Status.MISSING, (f"{where}. It saw {result.verdict}: {result.detail}")
    if entry.verdict == result.verdict:
        return Status.MATCH, f"{result.name}: {result.verdict} as expected ({entry.describe()})"
    return Status.MISMATCH, (
        f"probe {result.name} moved: expected {entry.verdict}, saw {result.verdict} "
        f"on torch {result.torch_version} ({result.device}).\n"
        f"  what it saw: {result.detail}\n"
        f"  table entry: {entry.describe()}\n"
        f"    reason: {entry.reason}\n    source: {entry.source}\n"
        "  to update: if torch changed, edit racegate/harness/expectations/probes.toml: narrow "
        "that entry's "
        f'torch range and add one for this release with verdict = "{result.verdict}", a '
        "reason, and the upstream source (file at the release tag, or the PR) that justifies "
        "it. If the table is right, torch or the probe regressed: read the probe's detail."
    )

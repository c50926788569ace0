"""The committed table of expected probe verdicts by torch range (expectations/probes.toml).

Loads and validates it (ranges are `>=X,<Y` intervals; overlaps, unknown probes and verdicts
are rejected) and compares one probe result with it, with messages that say how to update it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.probes.runner import PROBES, ProbeResult, Verdict

DEFAULT_TABLE = Path(__file__).resolve().parents[2] / "expectations" / "probes.toml"
TABLE_VERDICTS = (Verdict.HAZARD, Verdict.SAFE, Verdict.NA)  # never hang/error: those always fail
DEVICES = ("cpu", "cuda", "any")
REQUIRED = frozenset({"name", "torch", "verdict", "reason", "source"})
ALLOWED = REQUIRED | {"device"}


@dataclass(frozen=True)
class Expectation:
    entry: int  # 1-based position among the table's [[probe]] entries, for messages
    name: str
    torch_range: str  # as written in the table
    torch: SpecifierSet
    low: Version | None  # inclusive
    high: Version | None  # exclusive
    device: str
    verdict: Verdict
    reason: str
    source: str

    def covers(self, version: Version, device: str) -> bool:
        return self.torch.contains(version, prereleases=True) and self.device in (device, "any")

    def describe(self) -> str:
        return (
            f"expectations/probes.toml entry {self.entry}: {self.name}, "
            f"torch {self.torch_range}, device {self.device} -> {self.verdict}"
        )


def release(version: str) -> Version:
    """'2.11.0+cu130' or '2.15.0.dev20260101' -> Version('2.11.0' / '2.15.0')."""
    try:
        return Version(Version(version).base_version)
    except InvalidVersion:
        raise ValueError(f"bad torch version {version!r}; expected like '2.11.0+cu130'") from None


def _interval(text: str, where: str) -> tuple[SpecifierSet, Version | None, Version | None]:
    """Parse a range allowed only as `>=X`, `<Y` or `>=X,<Y`, so overlaps are decidable."""
    hint = "write it as '>=2.9,<2.14' (lower bound inclusive, upper exclusive)"
    try:
        spec = SpecifierSet(text)
    except InvalidSpecifier:
        raise ValueError(f"{where}: bad torch range {text!r}; {hint}") from None
    low = high = None
    for s in spec:
        if s.operator == ">=" and low is None:
            low = Version(s.version)
        elif s.operator == "<" and high is None:
            high = Version(s.version)
        else:
            raise ValueError(f"{where}: unsupported clause {str(s)!r} in {text!r}; {hint}")
    if low is None and high is None:
        raise ValueError(f"{where}: empty torch range; {hint}")
    if low is not None and high is not None and low >= high:
        raise ValueError(f"{where}: empty torch range {text!r} (lower bound >= upper)")
    return spec, low, high


def _overlap(a: Expectation, b: Expectation) -> bool:
    if a.name != b.name or not (a.device == b.device or "any" in (a.device, b.device)):
        return False
    below = a.high is not None and b.low is not None and a.high <= b.low
    above = b.high is not None and a.low is not None and b.high <= a.low
    return not (below or above)


def parse(data: dict[str, object], where: str = "probes.toml") -> list[Expectation]:
    """Validate a parsed table; every problem names the entry and the fix."""
    raw_entries = data.get("probe", [])
    if not isinstance(raw_entries, list):
        raise ValueError(f"{where}: expected [[probe]] entries")
    entries: list[Expectation] = []
    for n, raw in enumerate(raw_entries, 1):
        at = f"{where} entry {n}"
        if not isinstance(raw, dict):
            raise ValueError(f"{at}: expected a [[probe]] table, got {raw!r}")
        missing, extra = REQUIRED - set(raw), set(raw) - ALLOWED
        if missing:
            raise ValueError(f"{at}: missing {', '.join(sorted(missing))}")
        if extra:
            raise ValueError(f"{at}: unknown key {sorted(extra)[0]!r}; allowed: {sorted(ALLOWED)}")
        if raw["name"] not in PROBES:
            raise ValueError(
                f"{at}: unknown probe {raw['name']!r}; choose from: {', '.join(PROBES)}"
            )
        if raw["verdict"] not in TABLE_VERDICTS:
            allowed = ", ".join(TABLE_VERDICTS)
            raise ValueError(f"{at}: unknown verdict {raw['verdict']!r}; choose from: {allowed}")
        device = raw.get("device", "any")
        if device not in DEVICES:
            raise ValueError(f"{at}: unknown device {device!r}; choose from: {', '.join(DEVICES)}")
        for key in ("reason", "source"):
            if not isinstance(raw[key], str) or not raw[key].strip():
                raise ValueError(f"{at}: {key} must be a non-empty string")
        spec, low, high = _interval(str(raw["torch"]), at)
        entry = Expectation(
            n, raw["name"], str(raw["torch"]), spec, low, high, device, Verdict(raw["verdict"]),
            raw["reason"].strip(), raw["source"].strip(),
        )  # fmt: skip
        for other in entries:
            if _overlap(entry, other):
                raise ValueError(
                    f"{at} overlaps entry {other.entry} ({other.name}, torch {other.torch_range}, "
                    f"device {other.device}); one version may have only one expected verdict"
                )
        entries.append(entry)
    return entries


def load(path: Path = DEFAULT_TABLE) -> list[Expectation]:
    with path.open("rb") as fh:
        return parse(tomllib.load(fh), path.name)


def lookup(
    entries: list[Expectation], name: str, torch_version: str, device: str
) -> Expectation | None:
    """The one entry covering this probe on this torch and device, or None."""
    version = release(torch_version)
    kind = "cpu" if device == "cpu" else "cuda"
    return next((e for e in entries if e.name == name and e.covers(version, kind)), None)


class Status(StrEnum):
    MATCH = "match"
    MISMATCH = "mismatch"
    NO_ENTRY = "no_entry"
    BROKEN = "broken"  # hang or error: no verdict at all, whatever the table says


def compare(result: ProbeResult, entries: list[Expectation]) -> tuple[Status, str]:
    """(status, message) for one result; the message is what a failing or skipped test says."""
    if result.verdict not in TABLE_VERDICTS:
        return Status.BROKEN, (
            f"probe {result.name} gave no verdict on torch {result.torch_version} "
            f"({result.device}): {result.verdict}: {result.detail}. A hang means a thread never "
            "reached its hold point or never returned (torch may deadlock here); an error means "
            "the probe's own setup failed: fix the probe (harness/probes/cases.py) for this torch."
        )
    entry = lookup(entries, result.name, result.torch_version, result.device)
    if entry is None:
        return Status.NO_ENTRY, (
            f"no expectation for probe {result.name} on torch {result.torch_version} "
            f"({result.device}); it saw {result.verdict}: {result.detail}. Add an entry to "
            "expectations/probes.toml with that verdict, a reason and the upstream source."
        )
    if entry.verdict == result.verdict:
        return Status.MATCH, f"{result.name}: {result.verdict} as expected ({entry.describe()})"
    return Status.MISMATCH, (
        f"probe {result.name} moved: expected {entry.verdict}, saw {result.verdict} "
        f"on torch {result.torch_version} ({result.device}).\n"
        f"  what it saw: {result.detail}\n"
        f"  table entry: {entry.describe()}\n"
        f"    reason: {entry.reason}\n    source: {entry.source}\n"
        "  to update: if torch changed, edit expectations/probes.toml: narrow that entry's "
        f'torch range and add one for this release with verdict = "{result.verdict}", a '
        "reason, and the upstream source (file at the release tag, or the PR) that justifies "
        "it. If the table is right, torch or the probe regressed: read the probe's detail."
    )

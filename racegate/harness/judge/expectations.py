"""The one matching rule of the expectation tables (racegate/harness/expectations/race.toml and
probes.toml).

A row applies to a torch release range, a transformers release range and a device kind. Both
tables parse ranges, read versions and match devices here, so they cannot drift apart: a
version is its release ('2.11.0+cu130' and the nightly '2.15.0.dev20260101' count as 2.11.0 /
2.15.0), a range is `>=X`, `<Y` or `>=X,<Y` (so overlaps are decidable), and a row for device
`any` covers both kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from racegate.harness.run.checked import GateInputError, choice

RANGE_HINT = "write it as '>=2.10,<2.14' (lower bound inclusive, upper exclusive)"


class DeviceKind(StrEnum):
    CPU = "cpu"
    CUDA = "cuda"
    ANY = "any"


def release(version: str) -> Version:
    """'2.11.0+cu130' or '2.15.0.dev20260101' -> Version('2.11.0' / '2.15.0')."""
    try:
        return Version(Version(version).base_version)
    except InvalidVersion:
        raise GateInputError(
            f"bad torch version {version!r}; expected like '2.11.0+cu130'"
        ) from None


def minor(version: str) -> str:
    """'2.11.0+cu130' -> '2.11': the granularity the tables' ranges are written at."""
    major, minor_, *_ = (*release(version).release, 0)
    return f"{major}.{minor_}"


def device_kind(device: str) -> DeviceKind:
    """'cpu' -> cpu; 'cuda', 'cuda:1' -> cuda."""
    return DeviceKind.CPU if device == "cpu" else DeviceKind.CUDA


@dataclass(frozen=True)
class VersionRange:
    text: str  # as written in the table ('*': every release)
    low: Version | None  # inclusive
    high: Version | None  # exclusive

    def __contains__(self, version: Version) -> bool:
        return (self.low is None or version >= self.low) and (
            self.high is None or version < self.high
        )

    def overlaps(self, other: VersionRange) -> bool:
        below = self.high is not None and other.low is not None and self.high <= other.low
        above = other.high is not None and self.low is not None and other.high <= self.low
        return not (below or above)

    def __str__(self) -> str:
        return self.text


EVERY_RELEASE = VersionRange("*", None, None)


def parse_range(value: object, where: str, field: str, *, every_ok: bool = False) -> VersionRange:
    """A range allowed only as `>=X`, `<Y` or `>=X,<Y` (and `*` where `every_ok`)."""
    if every_ok and value == "*":
        return EVERY_RELEASE
    hint = RANGE_HINT + (", or '*' for every release" if every_ok else "")
    if not isinstance(value, str):
        raise GateInputError(f"{where}: {field} is {value!r}; expected a string range: {hint}")
    try:
        spec = SpecifierSet(value)
    except InvalidSpecifier:
        raise GateInputError(f"{where}: bad {field} range {value!r}; {hint}") from None
    low = high = None
    for clause in spec:
        if clause.operator == ">=" and low is None:
            low = Version(clause.version)
        elif clause.operator == "<" and high is None:
            high = Version(clause.version)
        else:
            raise GateInputError(
                f"{where}: unsupported clause {str(clause)!r} in {field} {value!r}; {hint}"
            )
    if low is None and high is None:
        raise GateInputError(f"{where}: empty {field} range; {hint}")
    if low is not None and high is not None and low >= high:
        raise GateInputError(f"{where}: empty {field} range {value!r} (lower bound >= upper)")
    return VersionRange(value, low, high)


def parse_device(value: object, where: str) -> DeviceKind:
    return choice(DeviceKind, value, f"{where}: device")


@dataclass(frozen=True)
class Scope:
    """Where a table row applies: torch and transformers release ranges and a device kind."""

    torch: VersionRange
    transformers: VersionRange = EVERY_RELEASE
    device: DeviceKind = DeviceKind.ANY

    def covers(self, *, torch_version: str, device: str, transformers_version: str = "") -> bool:
        """The matching rule of both tables (transformers '' : the table does not key on it)."""
        in_transformers = (
            self.transformers is EVERY_RELEASE or release(transformers_version) in self.transformers
        )
        return (
            release(torch_version) in self.torch
            and in_transformers
            and self.device in (device_kind(device), DeviceKind.ANY)
        )

    def overlaps(self, other: Scope) -> bool:
        same_device = DeviceKind.ANY in (self.device, other.device) or self.device == other.device
        return (
            same_device
            and self.torch.overlaps(other.torch)
            and self.transformers.overlaps(other.transformers)
        )


def missing_row(table: str, torch_version: str, device: str, what: str) -> str:
    """The failure for a release the table has no row for: never a skip, never a pass."""
    return (
        f"add a row for torch {release(torch_version)} ({table}): it has no entry covering "
        f"{what} on {device_kind(device)}; run it, then record the verdict seen with a reason "
        "and the upstream source"
    )

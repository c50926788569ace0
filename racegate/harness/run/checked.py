"""Checked reads of JSON values: each returns the value or raises GateInputError, one line.

The line names the file and field (`where`), the value as found and the values allowed; the CLI
maps it to exit 2 and the pytest plugin to a usage error. Nothing here passes a value it cannot
judge: NaN, infinities, bools posing as numbers and unknown names all fail. A leaf module: run
records (racegate.harness.run.record), baselines, expectation tables and the A/B read their fields
with it."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from enum import StrEnum
from typing import Any, TypeVar

E = TypeVar("E", bound=StrEnum)


class GateInputError(ValueError):
    """A gate input (baseline, table, record) is malformed: one line, exit 2."""


def shown(value: object) -> str:
    """A value as one line of an error names it: its repr, cut at 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def positive_number(value: object, where: str) -> float:
    """`value` as a float if it is a finite number > 0, else GateInputError."""
    if not _is_number(value) or not math.isfinite(value) or value <= 0:  # type: ignore[arg-type]
        raise GateInputError(f"{where} is {shown(value)}; expected a finite number > 0")
    return float(value)  # type: ignore[arg-type]


def optional_number(value: object, where: str, *, low: float = 0.0) -> float | None:
    """None, or a finite number ≥ `low` (spreads, which may be 0)."""
    if value is None:
        return None
    if not _is_number(value) or not math.isfinite(value) or value < low:  # type: ignore[arg-type]
        raise GateInputError(f"{where} is {shown(value)}; expected null or a finite number ≥ {low}")
    return float(value)  # type: ignore[arg-type]


def tolerance(value: object, where: str) -> float:
    """A relative tolerance in (0, 0.5]: 0 would fail every run, above 0.5 judges nothing."""
    if not _is_number(value) or not math.isfinite(value) or not 0 < value <= 0.5:  # type: ignore[arg-type,operator]
        raise GateInputError(
            f"{where} is {shown(value)}; expected a fraction in (0, 0.5], e.g. 0.10 for 10%"
        )
    return float(value)  # type: ignore[arg-type]


def integer(value: object, where: str, *, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise GateInputError(f"{where} is {shown(value)}; expected an integer ≥ {low}")
    return value


def boolean(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise GateInputError(f"{where} is {shown(value)}; expected true or false (no quotes)")
    return value


def text(value: object, where: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        kind = "a string" if empty else "a non-empty string"
        raise GateInputError(f"{where} is {shown(value)}; expected {kind}")
    return value


def table(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise GateInputError(f"{where} is {shown(value)}; expected a table of key = value")
    return value


def choice(enum: type[E], value: object, where: str, allowed: Iterable[E] | None = None) -> E:
    """`value` as a member of `enum` (or of `allowed`), else one line listing the choices."""
    members = list(allowed if allowed is not None else enum)
    for member in members:
        if isinstance(value, str) and value == member.value:
            return member
    names = ", ".join(m.value for m in members)
    raise GateInputError(f"{where} is {shown(value)}; choose from: {names}")


def choices(
    enum: type[E], value: object, where: str, allowed: Iterable[E] | None = None
) -> tuple[E, ...]:
    """A non-empty list of members of `enum`, in the order given."""
    members = list(allowed if allowed is not None else enum)
    names = ", ".join(m.value for m in members)
    if not isinstance(value, list) or not value:
        raise GateInputError(f"{where} is {shown(value)}; expected a non-empty list of: {names}")
    return tuple(choice(enum, v, where, members) for v in value)


def keys(
    raw: dict[str, Any], where: str, *, required: Collection[str], allowed: Collection[str]
) -> None:
    """Missing and unknown keys (a misspelling is unknown), each named with the allowed ones."""
    missing = [k for k in required if k not in raw]
    if missing:
        raise GateInputError(
            f"{where}: missing {', '.join(missing)}; required: {', '.join(required)}"
        )
    extra = sorted(set(raw) - set(allowed))
    if extra:
        raise GateInputError(
            f"{where}: unknown key {extra[0]!r}; allowed: {', '.join(sorted(allowed))}"
        )

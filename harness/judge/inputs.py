"""Checks on the gate's input files (baselines, expectation tables, records): bad data is an error.

Each check raises GateInputError with one line naming the file, the field and the allowed
values; the CLI maps it to exit 2 and the pytest plugin to a usage error. Nothing here passes
a value it cannot judge: NaN, infinities, bools posing as numbers and unknown names all fail.
Run records are read here, for every reader of them (the report, `baseline --update`,
`expectations`): `read_records`, each record checked field by field by RunRecord.from_json,
and the roles they ran under (`roles_of`), which every decision over them judges by.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

# A module, not its names: harness.record checks its fields with this module's functions.
from harness import record as run_records
from harness.workload_api import BUILTIN_ROLES

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


def record_files(paths: Iterable[Path]) -> list[Path]:
    """The JSON Lines files given, and every `*.jsonl` under the folders given, each once."""
    files: dict[Path, None] = {}
    for path in map(Path, paths):
        if path.is_dir():
            files.update(dict.fromkeys(sorted(p for p in path.rglob("*.jsonl") if p.is_file())))
        elif path.is_file():
            files[path] = None
        else:
            raise FileNotFoundError(f"no such records file or folder: {path}")
    return list(files)


def read_record_file(path: Path) -> list[run_records.RunRecord]:
    """Every record in one JSON Lines file, each checked; a malformed record, a torn line or a
    file that is not JSON Lines is a GateInputError naming `file:line` and what is wrong."""
    return run_records.read_jsonl(path)


def read_records(paths: Iterable[Path]) -> list[run_records.RunRecord]:
    """Records from JSON Lines files, or from every `*.jsonl` under the folders given, each
    checked (read_record_file); none at all is an error too."""
    paths = list(paths)
    records = [r for f in record_files(paths) for r in read_record_file(f)]
    if not records:
        raise GateInputError(
            f"no run records in {', '.join(map(str, paths))}; "
            "give JSON Lines files (pytest --results / harness run --out) or folders of them"
        )
    return records


def check_records_from(paths: Iterable[Path]) -> None:
    """--records-from: every path given exists (checked at start, before any run); a ValueError
    names the first that does not."""
    for path in paths:
        if not Path(path).exists():
            raise ValueError(f"--records-from {path}: no such file or folder")


def records_from(paths: Iterable[Path]) -> tuple[list[run_records.RunRecord], list[str]]:
    """--records-from: the records of each path (a JSON Lines file or a folder of them), each
    checked, and one line per path saying how many it merged: an invocation judges its own runs
    unless told, and says so when told."""
    records: list[run_records.RunRecord] = []
    notes = []
    for path in paths:
        found = [r for f in record_files([path]) for r in read_record_file(f)]
        records += found
        notes.append(f"merged {len(found)} records from {path}")
    return records, notes


def unnamed_roles() -> tuple[str, str]:
    """(production, control) of records that name no roles (written before runs named them):
    the project's production strategy (env RACEGATE_PRODUCTION_STRATEGY, [tool.racegate],
    else the built-in drafter's warmup_locked) and the built-in control, per_device. The same
    at every exit, so old records decide alike in pytest, `harness run` and the report."""
    from harness import settings  # settings reads pyproject.toml; only where records lack roles

    return str(settings.production_strategy()), BUILTIN_ROLES.control


def record_roles(record: run_records.RunRecord, unnamed: tuple[str, str]) -> tuple[str, str]:
    """(production, control) a run was judged under, as its scenario says; `unnamed` where
    it says none (a schema-2 record written before runs named them)."""
    scenario = record.scenario
    return (
        str(scenario.get("production") or unnamed[0]),
        str(scenario.get("control") or unnamed[1]),
    )


def roles_of(
    records: Iterable[run_records.RunRecord],
    *,
    unnamed: tuple[str, str] | None = None,
    empty: tuple[str, str] | None = None,
) -> tuple[str, str]:
    """The one (production, control) these records ran under (`record_roles`, with `unnamed`
    or else `unnamed_roles()` for records that name none; `empty` where there is no record):
    every exit judges a set of records by its own roles, so pytest's block, `harness run` and
    the report of the same records decide alike. Records that ran under different roles are a
    GateInputError: no one decision judges them together."""
    records = list(records)
    if not records and empty is not None:
        return empty
    unnamed = unnamed or unnamed_roles()
    found = sorted({record_roles(r, unnamed) for r in records})
    if len(found) > 1:
        shown_roles = "; ".join(f"production {p}, control {c}" for p, c in found)
        raise GateInputError(
            f"the records ran under {len(found)} sets of roles ({shown_roles}); judge each "
            "set on its own (give their files separately)"
        )
    return found[0] if found else unnamed

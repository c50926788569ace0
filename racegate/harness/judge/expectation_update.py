"""Proposes and writes racegate/harness/expectations/race.toml rows from run records (`harness
expectations`).

Rules, each a proposal the CLI prints before anything is written:
- a strict row whose every matching run passed (an XPASS in every run) is narrowed to end
  below the lowest torch release that passed, or deleted when nothing of it is left;
- a case no row covers that failed gets a new row for its torch and transformers releases,
  device kind, strategy, cache state and topology (strict only when it failed in all of at
  least STRICT_MIN_RUNS runs); a new row needs a reason and a source, given by the caller;
- the production strategy never gets a row: its failures are rejected and listed;
- a matching row that saw an outcome it does not list is reported, not edited.
Kept rows keep their reason and source, as written.
"""

from __future__ import annotations

import json
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from racegate.harness.judge import race_expectations as rx
from racegate.harness.judge.expectations import device_kind, minor
from racegate.harness.judge.inputs import read_records, roles_of
from racegate.harness.run.checked import GateInputError
from racegate.harness.run.files import write_whole
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.vocab import CacheState, Outcome, Strategy
from racegate.harness.scenario.workload_api import DEFAULT_WORKLOAD

STRICT_MIN_RUNS = 3


@dataclass(frozen=True)
class Cell:
    """One race case as the table keys it, at the release granularity of its ranges."""

    torch: str
    transformers: str
    device: str
    strategy: Strategy
    cache_state: CacheState
    devices: int
    threads_per_device: int

    @classmethod
    def of(cls, record: RunRecord) -> Cell:
        sc = record.scenario
        return cls(
            torch=minor(record.versions.torch),
            transformers=minor(record.versions.transformers),
            device=str(device_kind(sc.devices[0])),
            strategy=Strategy(sc.strategy),
            cache_state=sc.cache_state,
            devices=len(sc.devices),
            threads_per_device=sc.threads_per_device,
        )

    def label(self) -> str:
        return (
            f"torch {self.torch} transformers {self.transformers} {self.device} {self.strategy} "
            f"{self.cache_state} {self.devices}x{self.threads_per_device}"
        )


def _next_minor(version: str) -> str:
    major, minor_ = version.split(".")
    return f"{major}.{int(minor_) + 1}"


@dataclass
class Proposal:
    """What the records say about the table: rows to drop, narrow and add, and refusals."""

    rows: list[rx.ExpectedFailure]
    delete: dict[int, str] = field(default_factory=dict)  # row -> why
    narrow: dict[int, tuple[str, str]] = field(default_factory=dict)  # row -> (torch, why)
    add: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # (row w/o provenance, why)
    rejected: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return bool(self.delete or self.narrow or self.add)

    def lines(self) -> list[str]:
        out = [f"delete row {n}: {why}" for n, why in sorted(self.delete.items())]
        out += [
            f"narrow row {n} to torch {torch!r}: {why}"
            for n, (torch, why) in sorted(self.narrow.items())
        ]
        for raw, why in self.add:
            out.append(f"add row ({why}):")
            out += ["    " + line for line in render_row(raw).splitlines()]
        out += [f"rejected: {r}" for r in self.rejected]
        out += [f"note: {n}" for n in self.notes]
        return out or ["no change: every run agrees with racegate/harness/expectations/race.toml"]


def propose(rows: list[rx.ExpectedFailure], records: list[RunRecord], production: str) -> Proposal:
    """The changes `records` call for (pure: nothing is read or written)."""
    by_row: dict[int, list[RunRecord]] = defaultdict(list)
    uncovered: dict[Cell, list[RunRecord]] = defaultdict(list)
    for r in records:
        cell = Cell.of(r)
        row = rx.match(
            rows,
            torch_version=r.versions.torch,
            transformers_version=r.versions.transformers,
            device=r.scenario.devices[0],
            strategy=cell.strategy,
            cache_state=cell.cache_state,
            threads_per_device=cell.threads_per_device,
            devices=cell.devices,
            spec=r.scenario.spec,
            drafter=r.scenario.workload == DEFAULT_WORKLOAD,
        )
        (by_row[row.row] if row else uncovered[cell]).append(r)
    proposal = Proposal(rows)
    for row in rows:
        _judge_row(proposal, row, by_row.get(row.row, []))
    for cell, runs in uncovered.items():
        failed = [r for r in runs if r.outcome != Outcome.OK]
        if not failed:
            continue
        seen = sorted({Outcome(r.outcome) for r in failed}, key=list(Outcome).index)
        why = f"{cell.label()}: {len(failed)}/{len(runs)} runs failed ({', '.join(seen)})"
        if cell.strategy == production:
            proposal.rejected.append(
                f"{why}; the production strategy may never be expected to fail: fix the trainer"
            )
            continue
        proposal.add.append((_new_row(cell, seen, strict=_strict(runs, failed)), why))
    return proposal


def _strict(runs: list[RunRecord], failed: list[RunRecord]) -> bool:
    return len(failed) == len(runs) >= STRICT_MIN_RUNS


def _judge_row(proposal: Proposal, row: rx.ExpectedFailure, runs: list[RunRecord]) -> None:
    if not runs:
        return
    unlisted = sorted({r.outcome for r in runs if r.outcome != Outcome.OK} - set(row.outcomes))
    if unlisted:
        proposal.notes.append(
            f"row {row.row} matched runs with {', '.join(unlisted)}, which it does not list: "
            "those cases fail; if torch changed how the race shows, add the outcome by hand"
        )
    if not row.strict or any(r.outcome != Outcome.OK for r in runs):
        return
    lowest = min(
        (minor(r.versions.torch) for r in runs), key=lambda v: tuple(map(int, v.split(".")))
    )
    why = f"strict, and all {len(runs)} matching runs passed (XPASS) from torch {lowest}"
    low = row.scope.torch.low
    if low is not None and (low.major, low.minor) < tuple(map(int, lowest.split("."))):
        proposal.narrow[row.row] = (f">={low},<{lowest}", why)
    else:
        proposal.delete[row.row] = why


def _new_row(cell: Cell, outcomes: list[Outcome], *, strict: bool) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "torch": f">={cell.torch},<{_next_minor(cell.torch)}",
        "transformers": f">={cell.transformers},<{_next_minor(cell.transformers)}",
        "device": cell.device,
        "strategies": [str(cell.strategy)],
        "cache_states": [str(cell.cache_state)],
    }
    threads = cell.devices * cell.threads_per_device
    if threads != rx.DEFAULTS["min_threads"]:
        raw["min_threads"] = threads
    if cell.devices > 1:
        raw["min_devices"] = cell.devices
    if cell.threads_per_device > 1:
        raw["min_threads_per_device"] = cell.threads_per_device
    raw["outcomes"] = [str(o) for o in outcomes]
    raw["strict"] = strict
    return raw


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):  # a JSON string is a TOML basic string
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise GateInputError(f"race.toml: cannot write value {value!r}")


def render_row(raw: dict[str, Any]) -> str:
    return f"[[{rx.ROW_KEY}]]\n" + "".join(f"{k} = {_value(v)}\n" for k, v in raw.items())


def render(header: str, raws: list[dict[str, Any]]) -> str:
    return header.rstrip("\n") + "\n\n" + "\n".join(render_row(raw) for raw in raws)


def header_of(text: str) -> str:
    """The table's leading comments (everything before its first row), kept on rewrite."""
    marker = f"[[{rx.ROW_KEY}]]"
    return text.split(marker, 1)[0] if marker in text else text


def missing_provenance(proposal: Proposal, reason: str | None, source: str | None) -> str | None:
    """What a write still needs: new rows need a reason and a source; None when nothing."""
    if not proposal.add:
        return None
    lacking = [
        f"--{name}" for name, v in (("reason", reason), ("source", source)) if not (v or "").strip()
    ]
    if not lacking:
        return None
    return (
        f"{len(proposal.add)} new row(s) need {' and '.join(lacking)}: why the case fails and "
        "the upstream source (file at the release tag, an issue or PR, or the results/ folder)"
    )


def apply(proposal: Proposal, table: Path, *, reason: str | None, source: str | None) -> str:
    """The rewritten table text, checked by the loader before it is returned."""
    if (missing := missing_provenance(proposal, reason, source)) is not None:
        raise GateInputError(missing)
    raws = []
    for row in proposal.rows:
        if row.row in proposal.delete:
            continue
        raw = dict(row.raw)
        if row.row in proposal.narrow:
            raw["torch"] = proposal.narrow[row.row][0]
        raws.append(raw)
    for raw, _ in proposal.add:
        raws.append({**raw, "reason": (reason or "").strip(), "source": (source or "").strip()})
    text = render(header_of(table.read_text()), raws)
    rx.parse(tomllib.loads(text), table.name)  # never write a table the loader refuses
    return text


def propose_from(records: list[Path], table: Path) -> Proposal:
    """Read (and check) the table and the records; the proposal they make, under the production
    strategy the records ran under (racegate.harness.judge.inputs.roles_of, as every exit judges
    them)."""
    runs = read_records(records)
    production, _ = roles_of(runs)
    return propose(rx.load(table), runs, production)


def write(proposal: Proposal, table: Path, *, reason: str | None, source: str | None) -> None:
    """Rewrite `table` in place (atomically, keeping its mode) with the proposal applied."""
    text = apply(proposal, table, reason=reason, source=source)
    write_whole(table, text, mode=table.stat().st_mode & 0o777)

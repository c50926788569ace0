"""The report's data: records merged into a matrix (rows torch × transformers, columns scenario
groups) and DESIGN §5's gate per row. Pure over RunRecords and the baseline files.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.judge import baselines
from harness.judge.metrics import wilson_interval
from harness.record import UNREPORTED_DEVICE, RunRecord
from harness.vocab import SEVERITY, Outcome

Row = tuple[str, str]  # (torch, transformers)


@dataclass(frozen=True, order=True)
class Column:
    """A scenario group: preset/strategy/cache state/schedule/topology on one hardware."""

    preset: str
    strategy: str
    cache_state: str
    schedule: str
    hardware: str
    devices: int
    threads_per_device: int
    target_devices: int = 0  # the target model on devices of its own (the incident topology)

    @property
    def topology(self) -> str:
        target = f" +target on {self.target_devices}" if self.target_devices else ""
        return f"{self.hardware} {self.devices}×{self.threads_per_device}{target}"

    @property
    def label(self) -> str:
        return f"{self.cache_state} · {self.schedule} · {self.topology}"

    @property
    def key(self) -> str:
        return f"{self.preset}/{self.strategy}/{self.cache_state}/{self.schedule}/{self.topology}"


@dataclass
class Cell:
    row: Row
    column: Column
    runs: list[RunRecord]
    outcome_runs: dict[str, int] = field(default_factory=dict)  # run outcome → runs
    nested_runs: int = 0  # runs with ≥ 1 thread that hit the nested-FX error
    nested_threads: int = 0
    fallback_runs: int = 0
    fallback_threads: int = 0
    threads: int = 0
    tokens_per_s: float | None = None  # median over passing runs (all runs if none passed)
    timings_void: bool = False  # it measured tokens/s, but only in runs that overlapped others
    throughput: baselines.GateResult | None = None
    mem_growth: float | None = None  # worst run
    memory_ok: bool = True
    memory_note: str = ""
    rates: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # Wilson 95%

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def passed(self) -> bool:
        return (
            self.outcome_runs.get(str(Outcome.OK), 0) == self.n
            and not (self.throughput and self.throughput.failed)
            and self.memory_ok
        )

    def problems(self) -> list[str]:
        """Why this cell is not a pass, one phrase each (empty when it passes)."""
        out = []
        if self.nested_runs:
            out.append(
                f"nested_fx_error in {self.nested_runs}/{self.n} runs "
                f"({self.nested_threads}/{self.threads} threads)"
            )
        if self.fallback_runs:
            out.append(
                f"silent_fallback in {self.fallback_runs}/{self.n} runs "
                f"({self.fallback_threads}/{self.threads} threads)"
            )
        for outcome in SEVERITY:
            k = self.outcome_runs.get(str(outcome), 0)
            if k and outcome not in (Outcome.OK, Outcome.NESTED_FX_ERROR, Outcome.SILENT_FALLBACK):
                out.append(f"{outcome} in {k}/{self.n} runs")
        if self.throughput and self.throughput.failed:
            out.append(self.throughput.detail)
        if not self.memory_ok:
            out.append(self.memory_note)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "torch": self.row[0],
            "transformers": self.row[1],
            "column": self.column.key,
            "status": "pass" if self.passed else "fail",
            "runs": self.n,
            "outcome_runs": self.outcome_runs,
            "nested_fx": {"runs": self.nested_runs, "threads": self.nested_threads},
            "silent_fallback": {"runs": self.fallback_runs, "threads": self.fallback_threads},
            "threads": self.threads,
            "rates": {k: list(v) for k, v in self.rates.items()},
            "tokens_per_s": self.tokens_per_s,
            "timings_void": self.timings_void,
            "throughput": self.throughput.to_json() if self.throughput else None,
            "mem_growth": self.mem_growth,
            "memory_ok": self.memory_ok,
            "problems": self.problems(),
        }


@dataclass
class RowGate:
    row: Row
    passed: bool
    reasons: list[str]  # why it failed
    notes: list[str]  # gates skipped, with the reason

    def to_json(self) -> dict[str, Any]:
        return {
            "torch": self.row[0],
            "transformers": self.row[1],
            "passed": self.passed,
            "reasons": self.reasons,
            "notes": self.notes,
        }


@dataclass
class Matrix:
    rows: list[Row]
    columns: list[Column]
    cells: dict[tuple[Row, Column], Cell]
    production_strategy: str
    gates: dict[Row, RowGate]

    @property
    def passed(self) -> bool:
        return bool(self.gates) and all(g.passed for g in self.gates.values())


def row_of(record: RunRecord) -> Row:
    return record.versions.get("torch", "?"), record.versions.get("transformers", "?")


def column_of(record: RunRecord) -> Column:
    s = record.scenario
    return Column(
        preset=str(s["preset"]),
        strategy=str(s["strategy"]),
        cache_state=str(s["cache_state"]),
        schedule=str(s["schedule"]),
        hardware=baselines.hardware_key(record),
        devices=len(s["devices"]),
        threads_per_device=int(s["threads_per_device"]),
        target_devices=len(s.get("target_devices") or ()),
    )


def _version_sort(row: Row) -> tuple[Any, ...]:
    def parts(v: str) -> tuple[Any, ...]:
        head = v.split("+")[0]
        return tuple(int(p) if p.isdigit() else -1 for p in head.split(".")), v

    return parts(row[0]), parts(row[1])


def make_cell(
    row: Row, column: Column, runs: list[RunRecord], baseline: baselines.Baseline | None
) -> Cell:
    cell = Cell(row, column, runs)
    cell.outcome_runs = dict(Counter(str(r.outcome) for r in runs))
    for r in runs:
        nested = r.outcome_counts.get(str(Outcome.NESTED_FX_ERROR), 0)
        fallback = r.outcome_counts.get(str(Outcome.SILENT_FALLBACK), 0)
        cell.nested_runs += nested > 0
        cell.nested_threads += nested
        cell.fallback_runs += fallback > 0
        cell.fallback_threads += fallback
        cell.threads += r.threads_asked
    for outcome, k in cell.outcome_runs.items():
        cell.rates[outcome] = (k / len(runs), *wilson_interval(k, len(runs)))
    # Passing runs only; a cell where none passed (e.g. a silent fallback) shows what it ran at.
    # Runs that overlapped others (timing_valid False) count for outcomes only.
    timed = [r for r in runs if r.tokens_per_s and r.timing_valid]
    tps = [r.tokens_per_s for r in timed if r.outcome == Outcome.OK]
    tps = tps or [r.tokens_per_s for r in timed]
    cell.tokens_per_s = statistics.median(tps) if tps else None
    cell.timings_void = not timed and any(r.tokens_per_s for r in runs)
    key = baselines.floor_key(runs[0].scenario)
    if not cell.timings_void and (tps or (baseline and key in baseline.floors)):
        cell.throughput = baselines.check_tokens(key, column.hardware, cell.tokens_per_s, baseline)
    growths = [r.mem_growth for r in runs if r.mem_growth is not None]
    cell.mem_growth = max(growths) if growths else None
    for r in runs:
        ok, why = baselines.memory_flat(r)
        if not ok:
            cell.memory_ok, cell.memory_note = False, why
            break
    return cell


def gate_row(row: Row, cells: list[Cell], production: str) -> RowGate:
    """DESIGN §5 for one (torch, transformers) row, over the production strategy's cells.

    Besides nested-FX errors and silent fallbacks, any other non-ok outcome (hang, crash,
    OOM, a blocked recompile, a run that was in effect serial) fails too: such a run proves
    nothing about the race, so it cannot count as a pass.
    """
    mine = [c for c in cells if c.column.strategy == production]
    if not mine:
        return RowGate(row, False, [f"no runs of the production strategy {production!r}"], [])
    reasons, notes = [], []
    for c in mine:
        reasons.extend(f"{c.column.key}: {p}" for p in c.problems())
        if c.throughput and c.throughput.skipped:
            notes.append(c.throughput.message)
    notes = sorted(set(notes))
    if void := [c for c in mine if c.timings_void]:  # one note; the cells themselves say which
        notes.append(
            f"tok/s of {len(void)} of {len(mine)} cells not gated: their runs overlapped other runs"
        )
    return RowGate(row, not reasons, reasons, notes)


def _unreported(record: RunRecord) -> bool:
    return (record.hardware or {}).get("device_name") == UNREPORTED_DEVICE


def build_matrix(records: list[RunRecord], baselines_dir: Path, production: str) -> Matrix:
    groups: dict[tuple[Row, Column], list[RunRecord]] = defaultdict(list)
    # A run whose child never reported (a hang, in records older than the `built` event's
    # hardware) is filed under the machine its row's other runs name, not a column of its own.
    known = Counter(
        (row_of(r), baselines.hardware_key(r)) for r in records if not _unreported(r)
    )
    for r in records:
        col = column_of(r)
        if _unreported(r):
            on_cpu = tuple(r.scenario["devices"]) == ("cpu",)
            same_row = [
                (n, hw)
                for (row, hw), n in known.items()
                if row == row_of(r) and (hw == "cpu") == on_cpu
            ]
            if same_row:
                col = replace(col, hardware=max(same_row)[1])
        groups[row_of(r), col].append(r)
    loaded: dict[str, baselines.Baseline | None] = {}
    cells = {}
    for (row, col), runs in groups.items():
        if col.hardware not in loaded:
            loaded[col.hardware] = baselines.load(baselines_dir, col.hardware)
        cells[row, col] = make_cell(row, col, runs, loaded[col.hardware])
    rows = sorted({r for r, _ in groups}, key=_version_sort)
    columns = sorted({c for _, c in groups})
    gates = {
        row: gate_row(row, [cells[k] for c in columns if (k := (row, c)) in cells], production)
        for row in rows
    }
    return Matrix(rows, columns, cells, production, gates)


def gate(
    records: list[RunRecord], baselines_dir: Path, production_strategy: str
) -> tuple[bool, list[str]]:
    """(passed, reasons): every (torch, transformers) row must pass DESIGN §5's gate.

    Reasons name the row; when the gate passes they hold the skipped checks (no baseline).
    """
    if not records:
        return False, ["no run records: nothing was gated"]
    m = build_matrix(records, baselines_dir, str(production_strategy))
    out = []
    for row, g in m.gates.items():
        name = f"torch {row[0]} / transformers {row[1]}"
        out.extend(f"{name}: {r}" for r in g.reasons)
        out.extend(f"{name}: {n}" for n in g.notes)
    failures = [f"torch {r[0]} / transformers {r[1]}" for r, g in m.gates.items() if not g.passed]
    if m.passed:
        return True, out
    return False, [f"gate failed for: {', '.join(failures)}", *out]

"""The report's data: records grouped per hardware × torch × transformers, with each group's
verdict (racegate.harness.judge.verdict) and gate, and its cells (scenario groups). Pure over
RunRecords, the baseline files and the probe expectations table.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from racegate.harness.ab.result import ABResult
from racegate.harness.ab.stats import SIDES, PowerSummary
from racegate.harness.judge import baselines, probe_expectations
from racegate.harness.judge import verdict as verdicts
from racegate.harness.judge.inputs import roles_of
from racegate.harness.judge.metrics import wilson_interval
from racegate.harness.probes.runner import PROBES
from racegate.harness.run.record import UNREPORTED_DEVICE, RunRecord
from racegate.harness.scenario.vocab import SEVERITY, STRATEGIES, TEST_SLOWDOWN_ENV, Outcome
from racegate.harness.scenario.workload_api import BUILTIN_ROLES, DEFAULT_WORKLOAD

Row = tuple[str, str]  # (torch, transformers)
GroupKey = tuple[str, Row]  # (Column.section, row): never merged across hardware or workloads


_WORKLOAD_IN_SECTION = " · workload "  # Column.section: "<hardware> · workload <module:function>"


def section_parts(section: str) -> tuple[str, str | None]:
    """(hardware, workload) of a Column.section; workload None for the built-in drafter."""
    hardware, sep, workload = section.partition(_WORKLOAD_IN_SECTION)
    return hardware, workload if sep else None


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
    workload: str = DEFAULT_WORKLOAD  # `--workload`: another step is another thing under test

    @property
    def section(self) -> str:
        """The report's section, and its groups' first key: the hardware, and the workload
        where it is not the built-in drafter (its runs never share a verdict, a cell or a chart
        row with the drafter's)."""
        if self.workload == DEFAULT_WORKLOAD:
            return self.hardware
        return f"{self.hardware}{_WORKLOAD_IN_SECTION}{self.workload}"

    @property
    def topology(self) -> str:
        target = f" +target on {self.target_devices}" if self.target_devices else ""
        return f"{self.hardware} {self.devices}×{self.threads_per_device}{target}"

    @property
    def label(self) -> str:
        return f"{self.cache_state} · {self.schedule} · {self.topology}"

    @property
    def key(self) -> str:
        key = f"{self.preset}/{self.strategy}/{self.cache_state}/{self.schedule}/{self.topology}"
        return key if self.workload == DEFAULT_WORKLOAD else f"{key}/workload={self.workload}"


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
    timings_void: bool = False  # it measured tokens/s, but only in runs not timed (RunRecord.timed)
    slowed: int = 0  # runs under the test slowdown (RunRecord.test_slowdown): none passes
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
            and not self.slowed
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
        if self.slowed:
            out.append(
                f"{self.slowed}/{self.n} runs under the test slowdown ({TEST_SLOWDOWN_ENV}, a "
                "test tool): not the workload's own step"
            )
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


THROUGHPUT_SKIPPED = "production cells whose tok/s was not gated"


class GateStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_GATED = "not gated"  # no run of the production strategy here (e.g. older records)


@dataclass
class RowGate:
    """The gate for one hardware × torch × transformers group (docs/gate.md)."""

    hardware: str
    row: Row
    status: GateStatus
    reasons: list[str]  # why it failed
    notes: list[str]  # checks skipped, with the reason

    @property
    def gated(self) -> bool:
        return self.status is not GateStatus.NOT_GATED

    @property
    def passed(self) -> bool:
        return self.status is GateStatus.PASS

    def to_json(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware,
            "torch": self.row[0],
            "transformers": self.row[1],
            "status": str(self.status),
            "gated": self.gated,
            "passed": self.passed if self.gated else None,
            "reasons": self.reasons,
            "notes": self.notes,
        }


@dataclass
class Group:
    """One hardware × torch × transformers: its cells, verdict and gate."""

    hardware: str
    row: Row
    cells: list[Cell]
    verdict: verdicts.Verdict
    gate: RowGate
    probes: dict[str, str]  # probe name -> expected verdict on this torch and device kind

    @property
    def records(self) -> list[RunRecord]:
        return [r for c in self.cells for r in c.runs]

    def strategy_cells(self, strategy: str) -> list[Cell]:
        return [c for c in self.cells if c.column.strategy == strategy]

    def status(self, strategy: str) -> verdicts.StrategyVerdict:
        return next(s for s in self.verdict.strategies if s.strategy == strategy)


@dataclass(frozen=True)
class ABEntry:
    """One A/B comparison given to the report (an `ab.json`, its calls remade by read_ab)."""

    path: str
    result: ABResult
    runs_left_out: int  # its runs' records, shown here and not as race evidence

    @property
    def preset(self) -> str:
        args = self.result.run_args
        if not args:
            return "?"  # none recorded (a comparison cut before its result)
        return next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--preset"), "default")

    @property
    def change(self) -> str:
        """What differs between the sides: versions that differ, else the candidate's env."""
        ref, cand = (self.result.sides.get(s) or {} for s in SIDES)
        rv, cv = ref.get("versions") or {}, cand.get("versions") or {}
        moved = [f"{k} {rv.get(k, '?')} → {cv.get(k, '?')}" for k in sorted({*rv, *cv})
                 if rv.get(k) != cv.get(k)]  # fmt: skip
        env = [f"{k}={v}" for k, v in (cand.get("env") or {}).items()]
        if not rv and not cv and not env:
            return "unknown: no run reported its versions"
        return ", ".join(moved) or ("same versions; candidate " + " ".join(env) if env else
                                    "same versions and environment (A/A)")  # fmt: skip


@dataclass(frozen=True)
class PoolEntry:
    """A calibration's pools of interleaved runs (the `reference.jsonl` and `candidate.jsonl`
    beside an injected-slowdown compare), and what `python -m racegate.harness.ab power` finds in
    them: disjoint comparisons, false alarms, catches, spreads; or why it could not read them."""

    path: str  # the folder, as the report shows it
    summary: PowerSummary | None
    problem: str | None = None


@dataclass
class Matrix:
    hardware: list[str]  # sections, in order: CPU first, then GPUs by key
    rows: dict[str, list[Row]]  # per hardware, by version
    strategies: dict[str, list[str]]  # per hardware: the production strategy, then registry order
    columns: list[Column]
    cells: dict[tuple[Row, Column], Cell]
    production_strategy: str  # of records that name no roles (older ones): the built-in's
    groups: dict[GroupKey, Group]
    run_ids: dict[int, int] = field(default_factory=dict)  # id(record) -> its 1-based run number
    ab: list[ABEntry] = field(default_factory=list)  # A/B comparisons given to the report
    pools: list[PoolEntry] = field(default_factory=list)  # the calibrations' pooled runs
    race_only: bool = False  # `report --race-only`: tok/s no run timed does not fail the gate
    # Per section: (production, control) its records ran under
    # (racegate.harness.judge.inputs.roles_of)
    roles: dict[str, tuple[str, str]] = field(default_factory=dict)
    dropped: int = 0  # duplicate records left out: a run given again counts once

    def production(self, section: str) -> str:
        """The production strategy this section's records ran under."""
        return self.roles.get(section, (self.production_strategy, ""))[0]

    @property
    def productions(self) -> str:
        """Every section's production strategy, each once: one name unless workloads differ."""
        names = [self.production(hw) for hw in self.hardware] or [self.production_strategy]
        return ", ".join(dict.fromkeys(names))

    @property
    def gates(self) -> dict[GroupKey, RowGate]:
        return {k: g.gate for k, g in self.groups.items()}

    @property
    def gated(self) -> list[RowGate]:
        return [g.gate for g in self.groups.values() if g.gate.gated]

    @property
    def ab_gated(self) -> list[ABEntry]:
        """The A/B comparisons that gate a change (an upgrade): every one but calibrations."""
        return [a for a in self.ab if a.result.calibration is None]

    @property
    def ab_failed(self) -> list[ABEntry]:
        """Gating A/B comparisons whose gate fails: slower, more memory, a failed/interrupted
        run, or a test tool in them."""
        return [a for a in self.ab_gated if a.result.failed]

    @property
    def calibrations(self) -> list[ABEntry]:
        """A/B comparisons that calibrate the comparison itself (A/A, injected slowdown): shown
        with whether each came out as it must, never in the gate."""
        return [a for a in self.ab if a.result.calibration is not None]

    @property
    def passed(self) -> bool:
        """Fail closed: at least one group ran the production strategy, every such passed, and
        no A/B comparison regressed. An A/B can fail the report, never stand in for race
        evidence."""
        return bool(self.gated) and all(g.passed for g in self.gated) and not self.ab_failed

    def run_id(self, record: RunRecord) -> int:
        return self.run_ids[id(record)]


def row_of(record: RunRecord) -> Row:
    return record.versions.torch, record.versions.transformers


def column_of(record: RunRecord) -> Column:
    s = record.scenario
    return Column(
        preset=s.preset,
        strategy=str(s.strategy),
        cache_state=str(s.cache_state),
        schedule=str(s.schedule),
        hardware=baselines.hardware_key(record),
        devices=len(s.devices),
        threads_per_device=s.threads_per_device,
        target_devices=len(s.target_devices),
        workload=s.workload,
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
    # Runs that overlapped others (timing_valid False) count for outcomes only; runs under the
    # test slowdown time nothing either, and fail the cell (problems).
    cell.slowed = sum(r.test_slowdown is not None for r in runs)
    timed = [r for r in runs if r.tokens_per_s and r.timed]
    tps = [r.tokens_per_s for r in timed if r.outcome == Outcome.OK]
    tps = tps or [r.tokens_per_s for r in timed]
    cell.tokens_per_s = statistics.median(tps) if tps else None
    cell.timings_void = not timed and any(r.tokens_per_s for r in runs)
    key = baselines.floor_key(runs[0].scenario)
    if not cell.timings_void and (tps or (baseline and key in baseline.floors)):
        cell.throughput = baselines.check_tokens(key, column.hardware, cell.tokens_per_s, baseline)
    elif cell.timings_void and baseline and key in baseline.floors:
        cell.throughput = unjudged(key, column.hardware, baseline.floors[key], runs)
    growths = [r.mem_growth for r in runs if r.mem_growth is not None]
    cell.mem_growth = max(growths) if growths else None
    for r in runs:
        ok, why = baselines.memory_flat(r)
        if not ok:
            cell.memory_ok, cell.memory_note = False, why
            break
    return cell


def unjudged(
    key: str, hardware: str, floor: baselines.Floor, runs: list[RunRecord]
) -> baselines.GateResult:
    """A cell with a floor whose runs' tokens/s judge nothing (none was timed): skipped, and
    failing the gate unless it gates race evidence only (gate_row's `race_only`)."""
    why = next(r.why_untimed for r in runs if r.tokens_per_s and not r.timed)
    detail = (
        f"tok/s not judged against the floor of {floor.tokens_per_s:,.0f} tok/s: no run was "
        f"timed ({why}); rerun with --jobs 1, or gate race evidence only (`report --race-only`)"
    )
    return baselines.GateResult(
        baselines.FloorCall.TIMING_VOID, f"{key} on {hardware}: {detail}", key, hardware,
        floor=floor.tokens_per_s, tolerance=floor.tolerance, detail=detail,
    )  # fmt: skip


def gate_row(
    hardware: str,
    row: Row,
    cells: list[Cell],
    production: str,
    decided: verdicts.StrategyVerdict | None = None,
    race_only: bool = False,
) -> RowGate:
    """The gate for one group, over the production strategy's cells and its verdict.

    Besides nested-FX errors and silent fallbacks, any other non-ok outcome (hang, crash,
    OOM, a blocked recompile, a run that was in effect serial) fails too: such a run proves
    nothing about the race, so it cannot count as a pass. A group with no run of the
    production strategy is not gated (records from before it was production), not passed.
    A cell with a floor and no timed run fails too, unless `race_only` (`report --race-only`).
    """
    mine = [c for c in cells if c.column.strategy == production]
    if not mine:
        why = f"no runs of the production strategy {production!r}"
        return RowGate(hardware, row, GateStatus.NOT_GATED, [], [why])
    reasons, notes = [], []
    for c in mine:
        reasons.extend(f"{c.column.key}: {p}" for p in c.problems())
    if decided is not None and decided.status is not verdicts.Status.SAFE and not reasons:
        # Clean runs are not a pass on their own: the verdict also needs the control to have
        # fired here and enough runs for its power (docs/gate.md).
        reasons.append(f"{production} {decided.status}: {decided.why}")
    unjudged_tps = [
        f"{c.column.key}: {c.throughput.detail}" for c in mine
        if c.throughput and c.throughput.verdict is baselines.FloorCall.TIMING_VOID and not c.slowed
    ]  # fmt: skip
    reasons += [] if race_only else unjudged_tps
    if void := [c for c in mine if c.timings_void and not c.slowed]:
        notes.append(f"{THROUGHPUT_SKIPPED}: runs overlapped others: {len(void)} of {len(mine)}")
    floorless = [
        c.throughput for c in mine
        if c.throughput and c.throughput.verdict is baselines.FloorCall.NO_BASELINE
    ]  # fmt: skip
    notes += sorted({t.detail for t in floorless})  # e.g. no baselines/<hardware>.json
    status = GateStatus.FAIL if reasons else GateStatus.PASS
    return RowGate(hardware, row, status, reasons, notes)


def _unreported(record: RunRecord) -> bool:
    return record.hardware.device_name == UNREPORTED_DEVICE


def expected_probes(torch_version: str, hardware: str) -> dict[str, str]:
    """Probe name -> the verdict racegate/harness/expectations/probes.toml expects on this torch and
    device."""
    try:
        entries = _probe_table()
        device = "cpu" if hardware == "cpu" else "cuda"
        found = {n: probe_expectations.lookup(entries, n, torch_version, device) for n in PROBES}
    except ValueError:  # a version that is no release ('?'): no probe is known to apply
        return {}
    return {n: str(e.verdict) for n, e in found.items() if e is not None}


_TABLE: list[probe_expectations.Expectation] = []


def _probe_table() -> list[probe_expectations.Expectation]:
    if not _TABLE:
        _TABLE.extend(probe_expectations.load())
    return _TABLE


def _strategy_order(names: set[str], production: str) -> list[str]:
    registry = [str(s) for s in STRATEGIES]
    rank = {s: i for i, s in enumerate(registry)}
    return sorted(names, key=lambda s: (s != production, rank.get(s, len(rank)), s))


def _hardware_order(section: str) -> tuple[bool, str]:
    # GPUs first: the production hardware; then the CPU.
    return section_parts(section)[0] == "cpu", section


def build_matrix(
    records: list[RunRecord],
    baselines_dir: Path,
    production: str = BUILTIN_ROLES.production,
    race_only: bool = False,
) -> Matrix:
    """The matrix; `race_only`: production cells with a floor and no timed run pass the gate
    (`report --race-only`), instead of failing it. Each section (hardware × workload) is judged
    by the roles its records ran under (racegate.harness.judge.inputs.roles_of, as pytest's verdict
    block judges them); `production` is that of records that name none, with the built-in
    control. Records of one section under different roles are a GateInputError."""
    cells_by: dict[tuple[Row, Column], list[RunRecord]] = defaultdict(list)
    # A run whose child never reported (a hang, in records older than the `built` event's
    # hardware) is filed under the machine its row's other runs name, not a column of its own.
    known = Counter((row_of(r), baselines.hardware_key(r)) for r in records if not _unreported(r))
    for r in records:
        col = column_of(r)
        if _unreported(r):
            on_cpu = r.scenario.devices == ("cpu",)
            same_row = [
                (n, hw)
                for (row, hw), n in known.items()
                if row == row_of(r) and (hw == "cpu") == on_cpu
            ]
            if same_row:
                col = replace(col, hardware=max(same_row)[1])
        cells_by[row_of(r), col].append(r)
    loaded: dict[str, baselines.Baseline | None] = {}
    cells = {}
    for (row, col), runs in cells_by.items():
        if col.hardware not in loaded:
            loaded[col.hardware] = baselines.load(baselines_dir, col.hardware)
        cells[row, col] = make_cell(row, col, runs, loaded[col.hardware])
    columns = sorted({c for _, c in cells_by})
    by_group: dict[GroupKey, list[Cell]] = defaultdict(list)
    for col in columns:
        for (row, c), cell in cells.items():
            if c == col:
                by_group[col.section, row].append(cell)
    hardware = sorted({hw for hw, _ in by_group}, key=_hardware_order)
    rows = {hw: sorted({r for h, r in by_group if h == hw}, key=_version_sort) for hw in hardware}
    default = (production, BUILTIN_ROLES.control)
    roles = {
        hw: roles_of([r for (h, _), cs in by_group.items() if h == hw for c in cs
                      for r in c.runs], unnamed=default)
        for hw in hardware
    }  # fmt: skip
    strategies = {
        hw: _strategy_order({c.column.strategy for (h, _), cs in by_group.items() if h == hw
                             for c in cs}, roles[hw][0])
        for hw in hardware
    }  # fmt: skip
    groups = {}
    for (hw, row), group_cells in by_group.items():
        probes = expected_probes(row[0], section_parts(hw)[0])
        prod, control = roles[hw]
        decided = verdicts.decide(
            [r for c in group_cells for r in c.runs],
            production=prod,
            probes=probes,
            strategies=strategies[hw],
            calibration=verdicts.Calibration(control=control),
        )
        gate = gate_row(hw, row, group_cells, prod, decided.production_verdict, race_only)
        groups[hw, row] = Group(hw, row, group_cells, decided, gate, probes)
    groups = dict(sorted(groups.items(), key=lambda kv: (_hardware_order(kv[0][0]),
                                                          _version_sort(kv[0][1]))))  # fmt: skip
    run_ids = {id(r): i for i, r in enumerate(records, 1)}
    return Matrix(hardware, rows, strategies, columns, cells, production, groups, run_ids,
                  race_only=race_only, roles=roles)  # fmt: skip


def group_name(hardware: str, row: Row) -> str:
    return f"{hardware} torch {row[0]} / transformers {row[1]}"


def gate(
    records: list[RunRecord], baselines_dir: Path, production_strategy: str, race_only: bool = False
) -> tuple[bool, list[str]]:
    """(passed, reasons): every hardware × torch × transformers group that ran the production
    strategy must pass its gate, and at least one must have run it.

    Reasons name the group; when the gate passes they hold the skipped checks and the groups
    not gated.
    """
    if not records:
        return False, ["no run records: nothing was gated"]
    m = build_matrix(records, baselines_dir, str(production_strategy), race_only)
    out = []
    for (hw, row), g in m.gates.items():
        name = group_name(hw, row)
        out.extend(f"{name}: {r}" for r in g.reasons)
        out.extend(f"{name}: {n}" for n in g.notes)
    if not m.gated:
        return False, [
            f"no runs of the production strategy {m.productions!r} in any group: nothing was gated",
            *out,
        ]
    failures = [group_name(hw, row) for (hw, row), g in m.gates.items() if g.gated and not g.passed]
    if m.passed:
        return True, out
    return False, [f"gate failed for: {', '.join(failures)}", *out]

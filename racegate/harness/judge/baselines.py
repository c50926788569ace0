"""Throughput floors per hardware (`baselines/<hardware>.json`) and the flat-memory check.

Owns the floor files, their update from run records, and the pure checks the gate and the
throughput cases share: a run below floor × (1 − tol) fails, above floor × (1 + tol) fails too.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from racegate.harness.judge.inputs import read_records
from racegate.harness.run import checked
from racegate.harness.run.checked import GateInputError
from racegate.harness.run.files import PUBLISHED, write_whole
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.spec import Scenario
from racegate.harness.scenario.vocab import STRATEGIES, Outcome, Schedule
from racegate.harness.scenario.workload_api import DEFAULT_WORKLOAD

SCHEMA_VERSION = 1
FLOOR_TOLERANCE = 0.10
MEMORY_GROWTH_LIMIT = 0.02  # peak memory may grow ≤ 2% across steady-state steps
REFRESH_COMMAND = "python -m racegate baseline --update <records.jsonl>"
# nested_fx_off is per_device with the nested-FX error switched off, so it is held to the floor
# of the same compiled step without the race: the incident's silent eager fallback then shows
# as a drop below it. That floor is `warmup`'s, not per_device's: in the
# scenario the gate case runs (2 GPUs, recompile schedule, 10 µs switch interval) per_device
# races in every run (results/h200x2-warmup-races: 20/20), so it cannot measure one;
# warmup runs the same compiled step (steady state 1.001–1.06× per_device's on an H200).
# warmup_locked is warmup plus one lock around the compiled call: held to warmup's floors, so
# the lock must cost nothing beyond the tolerance (on an H200 at one thread, where the lock is
# never contended: 0.998x warmup, results/h200x2-transformers-matrix; contended, at several
# threads per process, not measured). Such runs are never a floor themselves.
JUDGED_BY = {str(s): spec.judged_by for s, spec in STRATEGIES.items() if spec.judged_by}


class FloorCall(StrEnum):
    """What the throughput gate says about one run (or one cell's median)."""

    PASS = "pass"
    BELOW_FLOOR = "below_floor"  # a regression
    ABOVE_FLOOR = "above_floor"  # faster beyond tolerance: the floor is stale, refresh it
    NO_BASELINE = "no_baseline"  # no file for this hardware or no floor for this key: skipped
    NO_THROUGHPUT = "no_throughput"  # a floor exists but the run measured no tokens/s
    TIMING_VOID = "timing_void"  # the run overlapped other runs: its tokens/s are not judged


FAILING = frozenset({FloorCall.BELOW_FLOOR, FloorCall.ABOVE_FLOOR, FloorCall.NO_THROUGHPUT})


@dataclass
class GateResult:
    verdict: FloorCall
    message: str  # one line, `<key> on <hardware>: <detail>`; names the refresh command
    key: str = ""
    hardware: str = ""
    tokens_per_s: float | None = None
    floor: float | None = None
    tolerance: float | None = None
    detail: str = ""  # the message without the key and hardware

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING

    @property
    def skipped(self) -> bool:
        return self.verdict in (FloorCall.NO_BASELINE, FloorCall.TIMING_VOID)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = str(self.verdict)
        return data


@dataclass
class Floor:
    """One floor: median steady-state tokens/s of passing runs of one scenario shape."""

    tokens_per_s: float
    tolerance: float = FLOOR_TOLERANCE
    spread: float | None = None  # (max − min) / median of the runs' tokens/s
    window_spread: float | None = None  # median over runs of the within-run window spread
    n_runs: int = 0
    refused_runs: int = 0  # runs of this key left out because their outcome was not ok
    command: str = ""  # how the runs were made
    measured_at: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    preset: str = ""
    strategy: str = ""
    devices: int = 1
    threads_per_device: int = 1
    schedule: str = str(Schedule.BARRIER)
    steps: int = 0  # steady steps per thread of the runs (0: not recorded)
    note: str = ""  # why the tolerance is what it is, when hand-set


@dataclass
class Baseline:
    hardware: str
    device_name: str
    measured_at: str  # the latest update
    versions: dict[str, str]  # of the latest update; each floor keeps its own too
    floors: dict[str, Floor]
    path: Path | None = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "hardware": self.hardware,
            "device_name": self.device_name,
            "measured_at": self.measured_at,
            "versions": self.versions,
            "floors": {k: asdict(f) for k, f in sorted(self.floors.items())},
        }


def hardware_key(record: RunRecord) -> str:
    """'cpu', or the GPU model and the GPUs visible to the run: 'NVIDIA H200' × 2 → 'h200x2'."""
    hw = record.hardware
    name = hw.device_name or "cpu"
    if name == "cpu":
        return "cpu"
    count = hw.cuda_device_count or len(hw.device_names or ()) or 1
    model = re.sub(r"^(nvidia|tesla)\s+", "", name.strip().lower())
    return f"{re.sub(r'[^a-z0-9]+', '-', model).strip('-')}x{count}"


def floor_key(scenario: Scenario) -> str:
    """`preset/strategy/<devices>x<threads per device>/<steps>steps`, plus `/<schedule>` unless
    barrier, plus `/target<N>` when the target model runs on N devices of its own (the incident
    topology).

    Cache state is not in the key: warm-up steps and compiling steps are excluded from
    tokens/s, so steady state does not depend on it; the start schedule does, and so does the
    number of steps (a race case's 8 steps, most of them recompiles under `recompile`, measure
    no steady state that a 150-step throughput floor could judge). A strategy in JUDGED_BY takes
    its reference strategy's key. A workload other than the built-in one (`--workload`) adds
    `/workload=<module:function>`: its `small` is not the drafter's, and its floor must neither
    judge nor overwrite the drafter's.
    """
    s = scenario
    strategy = JUDGED_BY.get(str(s.strategy), str(s.strategy))
    key = f"{s.preset}/{strategy}/{len(s.devices)}x{s.threads_per_device}/{s.steps}steps"
    if s.schedule != Schedule.BARRIER:
        key += f"/{s.schedule}"
    if s.target_devices:
        key += f"/target{len(s.target_devices)}"
    if s.workload != DEFAULT_WORKLOAD:
        key += f"/workload={s.workload}"
    return key


def project_folder(start: Path | None = None) -> Path:
    """The project's folder of <hardware>.json floors: `[tool.racegate] baselines` (or env
    RACEGATE_BASELINES), relative to the project root (the folder of its pyproject.toml, as for
    the state folder), else `<project root>/baselines`. racegate's checkout keeps its own floors
    there; a project racegate is installed into has its own, or none: then no throughput is
    judged, and each throughput check says there is no baseline. A folder that was named but is
    not one is a ValueError: a misspelt name would skip every floor unnoticed."""
    from racegate.harness.run import state
    from racegate.harness.scenario import settings

    value, where = settings.setting("baselines", pyproject=settings.find_pyproject(start))
    folder = state.checkout_root(start) / str(value)
    if where != "default" and not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ValueError(
            f"baselines {str(value)!r} (from {where}): {folder} {what}; give the folder of "
            "<hardware>.json throughput floors (default: baselines/ beside pyproject.toml)"
        )
    return folder


def baseline_path(baselines_dir: Path, hardware: str) -> Path:
    return Path(baselines_dir) / f"{hardware}.json"


FLOOR_FIELDS = {f.name: f for f in dataclasses.fields(Floor)}


def parse_floor(raw: object, where: str) -> Floor:
    """One floor entry, every field checked: tokens/s finite and > 0, tolerance in (0, 0.5]."""
    raw = checked.table(raw, where)
    checked.keys(raw, where, required=("tokens_per_s",), allowed=FLOOR_FIELDS)
    floor = Floor(
        tokens_per_s=checked.positive_number(raw["tokens_per_s"], f"{where}: tokens_per_s"),
        tolerance=checked.tolerance(raw.get("tolerance", FLOOR_TOLERANCE), f"{where}: tolerance"),
        spread=checked.optional_number(raw.get("spread"), f"{where}: spread"),
        window_spread=checked.optional_number(raw.get("window_spread"), f"{where}: window_spread"),
    )
    for name in ("n_runs", "refused_runs", "steps"):
        if name in raw:
            setattr(floor, name, checked.integer(raw[name], f"{where}: {name}"))
    for name in ("devices", "threads_per_device"):
        if name in raw:
            setattr(floor, name, checked.integer(raw[name], f"{where}: {name}", low=1))
    for name in ("command", "measured_at", "preset", "strategy", "schedule", "note"):
        if name in raw:
            setattr(floor, name, checked.text(raw[name], f"{where}: {name}", empty=True))
    versions = checked.table(raw.get("versions", {}), f"{where}: versions")
    for k, v in versions.items():
        checked.text(v, f"{where}: versions.{k}", empty=True)
    floor.versions = dict(versions)
    return floor


def parse(data: object, path: Path, hardware: str) -> Baseline:
    """A baseline file's JSON, checked key by key; any bad field is one GateInputError line."""
    data = checked.table(data, str(path))
    if data.get("schema_version") != SCHEMA_VERSION:
        raise GateInputError(
            f"{path}: schema_version {data.get('schema_version')!r}, this racegate reads "
            f"{SCHEMA_VERSION}; re-measure with `{REFRESH_COMMAND}`"
        )
    known = ("schema_version", "hardware", "device_name", "measured_at", "versions", "floors")
    checked.keys(data, str(path), required=("floors",), allowed=known)
    raw_floors = checked.table(data["floors"], f"{path}: floors")
    floors = {k: parse_floor(v, f"{path}: floors[{k!r}]") for k, v in raw_floors.items()}
    return Baseline(
        hardware=checked.text(data.get("hardware", hardware), f"{path}: hardware"),
        device_name=checked.text(data.get("device_name", ""), f"{path}: device_name", empty=True),
        measured_at=checked.text(data.get("measured_at", ""), f"{path}: measured_at", empty=True),
        versions=checked.table(data.get("versions", {}), f"{path}: versions"),
        floors=floors,
        path=path,
    )


def load(baselines_dir: Path, hardware: str) -> Baseline | None:
    """The baseline for `hardware`, or None when there is no file for it (nor the folder).

    A path that exists but cannot be read as a baseline (a folder, unreadable, not JSON, a
    bad field) is an error, never "no baseline": that would skip the gate.
    """
    folder = Path(baselines_dir)
    if folder.exists() and not folder.is_dir():
        raise GateInputError(
            f"baselines folder {folder} is not a folder; give the folder of <hardware>.json files"
        )
    path = baseline_path(folder, hardware)
    if not path.exists() and not path.is_symlink():
        return None
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise GateInputError(
            f"{path}: cannot read this baseline ({exc}); fix or delete it"
        ) from None
    try:
        data = json.loads(text)  # NaN / Infinity load as floats; parse() refuses them by field
    except json.JSONDecodeError as exc:
        raise GateInputError(f"{path}: not JSON ({exc}); fix or delete it, then re-run") from None
    return parse(data, path, hardware)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _measured(tokens_per_s: object) -> bool:
    return _finite(tokens_per_s) and tokens_per_s > 0  # type: ignore[operator]


def _fmt(tps: float) -> str:
    return f"{tps:,.0f} tok/s"


def check_tokens(
    key: str, hardware: str, tokens_per_s: float | None, baseline: Baseline | None
) -> GateResult:
    """The throughput verdict for a measured rate (one run's, or a cell's median)."""
    result = GateResult(FloorCall.PASS, "", key=key, hardware=hardware, tokens_per_s=tokens_per_s)
    floor = baseline.floors.get(key) if baseline else None
    if baseline is None:
        result.verdict = FloorCall.NO_BASELINE
        result.detail = (
            f"gate skipped, no baseline for hardware {hardware!r} (baselines/{hardware}.json); "
            f"record one with `{REFRESH_COMMAND}`"
        )
    elif floor is None:
        result.verdict = FloorCall.NO_BASELINE
        result.detail = (
            f"gate skipped, {baseline.path or hardware} has no floor for this key; "
            f"record one with `{REFRESH_COMMAND}`"
        )
    elif tokens_per_s is None:
        result.verdict = FloorCall.NO_THROUGHPUT
        result.detail = (
            f"no tokens/s measured, floor {_fmt(floor.tokens_per_s)}; the run must finish "
            f"steady-state steps (refresh, if intended: `{REFRESH_COMMAND}`)"
        )
    elif not _measured(tokens_per_s):  # NaN compares false with everything: it must not pass
        result.verdict = FloorCall.NO_THROUGHPUT
        result.detail = (
            f"tokens/s is {tokens_per_s!r}, not a finite number > 0; floor "
            f"{_fmt(floor.tokens_per_s)}: the run measured nothing that can be judged"
        )
    else:
        if not _measured(floor.tokens_per_s):  # load() refuses these; a Baseline built by hand
            raise GateInputError(f"floor {key!r} is {floor.tokens_per_s!r}; expected a number > 0")
        delta = tokens_per_s / floor.tokens_per_s - 1
        vs = (
            f"{_fmt(tokens_per_s)} is {abs(delta):.1%} {'below' if delta < 0 else 'above'} "
            f"the floor {_fmt(floor.tokens_per_s)} (tolerance {floor.tolerance:.0%})"
        )
        if delta < -floor.tolerance:
            result.verdict = FloorCall.BELOW_FLOOR
            result.detail = (
                f"{vs}: a throughput regression; if the slowdown is accepted, "
                f"refresh with `{REFRESH_COMMAND}`"
            )
        elif delta > floor.tolerance:
            result.verdict = FloorCall.ABOVE_FLOOR
            result.detail = f"{vs}: the floor is stale, refresh it with `{REFRESH_COMMAND}`"
        else:
            result.detail = f"{vs}: ok"
    if floor is not None:
        result.floor, result.tolerance = floor.tokens_per_s, floor.tolerance
    result.message = f"{key} on {hardware}: {result.detail}"
    return result


def check(record: RunRecord, baseline: Baseline | None) -> GateResult:
    """The throughput verdict for one run against its hardware's baseline (None: no file)."""
    key, hardware = floor_key(record.scenario), hardware_key(record)
    if not record.timed:
        detail = f"not gated: {record.why_untimed}"
        return GateResult(FloorCall.TIMING_VOID, f"{key} on {hardware}: {detail}", key, hardware,
                          record.tokens_per_s, detail=detail)  # fmt: skip
    return check_tokens(key, hardware, record.tokens_per_s, baseline)


def memory_flat(record: RunRecord, limit: float = MEMORY_GROWTH_LIMIT) -> tuple[bool, str]:
    """(flat?, why): fails with the per-device peak series when growth exceeds `limit`."""
    growth = record.mem_growth
    if record.scenario.threads_per_device > 1:
        # The device's peak then depends on how its threads' steps interleave (runner.py).
        return True, "memory: not checked, several threads share each device"
    if growth is None:
        return True, "memory: no steady-state series (CPU run or too few steps), not checked"
    if growth <= limit:
        return True, f"memory: peak grew {growth:.2%} ≤ {limit:.0%} over steady steps"
    series = "; ".join(
        f"{dev}: [{', '.join(f'{b / 2**20:,.0f}' for b in s)}] MiB"
        for dev, s in sorted(record.mem_series.items())
    )
    return False, (
        f"memory: peak grew {growth:.2%} > {limit:.0%} over steady steps (not flat); {series}"
    )


def production_bars(records: list[RunRecord], production: str) -> list[str]:
    """What the production strategy's runs missed besides the race, from the records alone:
    memory that grew (memory_flat), runs under the test slowdown (a test tool, not the
    workload's own step). pytest's verdict, `harness run` and bisect pass these to
    racegate.harness.judge.gate.decide_gate; the report judges the same two bars per cell
    (racegate.harness.report.matrix: Cell.memory_ok, Cell.slowed) beside its tokens/s floors, and
    its group decision passes them the same way, so the same records get the same word."""
    mine = [r for r in records if r.scenario.strategy == production]
    out = [why for ok, why in map(memory_flat, mine) if not ok][:1]
    if slowed := sum(r.test_slowdown is not None for r in mine):
        out.append(f"{slowed}/{len(mine)} {production} runs under the test slowdown")
    return out


def _merged_versions(records: list[RunRecord]) -> dict[str, str]:
    said = [r.versions.to_json() for r in records]
    names = sorted({k for v in said for k in v})
    return {n: " | ".join(sorted({v.get(n, "?") for v in said})) for n in names}


def _floor_from(records: list[RunRecord], refused: int, tolerance: float, when: str) -> Floor:
    tps = [r.tokens_per_s for r in records if r.tokens_per_s]
    median = statistics.median(tps)
    windows = [r.tokens_per_s_spread for r in records if r.tokens_per_s_spread is not None]
    s = records[0].scenario
    return Floor(
        tokens_per_s=median,
        tolerance=tolerance,
        spread=(max(tps) - min(tps)) / median if len(tps) > 1 else None,
        window_spread=statistics.median(windows) if windows else None,
        n_runs=len(tps),
        refused_runs=refused,
        command=Counter(r.command for r in records).most_common(1)[0][0],
        measured_at=when,
        versions=_merged_versions(records),
        preset=s.preset,
        strategy=str(s.strategy),
        devices=len(s.devices),
        threads_per_device=s.threads_per_device,
        schedule=str(s.schedule),
        steps=s.steps,
    )


def no_floor_source(
    records: list[RunRecord], refused_outcomes: Counter[tuple[str, str, str]]
) -> str:
    """Why no record gave a floor: every kind of record left out, counted (never "none")."""
    judged = Counter(str(r.scenario.strategy) for r in records
                     if r.scenario.strategy in JUDGED_BY)  # fmt: skip
    unmeasured = sum(1 for r in records if not r.tokens_per_s
                     and r.scenario.strategy not in JUDGED_BY)  # fmt: skip
    parts = [
        f"{n} run(s) of {s}, which is held to {JUDGED_BY[s]}'s floors and is never one itself"
        for s, n in sorted(judged.items())
    ]
    if unmeasured:
        parts.append(f"{unmeasured} run(s) without tokens/s")
    failed = sorted(refused_outcomes.items())
    if failed:
        bad = ", ".join(f"{k} on {hw}: {o} ×{n}" for (hw, k, o), n in failed)
        parts.append(f"runs that did not pass: {bad}")
    return "; ".join(parts)


def update_from_records(
    paths: list[Path], baselines_dir: Path, tolerance: float = FLOOR_TOLERANCE
) -> list[Path]:
    """Write floors (median tokens/s of runs whose outcome is ok) into one file per hardware.

    Runs that did not pass, that overlapped other runs (timing_valid false) or that ran under
    the test slowdown are refused as floor sources (counted in `refused_runs`), and so are
    strategies in JUDGED_BY; floors already in a file for keys not covered here are kept.
    """
    tolerance = checked.tolerance(tolerance, "--tolerance")
    records = read_records(paths)
    measured = [r for r in records if r.tokens_per_s and r.scenario.strategy not in JUDGED_BY]
    good: dict[str, dict[str, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    refused: Counter[tuple[str, str]] = Counter()
    refused_outcomes: Counter[tuple[str, str, str]] = Counter()
    for r in measured:
        hw, key = hardware_key(r), floor_key(r.scenario)
        if r.outcome == Outcome.OK and r.timed:
            good[hw][key].append(r)
        else:
            refused[hw, key] += 1
            why = r.outcome if r.timing_valid else "overlapped"
            refused_outcomes[hw, key, "test slowdown" if r.test_slowdown else why] += 1
    if not good:
        raise ValueError(
            f"no run with outcome ok and tokens/s in {', '.join(map(str, paths))} "
            f"({no_floor_source(records, refused_outcomes)}); floors come only from passing "
            "runs of a strategy that has floors of its own"
        )
    when = datetime.now(UTC).date().isoformat()
    written = []
    for hw, by_key in sorted(good.items()):
        all_runs = [r for runs in by_key.values() for r in runs]
        old = load(baselines_dir, hw)
        floors = dict(old.floors) if old else {}
        for key, runs in by_key.items():
            floor = _floor_from(runs, refused[hw, key], tolerance, when)
            # what is written must load again: never a floor `load` would refuse
            floors[key] = parse_floor(asdict(floor), f"new floor {key!r}")
        base = Baseline(
            hardware=hw,
            device_name=all_runs[0].hardware.device_name or hw,
            measured_at=when,
            versions=_merged_versions(all_runs),
            floors=floors,
        )
        path = baseline_path(baselines_dir, hw)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, json.dumps(base.to_json(), indent=2) + "\n", mode=PUBLISHED)
        written.append(path)
    return written


def describe(baselines_dir: Path) -> str:
    """Every baseline file in `baselines_dir` as text: hardware, versions, date, floors."""
    files = sorted(Path(baselines_dir).glob("*.json")) if Path(baselines_dir).is_dir() else []
    if not files:
        return f"no baselines in {baselines_dir}; record some with `{REFRESH_COMMAND}`"
    lines = []
    for f in files:
        base = load(baselines_dir, f.stem)
        if base is None:
            continue
        versions = ", ".join(f"{k} {v}" for k, v in sorted(base.versions.items()))
        lines.append(f"{f}: {base.device_name}, measured {base.measured_at}; {versions}")
        for key, fl in sorted(base.floors.items()):
            spread = f"spread {fl.spread:.1%}" if fl.spread is not None else "spread n/a"
            lines.append(
                f"  {key}: {_fmt(fl.tokens_per_s)} ±{fl.tolerance:.0%} "
                f"({spread}, {fl.n_runs} runs, {fl.measured_at})"
            )
    return "\n".join(lines)

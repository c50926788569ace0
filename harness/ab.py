"""A/B mode: a reference and a candidate environment run interleaved on one machine, compared.

`python -m harness.ab compare --reference PY --candidate PY [--runs N] -- <harness run args>`
runs `<PY> -m harness run <args> --out <file>` once per run, each run a fresh process with its
side's interpreter (a venv or nox cell: the versions under test) and environment, in the order
A B B A A B B A … (interleaved, and counterbalanced so a steady drift of the machine's speed
falls on both sides alike), with every file in one private 0700 temp dir. Then
harness.judge.compare gives the ratio candidate/reference of steady-state tokens/s and of peak
memory with a 95% interval, and the call. Exit 0: no regression; 1: slower, more memory, or a
run that failed (fail closed: no call from partial evidence); 2: usage error. A calibration
(ABResult.calibration: an A/A, or the candidate alone under the test slowdown) exits 0 when it
came out as it must (no change; slower) and 1 when not; it gates no upgrade.

`python -m harness.ab power --reference R.jsonl --candidate C.jsonl --per-side K` draws
disjoint comparisons from pooled records (the `--records` of compare runs): A/A from the
reference runs alone, and reference vs candidate; it counts false alarms and catches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import checked, code_root, private_root
from harness.judge.baselines import MEMORY_GROWTH_LIMIT
from harness.judge.compare import (
    CHANGE_TOLERANCE,
    DEFAULT_CONFIDENCE,
    Change,
    Comparison,
    compare,
    log_spread,
    runs_needed,
)
from harness.judge.gate import EXIT_CODES, Word
from harness.judge.metrics import memory_growth
from harness.record import RunRecord, append_jsonl, read_jsonl
from harness.vocab import TEST_SLOWDOWN_ENV, Outcome, injected_slowdown

SCHEMA_VERSION = 1
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# A child `harness run` whose one record is a timing sample: SAFE, or UNDECIDED (one thread).
TIMING_EXITS = (EXIT_CODES[Word.SAFE], EXIT_CODES[Word.UNDECIDED])
# Options ab sets itself, or that would break "one run, one record, timed alone".
FORBIDDEN_RUN_ARGS = ("--out", "--json", "--jobs", "--repeat", "--keep")
# List options of `harness run`: more than one value is more than one run per process.
ONE_VALUE_RUN_ARGS = (
    "--strategies",
    "--strategy",
    "--cache-states",
    "--cache-state",
    "--threads-per-device",
)
SIDES = ("reference", "candidate")


@dataclass(frozen=True)
class Side:
    """One side of a comparison: the interpreter (its venv holds the versions) and extra env."""

    name: str
    python: str
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSample:
    """What one run contributes: its steady tokens/s and peak memory, from its record."""

    side: str
    index: int  # position in the interleaved order
    tokens_per_s: float
    peak_mem_bytes: int | None  # summed over devices; None where none was measured (CPU)
    versions: dict[str, str]
    wall_s: float
    # The UUIDs of the GPUs the run stepped on (harness.versions.hardware); () where its record
    # names none: a CPU run, or a record from before racegate recorded them.
    gpus: tuple[str, ...] = ()
    # Each device's peak (the record's peak_mem_bytes) and relative growth of its peak over
    # the steady steps (from the record's mem_series, where the record judged growth at all);
    # empty where none was measured (CPU), or in an ab.json from before they were kept.
    peak_by_device: dict[str, int] = field(default_factory=dict)
    growth_by_device: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceMemory:
    """One device's memory, candidate against reference: its peak compared as any metric is
    (ratio of the runs' peaks, interval, call), and its growth over the steady steps: the
    candidate's median growth above the reference's by more than `growth_limit` (the gate's
    flatness limit, docs/gate.md) is a leak the candidate brought."""

    device: str
    peak: Comparison
    growth_reference: list[float]  # per run; empty where growth was not measured
    growth_candidate: list[float]
    growth_limit: float = MEMORY_GROWTH_LIMIT

    @property
    def growth_excess(self) -> float | None:
        """Candidate's median growth less the reference's (None: not measured on both)."""
        if not self.growth_reference or not self.growth_candidate:
            return None
        return statistics.median(self.growth_candidate) - statistics.median(self.growth_reference)

    @property
    def grows(self) -> bool:
        excess = self.growth_excess
        return excess is not None and excess > self.growth_limit

    @property
    def regressed(self) -> bool:
        return self.peak.regressed or self.grows

    def peak_line(self) -> str:
        """e.g. `peak_mem_bytes on cuda:0: 1.250x [1.250, 1.250] (36.00 → 45.00 GiB median,
        95% CI, 3 vs 3 runs, tolerance 3%): more memory`: which device, and by how much."""
        c = self.peak
        gib = [statistics.median(v) / 2**30 for v in (c.reference, c.candidate)]
        return (
            f"{c.metric} on {self.device}: {c.ratio_text()} ({gib[0]:,.2f} → {gib[1]:,.2f} GiB "
            f"median, {round(c.confidence * 100)}% CI, {len(c.reference)} vs "
            f"{len(c.candidate)} runs, tolerance {c.tolerance:.0%}): {c.word}"
        )

    def growth_line(self) -> str:
        """The growth of the peak over steady steps, reference → candidate, and the call."""
        excess = self.growth_excess
        if excess is None:
            return f"mem_growth on {self.device}: not compared (not measured on both sides)"
        ref, cand = (statistics.median(v) for v in (self.growth_reference, self.growth_candidate))
        word = "grows (a leak)" if self.grows else "no growth beyond the reference's"
        return (
            f"mem_growth on {self.device}: {ref:+.2%} → {cand:+.2%} over steady steps (median "
            f"of {len(self.growth_reference)} vs {len(self.growth_candidate)} runs; "
            f"{excess:+.2%} points, limit +{self.growth_limit:.0%}): {word}"
        )

    def cell(self) -> str:
        """The report's short form: `cuda:0 36.00 → 45.00 GiB, growth +0.0% → +0.0%`."""
        gib = [statistics.median(v) / 2**30 for v in (self.peak.reference, self.peak.candidate)]
        text = f"{self.device} {gib[0]:,.2f} → {gib[1]:,.2f} GiB"
        if self.peak.regressed:
            text += f" ({self.peak.word})"
        if self.growth_excess is not None:
            ref, cand = (
                statistics.median(v) for v in (self.growth_reference, self.growth_candidate)
            )
            text += f", growth {ref:+.1%} → {cand:+.1%}" + (" (grows)" if self.grows else "")
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "peak": self.peak.to_json(),
            "growth_reference": self.growth_reference,
            "growth_candidate": self.growth_candidate,
            "growth_limit": self.growth_limit,
            "regressed": self.regressed,
        }


@dataclass
class ABResult:
    """A whole comparison: sides, every run's sample, both metrics compared, or why not."""

    run_args: list[str]
    sides: dict[str, dict[str, Any]]  # name -> python, env, versions
    samples: list[RunSample] = field(default_factory=list)
    throughput: Comparison | None = None
    memory: Comparison | None = None
    memory_note: str | None = None  # why memory was not compared
    failure: str | None = None  # a run failed or gave no number: no call is made
    schema_version: int = SCHEMA_VERSION

    @property
    def calibration_kind(self) -> str | None:
        """AA, INJECTED, or None where the comparison gates a change (an upgrade, or a setting
        of the candidate's environment). Both kinds have one interpreter on both sides (two
        venvs may differ in packages no record names) and the same recorded versions: A/A (the
        same environment too, less a zero test slowdown) must call no change, INJECTED (the
        candidate alone under the test slowdown) must call slower. Anything else gates."""
        ref, cand = (self.sides.get(s) or {} for s in SIDES)
        versions = ref.get("versions") or {}
        if ref.get("python") != cand.get("python"):
            return None
        if not versions or versions != (cand.get("versions") or {}):
            return None
        tools = [injected_slowdown(side.get("env") or {}) for side in (ref, cand)]
        if tools == [None, None]:
            return AA if _settings(ref) == _settings(cand) else None
        return INJECTED if tools[0] is None else None

    @property
    def calibration(self) -> str | None:
        """The calibration as the report names it ("injected slowdown (RACEGATE_TEST_SLOWDOWN=
        0.05)", "A/A"), or None: calibration_kind with the candidate's setting."""
        kind = self.calibration_kind
        if kind != INJECTED:
            return kind
        return f"{kind} ({injected_slowdown(self.sides['candidate'].get('env') or {})})"

    @property
    def as_calibrated(self) -> bool:
        """A calibration came out as it must: every run made, and the A/A called no change of
        tokens/s or the injected slowdown was called slower."""
        kind = self.calibration_kind
        if kind is None or self.failure is not None or self.throughput is None:
            return False
        return self.throughput.change is (Change.NONE if kind == AA else Change.LOWER)

    def test_tool_misuse(self) -> str | None:
        """Why no gate rests on this comparison's runs: a side under the test slowdown in a
        comparison that is no calibration (other versions, or the reference slowed), or None."""
        if self.calibration is not None:
            return None
        for name in SIDES:
            if tool := injected_slowdown((self.sides.get(name) or {}).get("env") or {}):
                return (
                    f"the {name} ran under {tool}, a test tool that adds work to every step, "
                    "in a comparison that is no calibration (only the candidate may carry it, "
                    "with the reference's python and versions): no gate rests on these runs"
                )
        return None

    @property
    def device_memory(self) -> list[DeviceMemory]:
        """Each device's peak and growth compared (compare_devices), at the throughput's
        tolerance and confidence; empty where no throughput was compared or no run measured
        memory per device."""
        if self.throughput is None:
            return []
        return compare_devices(self.samples, self.throughput.tolerance, self.throughput.confidence)

    @property
    def failed(self) -> bool:
        """Its own gate fails. A comparison that gates a change: a run failed, a test tool ran
        in it, or either metric regressed significantly. A calibration: it did not come out as
        it must (as_calibrated); the report shows that, and gates no upgrade on it."""
        if self.calibration is not None:
            return not self.as_calibrated
        return self.why_failed is not None

    @property
    def why_failed(self) -> str | None:
        """Why its gate fails, in one line: the failure, the misuse, each regressed metric's
        comparison, or the calibration's miss (None: it passes)."""
        if self.failure is not None:
            return self.failure
        if self.throughput is None:
            return "no throughput was compared"
        if self.calibration is not None:
            if self.as_calibrated:
                return None
            miss = "a false alarm" if self.calibration_kind == AA else "the slowdown was not caught"
            return f"{self.calibration}: {miss}: {self.throughput.line()}"
        if misuse := self.test_tool_misuse():
            return misuse
        bad = [c.line() for c in (self.throughput, self.memory) if c is not None and c.regressed]
        devices = self.device_memory
        if any(d.peak.regressed for d in devices):  # it says which device, and by how much
            bad = [c for c in bad if not c.startswith(f"{self.memory.metric}:")]  # type: ignore[union-attr]
        bad += [d.peak_line() for d in devices if d.peak.regressed]
        bad += [d.growth_line() for d in devices if d.grows]
        return "; ".join(bad) or None

    def lines(self) -> list[str]:
        """The verdict lines, the decision last."""
        out = [
            f"{name}: {info['python']} {' '.join(f'{k}={v}' for k, v in info['env'].items())}"
            f" — {_versions(info.get('versions', {}))}"
            for name, info in self.sides.items()
        ]
        versions = [info.get("versions") for info in self.sides.values()]
        if versions[0] and versions[0] == versions[1]:
            out.append("(the same package versions on both sides)")
        if self.throughput is not None:
            out.append(self.throughput.line())
        if self.memory is not None:
            out.append(self.memory.line())
        elif self.memory_note:
            out.append(f"peak_mem_bytes: not compared ({self.memory_note})")
        for device in self.device_memory:
            out += [device.peak_line(), device.growth_line()]
        if self.failure:
            out.append(f"A/B FAILED: {self.failure}")
        elif self.calibration is not None and self.throughput is not None:
            word = "as it must" if self.as_calibrated else f"NOT as it must ({self.why_failed})"
            out.append(
                f"A/B calibration, {self.calibration}: candidate {self.throughput.word}, "
                f"{word}; it gates no upgrade"
            )
        elif misuse := self.test_tool_misuse():
            out.append(f"A/B FAILED: {misuse}")
        elif self.throughput is not None:
            memory = self.memory.word if self.memory else "memory not compared"
            if worse := [d.device for d in self.device_memory if d.regressed]:
                memory = f"more memory or growth on {', '.join(worse)}"
            gate = "FAILS" if self.failed else "passes"
            out.append(f"A/B: candidate {self.throughput.word}, {memory}: the gate {gate}")
        return out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["throughput"] = self.throughput.to_json() if self.throughput else None
        data["memory"] = self.memory.to_json() if self.memory else None
        data["device_memory"] = [d.to_json() for d in self.device_memory]
        return data


def _versions(versions: dict[str, str]) -> str:
    keys = ("torch", "transformers", "triton", "python")
    return ", ".join(f"{k} {versions[k]}" for k in keys if k in versions) or "versions unknown"


# The kinds of calibration (ABResult.calibration): comparisons that test the comparison itself.
AA = "A/A"
INJECTED = "injected slowdown"


def _settings(side: dict[str, Any]) -> dict[str, str]:
    """A side's environment less the test slowdown (a zero one is no setting)."""
    return {k: v for k, v in (side.get("env") or {}).items() if k != TEST_SLOWDOWN_ENV}


def check_run_args(run_args: Sequence[str]) -> list[str]:
    """The `harness run` arguments for one timed run per process; ValueError names a bad one.

    The options ab owns are refused, and a list option must name one value."""
    args = list(run_args)
    for i, arg in enumerate(args):
        name, sep, value = arg.partition("=")
        if name in FORBIDDEN_RUN_ARGS:
            raise ValueError(
                f"harness run option {name!r} is set by ab itself or breaks one timed run per "
                f"process; leave out: {', '.join(FORBIDDEN_RUN_ARGS)}"
            )
        if name in ONE_VALUE_RUN_ARGS:
            value = value if sep else (args[i + 1] if i + 1 < len(args) else "")
            if "," in value:
                raise ValueError(
                    f"harness run option {name} {value!r}: an A/B run takes one value (one "
                    "timed run per process); compare the others in A/Bs of their own"
                )
    return args


def order(runs: int) -> list[tuple[str, int]]:
    """(side, k) in the order A B B A A B B A …: interleaved and counterbalanced."""
    out: list[tuple[str, int]] = []
    for k in range(runs):
        pair = SIDES if k % 2 == 0 else SIDES[::-1]
        out.extend((side, k) for side in pair)
    return out


def _names_cache_state(run_args: Sequence[str]) -> bool:
    return any(a.partition("=")[0] in ("--cache-states", "--cache-state") for a in run_args)


def run_once(side: Side, run_args: list[str], out: Path, timeout_s: float) -> RunRecord:
    """One fresh `<python> -m harness run` process; its one record, or ValueError saying why not."""
    env = {**os.environ, **side.env}
    # --repeat 1: `harness run` makes 3 runs per scenario on a GPU unless told otherwise, and
    # runs every cache state (two of them after a priming run): one cold run unless told.
    state = [] if _names_cache_state(run_args) else ["--cache-states", "cold"]
    cmd = [side.python, "-m", "harness", "run", *run_args, *state, "--repeat", "1"]
    cmd += ["--out", str(out)]
    try:
        proc = subprocess.run(
            cmd,
            cwd=code_root.child_cwd(),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise ValueError(f"did not finish within {timeout_s:.0f} s") from None
    except OSError as exc:
        raise ValueError(f"cannot start {side.python!r}: {exc}") from None
    records = read_jsonl(out) if out.exists() else []
    # `harness run` exits with the race gate's decision. One thread cannot race, so a clean
    # run's verdict is UNDECIDED (7): a timing sample all the same. A failed run (UNSAFE, 1)
    # or anything else is no sample.
    if proc.returncode not in TIMING_EXITS or len(records) != 1:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ValueError(
            f"`harness run` exited {proc.returncode} with {len(records)} record(s) "
            f"(one expected): {' | '.join(tail) or 'no output'}"
        )
    return records[0]


def sample_of(record: RunRecord, side: str, index: int) -> RunSample:
    """The run's numbers; ValueError naming what is missing (fail closed)."""
    if record.outcome != Outcome.OK:
        raise ValueError(f"outcome {record.outcome}: {record.detail or 'no detail'}")
    if not record.timing_valid:
        raise ValueError("its timing is not valid (it overlapped another run)")
    if not record.tokens_per_s:
        raise ValueError("it recorded no steady-state tokens/s")
    mem = sum(record.peak_mem_bytes.values()) if record.peak_mem_bytes else None
    gpus = tuple(str(u) for u in (record.hardware or {}).get("device_uuids") or () if u)
    growth: dict[str, float] = {}
    if record.mem_growth is not None:  # the record judged growth (one thread per device)
        made = {d: memory_growth(s, 0) for d, s in record.mem_series.items()}
        growth = {d: g for d, g in made.items() if g is not None}
    return RunSample(
        side, index, record.tokens_per_s, mem, record.versions, record.wall_s, gpus,
        peak_by_device=dict(record.peak_mem_bytes), growth_by_device=growth,
    )  # fmt: skip


def _gpus(gpus: tuple[str, ...]) -> str:
    return ", ".join(gpus) if gpus else "no recorded GPU"


def gpu_mismatch(samples: Sequence[RunSample]) -> str | None:
    """Why the runs did not all step on the same GPUs, or None (they did, or none recorded any).

    An A/B compares both sides on one machine's GPU. Two H200s differ by 0.4-1.5% in the 8B's
    speed (results/h200-ab-power-8b), so a side whose environment points its runs
    at another GPU (CUDA_VISIBLE_DEVICES in --candidate-env) compares machines, not versions."""
    if len({x.gpus for x in samples}) <= 1:
        return None
    first = samples[0]
    other = next(x for x in samples if x.gpus != first.gpus)
    return (
        f"the runs did not all step on the same GPU: run {first.index + 1} ({first.side}) on "
        f"{_gpus(first.gpus)}, run {other.index + 1} ({other.side}) on {_gpus(other.gpus)}; "
        "an A/B compares both sides on one GPU"
    )


def by_side(samples: list[RunSample]) -> dict[str, list[RunSample]]:
    """The samples of each side, in run order."""
    return {s: [x for x in samples if x.side == s] for s in SIDES}


def _compare_peaks(
    peaks: dict[str, list[float]], tolerance: float, confidence: float
) -> Comparison:
    """Peak memory, candidate against reference: compared as tokens/s are (a rise is worse)."""
    return compare(
        peaks["reference"],
        peaks["candidate"],
        metric="peak_mem_bytes",
        tolerance=tolerance,
        confidence=confidence,
    )


def compare_samples(
    samples: list[RunSample], tolerance: float, confidence: float
) -> tuple[Comparison, Comparison | None, str | None]:
    """Throughput and (where every run measured it) peak memory, reference vs candidate."""
    by = by_side(samples)
    tput = compare(
        [x.tokens_per_s for x in by["reference"]],
        [x.tokens_per_s for x in by["candidate"]],
        tolerance=tolerance,
        confidence=confidence,
    )
    mems = {s: [x.peak_mem_bytes for x in by[s]] for s in SIDES}
    if any(m is None for s in SIDES for m in mems[s]):
        return tput, None, "no peak memory recorded (CPU runs measure none)"
    memory = _compare_peaks(mems, tolerance, confidence)  # type: ignore[arg-type]
    return tput, memory, None


def compare_devices(
    samples: list[RunSample], tolerance: float, confidence: float
) -> list[DeviceMemory]:
    """Each device every run measured: its peak compared (ratio, interval, call) and its
    growth, where every run measured that too. A device only some runs measured is none of
    these (the summed peak, compare_samples, still counts it)."""
    by = by_side(samples)
    if not by["reference"] or not by["candidate"]:
        return []
    devices = [d for d in samples[0].peak_by_device if all(d in x.peak_by_device for x in samples)]
    out = []
    for device in sorted(devices):
        peaks = {s: [x.peak_by_device[device] for x in by[s]] for s in SIDES}
        peak = _compare_peaks(peaks, tolerance, confidence)
        measured = all(device in x.growth_by_device for x in samples)
        growth = {s: [x.growth_by_device[device] for x in by[s]] if measured else [] for s in SIDES}
        out.append(DeviceMemory(device, peak, growth["reference"], growth["candidate"]))
    return out


def run_ab(
    reference: Side,
    candidate: Side,
    run_args: Sequence[str],
    *,
    runs: int,
    tolerance: float = CHANGE_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
    timeout_s: float = 900.0,
    records_dir: Path | None = None,
    progress: Any = None,
) -> ABResult:
    """Run both sides `runs` times each, interleaved, and compare; stops at the first failure.

    Interrupted (SIGINT: Ctrl-C, or `timeout -s INT` around nox), it stops there and fails the
    A/B, with the runs made so far compared when each side has two, so the user sees them.
    """
    if runs < 2:
        raise ValueError(f"runs must be ≥ 2 per side (one run has no spread), got {runs}")
    args = check_run_args(run_args)
    sides = {"reference": reference, "candidate": candidate}
    result = ABResult(args, {n: {"python": s.python, "env": dict(s.env)} for n, s in sides.items()})
    workdir = Path(tempfile.mkdtemp(prefix="racegate-ab-"))  # 0700, unpredictable name
    plan = order(runs)
    try:
        for index, (name, k) in enumerate(plan):
            out = workdir / f"{index:03d}-{name}-{k}.jsonl"
            try:
                record = run_once(sides[name], args, out, timeout_s)
                if records_dir is not None:
                    append_jsonl(records_dir / f"{name}.jsonl", record)
                sample = sample_of(record, name, index)
            except ValueError as exc:
                result.failure = f"{name} run {k + 1} of {runs}: {exc}"
                return result
            result.samples.append(sample)
            result.sides[name]["versions"] = sample.versions
            if mismatch := gpu_mismatch(result.samples):
                result.failure = mismatch
                return result
            if progress is not None:
                progress(f"{name} run {k + 1}/{runs}: {sample.tokens_per_s:,.0f} tok/s")
    except KeyboardInterrupt:  # subprocess.run has killed the run in flight
        made = {n: sum(x.side == n for x in result.samples) for n in sides}
        result.failure = (
            f"interrupted after {len(result.samples)} of {len(plan)} runs "
            f"({', '.join(f'{n} {c}' for n, c in made.items())}); no call is made"
        )
        if min(made.values()) < 2:
            return result
        result.failure += ": the comparison above is of the runs made, not a verdict"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result.throughput, result.memory, result.memory_note = compare_samples(
        result.samples, tolerance, confidence
    )
    return result


# ---- reading an ab.json back (the report) ---------------------------------------------------
AB_FILE_NAMES = ("ab.json", "ab-*.json")  # gpu_ab's and benchmarks/ab_power_gpu.sh's
AB_RECORDS = "ab-records"  # where gpu_ab (noxfile) keeps the runs of its ab.json
AB_POOLS = ("reference.jsonl", "candidate.jsonl")  # compare --records: the runs of each side


def is_ab_file(path: Path) -> bool:
    return any(path.match(name) for name in AB_FILE_NAMES)


def ab_files(paths: Sequence[Path]) -> list[Path]:
    """The A/B results among `paths`: files named as `compare --out` writes them, and every
    such file under the folders given, each once, in order."""
    files: dict[Path, None] = {}
    for path in map(Path, paths):
        if path.is_dir():
            found = {p for name in AB_FILE_NAMES for p in path.rglob(name) if p.is_file()}
            files.update(dict.fromkeys(sorted(found)))
        elif path.is_file() and is_ab_file(path):
            files[path] = None
    return list(files)


def cut_ab_dirs(paths: Sequence[Path]) -> list[Path]:
    """gpu_ab's `ab-records/` folders under `paths` with no ab.json beside them."""
    found = {p for path in map(Path, paths) if path.is_dir() for p in path.rglob(AB_RECORDS)}
    return sorted(p for p in found if p.is_dir() and not (p.parent / "ab.json").is_file())


def _sample_from(data: object, where: str) -> RunSample:
    row = checked.table(data, where)
    mem, side, gpus = row.get("peak_mem_bytes"), row.get("side"), row.get("gpus", [])
    if not isinstance(gpus, list):
        raise checked.GateInputError(f"{where}.gpus is {gpus!r:.60}; expected a list of UUIDs")
    if side not in SIDES:
        raise checked.GateInputError(f"{where}.side is {side!r}; choose from: {', '.join(SIDES)}")
    return RunSample(
        side=str(side),
        index=checked.integer(row.get("index"), f"{where}.index"),
        tokens_per_s=checked.positive_number(row.get("tokens_per_s"), f"{where}.tokens_per_s"),
        peak_mem_bytes=None if mem is None else checked.integer(mem, f"{where}.peak_mem_bytes"),
        versions=checked.table(row.get("versions", {}), f"{where}.versions"),
        wall_s=checked.positive_number(row.get("wall_s"), f"{where}.wall_s"),
        gpus=tuple(checked.text(g, f"{where}.gpus[{i}]") for i, g in enumerate(gpus)),
        peak_by_device={d: checked.integer(v, f"{where}.peak_by_device.{d}") for d, v in
                        checked.table(row.get("peak_by_device", {}), f"{where}.peak_by_device")
                        .items()},
        growth_by_device={d: _finite(v, f"{where}.growth_by_device.{d}") for d, v in
                          checked.table(row.get("growth_by_device", {}),
                                       f"{where}.growth_by_device").items()},
    )  # fmt: skip


def _finite(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise checked.GateInputError(f"{where} is {value!r:.60}; expected a finite number")
    return float(value)


def _sides_from(data: object, where: str) -> dict[str, dict[str, Any]]:
    sides = checked.table(data, where)
    if set(sides) != set(SIDES):
        raise checked.GateInputError(
            f"{where} has {sorted(sides)}; expected exactly: {', '.join(SIDES)}"
        )
    out = {}
    for name in SIDES:
        side = checked.table(sides[name], f"{where}.{name}")
        out[name] = {
            "python": checked.text(side.get("python"), f"{where}.{name}.python"),
            "env": checked.table(side.get("env", {}), f"{where}.{name}.env"),
            "versions": checked.table(side.get("versions", {}), f"{where}.{name}.versions"),
        }
    return out


def _stored_change(data: dict[str, Any], name: str, path: Path) -> str | None:
    kept = data.get(name)
    if kept is None:
        return None
    return str(checked.table(kept, f"{path}: {name}").get("change"))


def read_ab(path: Path) -> ABResult:
    """An A/B result as `compare --out` wrote it, with its calls made again from its samples.

    The stored ratio, interval and call are not trusted: compare_samples, the one place a
    call is made, recomputes them from the runs at the stored tolerance and confidence, and a
    stored call that disagrees (or one stored where the runs give none, or none where they
    give one) fails closed: GateInputError, one line naming the file and field (the report's
    and the CLI's usage error, exit 2)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise checked.GateInputError(f"{path}: not an A/B result: {exc}") from None
    data = checked.table(data, str(path))
    if data.get("schema_version") != SCHEMA_VERSION:
        raise checked.GateInputError(
            f"{path}: schema_version is {data.get('schema_version')!r}; this racegate reads "
            f"A/B results of version {SCHEMA_VERSION}"
        )
    raw, run_args = data.get("samples"), data.get("run_args")
    if not isinstance(raw, list):
        raise checked.GateInputError(f"{path}: samples is {raw!r:.60}; expected a list of runs")
    if not isinstance(run_args, list):
        raise checked.GateInputError(f"{path}: run_args is {run_args!r:.60}; expected a list")
    failure, note = data.get("failure"), data.get("memory_note")
    result = ABResult(
        run_args=[checked.text(a, f"{path}: run_args[{i}]", empty=True)
                  for i, a in enumerate(run_args)],
        sides=_sides_from(data.get("sides"), f"{path}: sides"),
        samples=[_sample_from(row, f"{path}: samples[{i}]") for i, row in enumerate(raw)],
        memory_note=None if note is None else checked.text(note, f"{path}: memory_note"),
        failure=None if failure is None else checked.text(failure, f"{path}: failure"),
    )  # fmt: skip
    # Runs on different GPUs make no A/B, whatever call the file stores (fail closed).
    result.failure = result.failure or gpu_mismatch(result.samples)
    stored = data.get("throughput")
    if stored is None:  # a run failed, or an interrupt left a side under two runs
        if result.failure is None:
            raise checked.GateInputError(f"{path}: throughput is null and no failure says why")
        if data.get("memory") is not None:
            raise checked.GateInputError(f"{path}: memory is compared but throughput is not")
        return result
    stored = checked.table(stored, f"{path}: throughput")
    tol, conf = stored.get("tolerance"), stored.get("confidence")
    for name, value in (("tolerance", tol), ("confidence", conf)):
        if not isinstance(value, float) or not math.isfinite(value):
            raise checked.GateInputError(
                f"{path}: throughput.{name} is {value!r}; expected a fraction"
            )
    try:
        made = compare_samples(result.samples, tol, conf)  # type: ignore[arg-type]
    except ValueError as exc:
        raise checked.GateInputError(f"{path}: samples: {exc}") from None
    result.throughput, result.memory, made_note = made
    result.memory_note = result.memory_note or made_note
    for name, comparison in (("throughput", result.throughput), ("memory", result.memory)):
        kept = _stored_change(data, name, path)
        given = None if comparison is None else str(comparison.change)
        if kept != given:
            raise checked.GateInputError(
                f"{path}: {name}.change is {kept!r}, but its samples give {given!r}"
            )
    stored_devices = data.get("device_memory")
    if stored_devices is not None:  # an ab.json from before it was kept has none
        if not isinstance(stored_devices, list):
            raise checked.GateInputError(f"{path}: device_memory is {stored_devices!r:.60}")
        kept_calls = {
            str(checked.table(d, f"{path}: device_memory[{i}]").get("device")): d.get("regressed")
            for i, d in enumerate(stored_devices)
        }
        given_calls = {d.device: d.regressed for d in result.device_memory}
        if kept_calls != given_calls:
            raise checked.GateInputError(
                f"{path}: device_memory calls are {kept_calls}, but its samples give {given_calls}"
            )
    return result


def cut_ab() -> ABResult:
    """An A/B whose `ab-records/` exist but whose ab.json does not: it was cut before it wrote
    its result (killed, or a traceback). Fail closed: a failed comparison, not race runs."""
    unknown = {"python": "?", "env": {}, "versions": {}}
    return ABResult(
        run_args=[],
        sides={s: dict(unknown) for s in SIDES},
        failure="runs in ab-records/ but no ab.json beside them: the comparison was cut before "
        "it wrote its result",
    )


# ---- power: disjoint comparisons drawn from one pool of interleaved runs -------------------
def pooled_samples(path: Path, side: str) -> list[RunSample]:
    """Every record of a pool file as a sample (in file order); ValueError names a bad one."""
    out = []
    for n, record in enumerate(read_jsonl(path)):
        try:
            out.append(sample_of(record, side, n))
        except ValueError as exc:
            raise ValueError(f"{path} record {n + 1}: {exc}") from None
    return out


def power_comparisons(
    reference: list[RunSample],
    candidate: list[RunSample],
    per_side: int,
    *,
    tolerance: float = CHANGE_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[list[Comparison], list[Comparison]]:
    """(A/A comparisons, reference-vs-candidate comparisons), each set disjoint within itself.

    A/A: consecutive blocks of 2·per_side runs of one side, split alternately (runs close in
    time land on both halves), from the reference pool and then from the candidate pool (the
    same versions on both halves either way). A/B: the i-th block of per_side reference runs
    against the i-th block of per_side candidate runs.
    """
    if per_side < 2:
        raise ValueError(f"per_side must be ≥ 2 (one run has no spread), got {per_side}")
    tps = [x.tokens_per_s for x in reference]
    cand = [x.tokens_per_s for x in candidate]
    kw = {"tolerance": tolerance, "confidence": confidence}
    aa = [
        compare(b[0::2], b[1::2], **kw)
        for pool in (tps, cand)
        for b in (pool[i : i + 2 * per_side] for i in range(0, len(pool), 2 * per_side))
        if len(b) == 2 * per_side
    ]
    n_ab = min(len(tps), len(cand)) // per_side
    ab = [
        compare(
            tps[i * per_side : (i + 1) * per_side], cand[i * per_side : (i + 1) * per_side], **kw
        )
        for i in range(n_ab)
    ]
    return aa, ab


@dataclass(frozen=True)
class PoolSpread:
    """One pool's run-to-run spread, and the runs per side it needs to catch `slowdown`."""

    side: str
    runs: int
    spread: float  # log_spread of its tokens/s
    runs_needed: int | None  # None: more than runs_needed searches (> 1000)


@dataclass(frozen=True)
class PowerSummary:
    """What `power` finds in two pools: the comparisons, false alarms, catches, and spreads."""

    per_side: int
    slowdown: float
    aa: list[Comparison]
    ab: list[Comparison]
    pools: list[PoolSpread]
    gpus: dict[tuple[str, ...], int] = field(default_factory=dict)  # GPUs -> runs, both pools

    @property
    def false_alarms(self) -> int:
        """A/A comparisons that called any change (either way is a false alarm)."""
        return sum(c.change is not Change.NONE for c in self.aa)

    @property
    def caught(self) -> int:
        """Reference-vs-candidate comparisons that called the candidate a regression."""
        return sum(c.regressed for c in self.ab)

    def lines(self) -> list[str]:
        out = []
        k = self.per_side
        for title, comps in (("A/A", self.aa), ("reference vs candidate", self.ab)):
            out.append(f"{title}: {len(comps)} disjoint comparison(s) of {k} vs {k}")
            out += [f"  {i:2d}. {comp.line()}" for i, comp in enumerate(comps, 1)]
        out += [
            f"{p.side} pool: {p.runs} runs, run-to-run spread {p.spread:.2%}; runs per side to "
            f"catch a {self.slowdown:.0%} slowdown 90% of the time: {p.runs_needed or '> 1000'}"
            for p in self.pools
        ]
        if len(self.gpus) > 1:  # pools from several calls: a comparison may pair two machines
            each = "; ".join(f"{_gpus(g)} ({n} runs)" for g, n in self.gpus.items())
            out.append(f"the pools span {len(self.gpus)} GPUs: {each}")
        out.append(
            f"A/A false alarms: {self.false_alarms} of {len(self.aa)}; "
            f"candidate called slower: {self.caught} of {len(self.ab)}"
        )
        return out


def power_summary(
    reference: list[RunSample],
    candidate: list[RunSample],
    per_side: int,
    *,
    slowdown: float = 0.05,
    tolerance: float = CHANGE_TOLERANCE,
    confidence: float = DEFAULT_CONFIDENCE,
) -> PowerSummary:
    """power_comparisons(), with each pool's spread and the runs per side `slowdown` needs."""
    aa, ab = power_comparisons(
        reference, candidate, per_side, tolerance=tolerance, confidence=confidence
    )
    pools = []
    for name, pool in (("reference", reference), ("candidate", candidate)):
        if len(pool) >= 2:
            spread = log_spread([x.tokens_per_s for x in pool])
            need = runs_needed(spread, slowdown, tolerance=tolerance)
            pools.append(PoolSpread(name, len(pool), spread, need))
    gpus = Counter(x.gpus for x in (*reference, *candidate))
    return PowerSummary(per_side, slowdown, aa, ab, pools, dict(gpus))


# ---- command line ----------------------------------------------------------------------------
class UsageError(Exception):
    """Bad input: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise UsageError(message)


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def build_parser(prog: str = "python -m harness.ab") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="racegate A/B: candidate vs reference, interleaved.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser("compare", help="run both sides interleaved and compare them")
    c.add_argument(
        "--reference", default=sys.executable, help="reference python (default: %(default)s)"
    )
    c.add_argument("--candidate", required=True, help="candidate python (a venv's bin/python)")
    for side in SIDES:
        c.add_argument(
            f"--{side}-env",
            type=_env_pair,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"extra environment for {side} runs, repeatable (default: none)",
        )
    c.add_argument("--runs", type=int, default=5, help="runs per side (default: %(default)s)")
    c.add_argument(
        "--tolerance", type=float, default=CHANGE_TOLERANCE, help="(default: %(default)s)"
    )
    c.add_argument(
        "--confidence", type=float, default=DEFAULT_CONFIDENCE, help="(default: %(default)s)"
    )
    c.add_argument(
        "--run-timeout", type=float, default=900.0, help="seconds per run (default: %(default)s)"
    )
    c.add_argument(
        "--records", type=Path, default=None, help="append runs to DIR/{reference,candidate}.jsonl"
    )
    c.add_argument("--out", type=Path, default=None, help="write the A/B result here as JSON")
    c.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then `harness run` options")
    p = sub.add_parser("power", help="A/A false alarms and catches from pooled records")
    p.add_argument("--reference", type=Path, required=True, help="reference pool (.jsonl)")
    p.add_argument("--candidate", type=Path, required=True, help="candidate pool (.jsonl)")
    p.add_argument("--per-side", type=int, default=2, help="runs per side (default: %(default)s)")
    p.add_argument(
        "--confidence", type=float, default=DEFAULT_CONFIDENCE, help="(default: %(default)s)"
    )
    p.add_argument(
        "--tolerance", type=float, default=CHANGE_TOLERANCE, help="(default: %(default)s)"
    )
    p.add_argument(
        "--slowdown",
        type=float,
        default=0.05,
        help="slowdown to size runs for, from the pools' spread (default: %(default)s)",
    )
    return parser


def cmd_compare(args: argparse.Namespace) -> int:
    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    ref = Side("reference", args.reference, dict(args.reference_env))
    cand = Side("candidate", args.candidate, dict(args.candidate_env))
    if args.records is not None:
        args.records.mkdir(parents=True, exist_ok=True)
    result = run_ab(
        ref,
        cand,
        run_args,
        runs=args.runs,
        tolerance=args.tolerance,
        confidence=args.confidence,
        timeout_s=args.run_timeout,
        records_dir=args.records,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    print("\n".join(result.lines()))
    return EXIT_FAILED if result.failed else EXIT_OK


def cmd_power(args: argparse.Namespace) -> int:
    summary = power_summary(
        pooled_samples(args.reference, "reference"),
        pooled_samples(args.candidate, "candidate"),
        args.per_side,
        slowdown=args.slowdown,
        tolerance=args.tolerance,
        confidence=args.confidence,
    )
    print("\n".join(summary.lines()))
    return EXIT_OK


def _sigterm_interrupts(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # run_ab stops as on Ctrl-C: the runs made are compared and kept


def main(argv: Sequence[str] | None = None, prog: str = "python -m harness.ab") -> int:
    """`python -m harness.ab ...` (and `python -m harness ab ...`, which passes its argv on)."""
    private_root.enter()  # first: torch's caches go into this process's root (harness.cli)
    # nox, CI runners and `timeout` stop a job with SIGTERM, at once or after a SIGINT.
    signal.signal(signal.SIGTERM, _sigterm_interrupts)
    try:
        args = build_parser(prog).parse_args(argv)
        return {"compare": cmd_compare, "power": cmd_power}[args.command](args)
    except (UsageError, ValueError, FileNotFoundError, PermissionError) as exc:
        print(f"racegate ab: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

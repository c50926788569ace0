"""Interleaved runs: each side's fresh `harness run` processes, A B B A …, then compared.

Each run is `<PY> -m racegate run <args> --out <file>`, a fresh process with its side's
interpreter (a venv or nox cell: the versions under test) and environment, in the order
A B B A A B B A … (interleaved, and counterbalanced so a steady drift of the machine's speed
falls on both sides alike), with every file in one private 0700 temp dir. The first run that
fails stops the A/B (fail closed: no call from partial evidence).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from racegate.harness.ab.result import ABResult
from racegate.harness.ab.stats import SIDES, compare_samples, gpu_mismatch, sample_of
from racegate.harness.judge.compare import CHANGE_TOLERANCE, DEFAULT_CONFIDENCE
from racegate.harness.judge.gate import EXIT_CODES, Word
from racegate.harness.run import code_root
from racegate.harness.run.record import RunRecord, append_jsonl, read_jsonl

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


@dataclass(frozen=True)
class Side:
    """One side of a comparison: the interpreter (its venv holds the versions) and extra env."""

    name: str
    python: str
    env: dict[str, str] = field(default_factory=dict)


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


def _names(run_args: Sequence[str], *flags: str) -> bool:
    return any(a.partition("=")[0] in flags for a in run_args)


def run_once(side: Side, run_args: list[str], out: Path, timeout_s: float) -> RunRecord:
    """One fresh `<python> -m racegate run` process; its one record, or ValueError saying why
    not."""
    env = {**os.environ, **side.env}
    # --repeat 1: `harness run` makes 3 runs per scenario on a GPU unless told otherwise, and
    # runs every cache state (two of them after a priming run) and, on a GPU, one and two
    # threads a device: one cold run of one thread unless told (two threads would time the
    # race's serialisation, not the step).
    state = []
    if not _names(run_args, "--cache-states", "--cache-state"):
        state += ["--cache-states", "cold"]
    if not _names(run_args, "--threads-per-device"):
        state += ["--threads-per-device", "1"]
    cmd = [side.python, "-m", "racegate", "run", *run_args, *state, "--repeat", "1"]
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
        result.interrupted = True
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

"""The verdict a user reads: per strategy SAFE / UNSAFE / MASKED / INCONCLUSIVE / NOT RUN.

One pure function (`decide`) over run records and this torch's probe verdicts, calibrated by a
positive control (the known-bad strategy, `per_device` by default): a clean run only counts
where the control failed on this machine, in the same cache state and topology, often enough
that a strategy as race-prone as the control would have been caught (docs/gate.md). pytest's
terminal summary, the CLI and the report all render its result with `render`.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

from racegate.harness.judge import compare, race_expectations
from racegate.harness.judge.calibration import Calibration
from racegate.harness.judge.metrics import wilson_interval
from racegate.harness.judge.race_evidence import (
    is_failed,
    no_evidence,
    other_reason,
    own_error,
    shows_race,
    unjudged_why,
)
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.versions import ABSENT
from racegate.harness.scenario.vocab import STRATEGIES, Outcome, Strategy
from racegate.harness.scenario.workload_api import DEFAULT_WORKLOAD


class Decided(Protocol):
    """What the block's last line needs of the gate's decision
    (racegate.harness.judge.gate.Decision), named here so that this module does not import the gate,
    which imports it."""

    @property
    def word(self) -> str: ...

    def line(self) -> str: ...


# The probes that show the nested-FX hazard itself (a compiled call in one thread broken by a
# trace in another): when one says "hazard" on this torch and the control never failed here,
# the race is masked on this machine, not gone (docs/torch-releases.md).
RACE_PROBES = (
    "compiled_call_during_make_fx",
    "compiled_call_during_compile",
    "flag_stuck_after_overlap",
)
WIDTH = 100  # the block never wraps in a 100-column CI log


class Status(StrEnum):
    SAFE = "SAFE"  # clean, and the control showed this machine would have caught a race
    UNSAFE = "UNSAFE"  # at least one run failed
    MASKED = "MASKED"  # clean, the control never failed here, but a probe shows the hazard
    # No failure, but short evidence: fewer runs than the control's power asks for, no control
    # in a cell, runs that timed out (too slow to judge), or a control that failed for another
    # reason than the race
    INCONCLUSIVE = "INCONCLUSIVE"
    NOT_RUN = "NOT RUN"


def runs_for_power(p_low: float, target: float = 0.99) -> int | None:
    """n = ⌈ln(1 − target) / ln(1 − p)⌉ clean runs catch a per-run rate ≥ p with `target`
    probability; None when p is 0 (no number of runs will do)."""
    if p_low <= 0.0:
        return None
    if p_low >= 1.0:
        return 1
    return max(1, math.ceil(math.log(1.0 - target) / math.log(1.0 - p_low)))


def power(p_low: float, runs: int) -> float:
    """Probability that `runs` runs see at least one failure of a per-run rate `p_low`."""
    return 1.0 - (1.0 - p_low) ** runs


def cell_label(
    cache_state: str, devices: int, threads_per_device: int, target: bool = False
) -> str:
    """A cache state × topology, e.g. 'cold 1×2' (one device, two threads on it)."""
    return f"{cache_state} {devices}×{threads_per_device}{'+target' if target else ''}"


def cell_of(record: RunRecord) -> str:
    """The cache state × topology a run belongs to."""
    s = record.scenario
    return cell_label(
        str(s.cache_state), len(s.devices), s.threads_per_device, bool(s.target_devices)
    )


@dataclass(frozen=True)
class ControlRate:
    """The positive control's per-run detection rate in one cell, with its 95% interval."""

    cell: str
    hits: int  # runs whose record shows the race (racegate.harness.judge.race_evidence)
    runs: int
    # The runs that failed for another reason than the race (no power): each one's reason.
    others: tuple[str, ...] = ()

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.hits, self.runs)

    def needed(self, cal: Calibration) -> int | None:
        """Production runs power asks for in this cell, capped; None if the control never hit."""
        n = runs_for_power(self.interval[0], cal.target)
        return None if n is None else min(n, cal.cap)

    def gives_power(self, cal: Calibration) -> bool:
        """Whether the production runs this rate asks for (needed) would reach the power a SAFE
        needs (cal.min_power where the cap binds), as _powered judges them."""
        n = self.needed(cal)
        return n is not None and power(self.interval[0], n) >= cal.min_power

    def describe(self) -> str:
        lo, hi = self.interval
        return f"{self.cell} {self.hits}/{self.runs} (95%: {lo:.0%}–{hi:.0%}{_others(self.others)})"


def _reasons(reasons: Iterable[str]) -> str:
    """The distinct reasons, most common first, each with its count: 'not_concurrent: ... ×2'."""
    counts = Counter(reasons)
    each = "; ".join(f"{why} ×{k}" if k > 1 else why for why, k in counts.most_common(2))
    return each + (f"; and {len(counts) - 2} more reason(s)" if len(counts) > 2 else "")


def _others(reasons: Sequence[str]) -> str:
    """'; 2 failed for another reason, no power: <reasons>', or '' for none."""
    if not reasons:
        return ""
    return f"; {len(reasons)} failed for another reason, no power: {_reasons(reasons)}"


def control_rates(records: Iterable[RunRecord], control: str) -> dict[str, ControlRate]:
    """Per cell, how many of the control's runs showed the race
    (racegate.harness.judge.race_evidence: only those give power), and why each of its other failed
    runs did not."""
    hits: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    others: dict[str, list[str]] = {}
    for r in records:
        # A run whose priming failed never reached its cache state: it measures no detection
        # there (on an overloaded host every such run hangs, which would read as a hit).
        if r.scenario.strategy == control and (r.cache is None or r.cache.prime_ok is not False):
            runs[cell_of(r)] += 1
            hits[cell_of(r)] += shows_race(r)
            why = other_reason(r)
            others.setdefault(cell_of(r), []).extend([why] if why else [])
    return {c: ControlRate(c, hits[c], runs[c], tuple(others[c])) for c in sorted(runs)}


def repeats_for(rate: ControlRate | None, *, default: int, cal: Calibration) -> tuple[int, str]:
    """(runs, why) for a strategy's case in one cell, from the control's rate measured there."""
    if rate is None:
        return default, f"no {cal.control} runs in this cell yet: the default {default}"
    needed = rate.needed(cal)
    if needed is None:
        return default, (
            f"{cal.control} never failed here ({rate.describe()}): power cannot be reached, "
            f"the default {default}"
        )
    n = max(default, needed)
    capped = " (the cap binds)" if needed == cal.cap else ""
    return n, f"{n} runs for ≥ {cal.target:.0%} power from {cal.control} {rate.describe()}{capped}"


@dataclass(frozen=True)
class StrategyVerdict:
    strategy: str
    status: Status
    runs: int
    failed: int
    failures: dict[str, int] = field(default_factory=dict)  # failed runs by outcome
    covered: tuple[str, ...] = ()  # "cold 1×2: 7 runs", per cache state × topology as run
    why: str = ""
    more_runs: int = 0  # INCONCLUSIVE: how many more clean runs power asks for
    power: float | None = None  # lowest over its cells: P(catching a control-like strategy)
    failed_runs: tuple[str, ...] = ()  # UNSAFE: each failed run, which one and why
    # INCONCLUSIVE: each run that was neither clean nor a failure (a timeout, the control's
    # failure for another reason), which one and why: two invocations that differ say where
    unclean_runs: tuple[str, ...] = ()
    # UNSAFE where every failed run is the trainer's own error, outside torch
    # (racegate.harness.judge.race_evidence.own_error): what it raised, where.
    own_error: str | None = None


@dataclass(frozen=True)
class Faster:
    """A SAFE strategy whose steady tokens/s beat the production strategy's where both ran."""

    strategy: str
    cell: str
    comparison: compare.Comparison  # reference: the production strategy

    def describe(self, production: str) -> str:
        c = self.comparison
        return (
            f"{self.strategy} is SAFE here and ran {c.ratio:.2f}× the tokens/s of {production} "
            f"({c.confidence:.0%} CI {c.low:.2f}–{c.high:.2f}; {self.cell}, {len(c.candidate)} vs "
            f"{len(c.reference)} timed runs): a faster option for this workload"
        )


def _timed(records: Iterable[RunRecord]) -> dict[tuple[str, str], list[float]]:
    """Steady tokens/s of clean runs timed alone, by (preset, cell)."""
    out: dict[tuple[str, str], list[float]] = {}
    for r in records:
        if r.outcome == Outcome.OK and r.timed and compare.is_rate(r.tokens_per_s):
            out.setdefault((r.scenario.preset, cell_of(r)), []).append(r.tokens_per_s)
    return out


def faster_than_production(
    by: Mapping[str, list[RunRecord]], verdicts: Iterable[StrategyVerdict], production: str
) -> tuple[Faster, ...]:
    """SAFE strategies significantly faster than production in a cell where both have ≥ 2
    timed runs (racegate.harness.judge.compare: the whole 95% interval above 1 and the ratio above
    1 + its tolerance). Where several cells qualify, the one with the most runs is named."""
    ref = _timed(by.get(production, []))
    out = []
    for v in verdicts:
        if v.status is not Status.SAFE or v.strategy == production:
            continue
        found = []
        for key, cand in _timed(by.get(v.strategy, [])).items():
            if len(cand) >= compare.MIN_RUNS and len(ref.get(key, [])) >= compare.MIN_RUNS:
                c = compare.compare(ref[key], cand)
                if c.change is compare.Change.HIGHER:
                    found.append((len(cand) + len(ref[key]), key[1], c))
        if found:
            _, cell, c = max(found, key=lambda f: f[0])
            out.append(Faster(v.strategy, cell, c))
    return tuple(out)


@dataclass(frozen=True)
class Verdict:
    versions: dict[str, str]
    hardware: str
    production: str
    strategies: tuple[StrategyVerdict, ...]  # the production strategy first
    advice: str
    control: str = str(Strategy.PER_DEVICE)
    rates: tuple[ControlRate, ...] = ()  # the control's, per cell
    faster: tuple[Faster, ...] = ()  # SAFE strategies significantly faster than production

    @property
    def production_verdict(self) -> StrategyVerdict:
        return next(s for s in self.strategies if s.strategy == self.production)

    @property
    def passed(self) -> bool:
        """The decision: the production strategy ran and is SAFE here."""
        return self.production_verdict.status is Status.SAFE


def _hazards(probes: Mapping[str, str]) -> list[str]:
    return [name for name in RACE_PROBES if probes.get(name) == "hazard"]


def _gone(probes: Mapping[str, str]) -> list[str]:
    """Race probes that say safe, when none says hazard: the hazard is fixed upstream."""
    if _hazards(probes):
        return []
    return [name for name in RACE_PROBES if probes.get(name) == "safe"]


def _pct_floor(x: float) -> str:
    return f"{math.floor(x * 100)}%"


def _by_cache_state(rates: Iterable[ControlRate]) -> str:
    """'4 of 8 warm and 8 of 8 cold runs' (cells summed per cache state: runs that showed the
    race), and the failed runs it did not count, with why."""
    hits: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    others: list[str] = []
    for r in rates:
        state = r.cell.split()[0]
        hits[state] += r.hits
        runs[state] += r.runs
        others += r.others
    parts = [f"{hits[s]} of {runs[s]} {s}" for s in runs]
    text = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    return f"{text} runs" + (f" ({_others(others)[2:]})" if others else "")


def _uncalibrated(
    strategy: str,
    records: list[RunRecord],
    covered: tuple[str, ...],
    uncalibrated: list[str],
    probes: Mapping[str, str],
    rates: Mapping[str, ControlRate],
    cal: Calibration,
    torch_version: str,
) -> StrategyVerdict:
    """Clean runs in cells where the control never failed (or never ran): MASKED when a probe
    shows the hazard, SAFE when a probe says it is gone upstream, else INCONCLUSIVE."""
    n, c = len(records), cal.control
    base = f"0 of {n} runs failed"
    hazards, gone = _hazards(probes), _gone(probes)
    fired_nowhere = all(r.hits == 0 for r in rates.values())
    missing = [cell for cell in uncalibrated if cell not in rates]
    # Where the control failed for another reason, nothing shows the race masked or gone: those
    # runs may not have raced at all (threads that took turns, a crash outside the compiler).
    other = [rates[x] for x in uncalibrated if x in rates and rates[x].others]
    if other:
        where = ", ".join(f"{r.cell} ({_reasons(r.others)})" for r in other)
        return StrategyVerdict(
            strategy, Status.INCONCLUSIVE, n, 0, {}, covered,
            f"{base}, but the control failed for another reason: {where}; it never showed "
            "the race there, so nothing shows this machine would have seen it",
        )  # fmt: skip
    # MASKED only where the control ran and never failed: where it did not run at all
    # (deselected, say) nothing shows the race cannot be produced here (then INCONCLUSIVE).
    if hazards and fired_nowhere and not missing:  # (it fired elsewhere: only inconclusive)
        where = ", ".join(rates[x].describe() for x in uncalibrated)
        return StrategyVerdict(
            strategy, Status.MASKED, n, 0, {}, covered,
            f"{base}, but {c} never failed here ({where}) while probe {hazards[0]} shows the "
            f"hazard on torch {torch_version}: the race is masked on this machine, so these "
            "runs prove nothing (inconclusive)",
        )  # fmt: skip
    if gone and fired_nowhere and not missing:
        return StrategyVerdict(
            strategy, Status.SAFE, n, 0, {}, covered,
            f"{base}; {c} never failed here either, and probe {gone[0]} says the hazard is "
            f"gone on torch {torch_version} (fixed upstream)",
        )  # fmt: skip
    if missing:
        why = f"{c}, the positive control, did not run in {', '.join(missing)}"
    else:
        why = f"{c} never failed in {', '.join(uncalibrated)} and no probe verdict decides"
    return StrategyVerdict(
        strategy, Status.INCONCLUSIVE, n, 0, {}, covered,
        f"{base}, but {why}: nothing shows this machine would have seen the race",
    )  # fmt: skip


def _powered(
    strategy: str,
    records: list[RunRecord],
    covered: tuple[str, ...],
    per_cell: Counter[str],
    rates: Mapping[str, ControlRate],
    cal: Calibration,
) -> StrategyVerdict:
    """Clean runs in cells where the control failed: SAFE once there are enough of them for
    the power asked (each cell's runs against the control's lower detection bound), else
    INCONCLUSIVE."""
    n, c = len(records), cal.control
    base = f"0 of {n} runs failed"
    short, reached, capped = {}, [], []
    for cell, k in per_cell.items():
        rate = rates[cell]
        needed = rate.needed(cal) or cal.cap
        if k < needed:
            short[cell] = needed - k
        reached.append(power(rate.interval[0], k))
        if (runs_for_power(rate.interval[0], cal.target) or 0) > cal.cap:
            capped.append(cell)
    low = min(reached)
    seen = f"{c} failed {_by_cache_state(rates[x] for x in per_cell)} here"
    if short:
        more = sum(short.values())
        where = ", ".join(f"{v} in {k}" for k, v in sorted(short.items()))
        return StrategyVerdict(
            strategy, Status.INCONCLUSIVE, n, 0, {}, covered,
            f"{base}; {seen}, so power asks for {more} more clean runs ({where}); so far a "
            f"strategy as bad as {c} would have been caught with only ≥ {_pct_floor(low)}",
            more_runs=more, power=low,
        )  # fmt: skip
    bound = wilson_interval(0, n)[1]
    tail = f"per-run failure rate < {math.ceil(bound * 100)}% (95%)"
    cap_note = f" (the {cal.cap}-run cap binds in {', '.join(sorted(capped))})" if capped else ""
    claim = f"a strategy as bad as {c} would have been caught with ≥ {_pct_floor(low)}{cap_note}"
    if low < cal.min_power:
        return StrategyVerdict(
            strategy, Status.INCONCLUSIVE, n, 0, {}, covered,
            f"{base}; {seen}, so {claim}: below the {cal.min_power:.0%} a SAFE needs; raise the "
            f"control's detection or the cap",
            power=low,
        )  # fmt: skip
    return StrategyVerdict(
        strategy, Status.SAFE, n, 0, {}, covered, f"{base}; {seen}, so {claim}; {tail}", power=low
    )


def _clean(
    strategy: str,
    records: list[RunRecord],
    probes: Mapping[str, str],
    rates: Mapping[str, ControlRate],
    cal: Calibration,
    torch_version: str,
) -> StrategyVerdict:
    """A strategy none of whose runs failed: SAFE only on the control's evidence (or upstream's)."""
    n = len(records)
    base = f"0 of {n} runs failed"
    # One thread in total cannot race: such runs (throughput runs, say) are no race evidence and
    # ask for no power.
    racing = [r for r in records if r.threads_asked > 1]
    if not racing:
        return StrategyVerdict(
            strategy, Status.INCONCLUSIVE, n, 0, {}, (),
            f"{base}, but every run had one thread in total: nothing could race",
        )  # fmt: skip
    per_cell = Counter(cell_of(r) for r in racing)
    covered = tuple(f"{c}: {k} run{'s' * (k != 1)}" for c, k in sorted(per_cell.items()))
    uncalibrated = [cell for cell in per_cell if cell not in rates or rates[cell].hits == 0]
    if uncalibrated:
        return _uncalibrated(
            strategy, racing, covered, uncalibrated, probes, rates, cal, torch_version
        )
    return _powered(strategy, racing, covered, per_cell, rates, cal)


def describe_failed_run(record: RunRecord) -> str:
    """Which run failed and why, one line: its cell, repeat, start time, outcome and reason (so
    two invocations that differ say which runs differ)."""
    errors = [t.error for t in record.threads if t.error]
    why = (record.detail or "").split("; stderr: ")[0] or (errors[0] if errors else "no reason")
    when = f", started {record.started_at}" if record.started_at else ""
    run = f"{cell_of(record)} run {record.repeat_index + 1}{when}"
    return f"{run}: {record.outcome}: {' '.join(why.split())[:72]}"


def _unjudged_note(unjudged: Sequence[RunRecord]) -> str:
    """' (besides, 2 runs neither clean nor failed: ...)' for an UNSAFE line, or ''."""
    if not unjudged:
        return ""
    what = ", ".join(f"{k} {v}" for k, v in Counter(r.outcome for r in unjudged).items())
    return f"; besides, {len(unjudged)} not judged, neither clean nor failed ({what})"


def judge_strategy(
    strategy: str,
    records: list[RunRecord],
    probes: Mapping[str, str],
    rates: Mapping[str, ControlRate] | None = None,
    cal: Calibration = Calibration(),
    torch_version: str = "?",
) -> StrategyVerdict:
    """One strategy's status from its runs here, the control's rates and the probe verdicts."""
    if not records:
        return StrategyVerdict(strategy, Status.NOT_RUN, 0, 0, why="no run of it here")
    failed = [r for r in records if is_failed(r)]
    unjudged = [r for r in records if no_evidence(r)]
    n = len(records)
    if strategy == cal.control and failed and not any(shows_race(r) for r in failed):
        # The control's failures gave no power, and show nothing unsafe about it either.
        reasons = _reasons(other_reason(r) or str(r.outcome) for r in failed)
        return StrategyVerdict(
            strategy, Status.INCONCLUSIVE, n, 0, {}, (),
            f"{len(failed)} of {n} runs failed, none with the race: the control failed for "
            f"another reason: {reasons}",
            unclean_runs=tuple(map(describe_failed_run, failed)),
        )  # fmt: skip
    if failed:
        failures = dict(Counter(r.outcome for r in failed).most_common())
        what = ", ".join(f"{k} {v}" for k, v in failures.items())
        cells = Counter(cell_of(r) for r in failed)
        covered = tuple(f"{c}: {k} failed" for c, k in sorted(cells.items()))
        count = f"failed {len(failed)} of {n} runs ({what}){_unjudged_note(unjudged)}"
        own = [e for r in failed if (e := own_error(r))]
        if own and len(own) == len(failed):
            why = f"{own[0]}: {count}"
        elif own:
            why = f"{count}; {len(own)} of them the trainer's own error: {own[0]}"
        else:
            why = count
        return StrategyVerdict(
            strategy, Status.UNSAFE, n, len(failed), failures, covered, why,
            failed_runs=tuple(map(describe_failed_run, failed)),
            own_error=own[0] if own and len(own) == len(failed) else None,
        )  # fmt: skip
    if unjudged:  # fail closed: no failure shown, but these runs are no clean runs either
        cells = Counter(cell_of(r) for r in unjudged)
        covered = tuple(f"{c}: {k} not judged" for c, k in sorted(cells.items()))
        return StrategyVerdict(
            strategy, Status.INCONCLUSIVE, n, 0, {}, covered,
            f"{unjudged_why(unjudged, n)}: {'it is' if len(unjudged) == 1 else 'they are'} "
            "neither clean nor failed, and a SAFE needs every run clean",
            unclean_runs=tuple(map(describe_failed_run, unjudged)),
        )  # fmt: skip
    return _clean(strategy, records, probes, rates or {}, cal, torch_version)


def _lazy(strategy: str) -> bool:
    return strategy in set(Strategy) and STRATEGIES[Strategy(strategy)].races_lazily


def _advice(production: StrategyVerdict, others: list[StrategyVerdict], control: str) -> str:
    unsafe = [s.strategy for s in others if s.status is Status.UNSAFE]
    masked = [  # the control's MASKED is the advice itself: it cannot produce the race here
        s.strategy
        for s in others
        if s.status is Status.MASKED and _lazy(s.strategy) and s.strategy != control
    ]
    tail = ""
    if unsafe:
        tail += f"; {', '.join(unsafe)} {'is' if len(unsafe) == 1 else 'are'} unsafe here"
    if masked:
        tail += f"; {', '.join(masked)} only masked here (the hazard is in this torch)"
    p = production.strategy
    if production.status is Status.SAFE:
        return f"keep {p}{tail}."
    if production.status is Status.NOT_RUN:
        return f"run {p} (the production strategy): nothing is decided yet{tail}."
    if production.status is Status.INCONCLUSIVE:
        if production.more_runs:
            more = f" {production.more_runs} more times"
            return f"run {p}{more} (and {control} beside it) before upgrading{tail}."
        return f"run {p} again before upgrading: {production.why}{tail}."
    if production.status is Status.MASKED:
        return (
            f"undecided here: {control} cannot produce the race on this machine; decide on one "
            f"where it fails (a GPU){tail}."
        )
    safe = [s.strategy for s in others if s.status is Status.SAFE]
    switch = f"; {', '.join(safe)} held here" if safe else ""
    if production.own_error:  # not torch's doing: no upgrade decision until the trainer runs
        return (
            f"fix the trainer before judging an upgrade: {p} {production.why}{switch}{tail} "
            "(`racegate upgrade` says whether it fails on both sides)."
        )
    return f"do not upgrade with {p}: {production.why}{switch}{tail}."


def _hardware(record: RunRecord) -> str:
    hw = record.hardware
    name = hw.device_name or "?"
    if name == "cpu":
        return f"cpu ({'?' if hw.cpu_count is None else hw.cpu_count} cores)"
    count = "?" if hw.cuda_device_count is None else hw.cuda_device_count
    return f"{name} ×{len(hw.device_names or [name])} of {count}"


def known_failure(
    records: Iterable[RunRecord], expected: Sequence[race_expectations.ExpectedFailure]
) -> race_expectations.ExpectedFailure | None:
    """The first race.toml row that covers one of these runs (its versions, device, cell, and
    its strategy by spec or, for the drafter, by name); None where none does."""
    for r in records:
        s = r.scenario
        row = race_expectations.match(
            list(expected),
            torch_version=r.versions.torch,
            transformers_version=r.versions.transformers,
            device=s.devices[0],
            strategy=str(s.strategy),
            cache_state=s.cache_state,
            threads_per_device=s.threads_per_device,
            devices=len(s.devices),
            spec=s.spec,
            drafter=s.workload == DEFAULT_WORKLOAD,
        )
        if row is not None:
            return row
    return None


def _known(v: StrategyVerdict, row: race_expectations.ExpectedFailure) -> StrategyVerdict:
    """The production strategy's verdict where racegate's table expects it to fail here: a
    known failure is an answer (UNSAFE), quoting the row; its own failed runs, if any, first."""
    where = f"racegate/harness/expectations/race.toml row {row.row}"
    outcomes = "|".join(row.outcomes)
    quote = f"{where} expects it to fail here ({outcomes}): {row.reason} (source: {row.source})"
    if v.status is Status.UNSAFE:
        return replace(v, why=f"{v.why}; a known failure: {where}")
    ran = f"its {v.runs} run{'s' * (v.runs != 1)} here did not show it, but " if v.runs else ""
    return replace(
        v, status=Status.UNSAFE,
        why=f"{ran}{quote}",
    )  # fmt: skip


def decide(
    records: Iterable[RunRecord],
    *,
    production: str,
    probes: Mapping[str, str] | None = None,
    strategies: Iterable[str] = (),
    calibration: Calibration = Calibration(),
    versions: Mapping[str, str] | None = None,
    hardware: str | None = None,
    expected: Sequence[race_expectations.ExpectedFailure] | None = None,
) -> Verdict:
    """The verdict for one hardware × torch × transformers set of records.

    production: the workload's production strategy (racegate.harness.doors.options.bind_roles; its
    positive control is the calibration's). probes: probe name -> verdict ("hazard"/"safe"/...) on
    this torch;
    strategies: those asked for, so an asked strategy with no run shows as NOT RUN;
    calibration: the positive control and the power asked of clean runs; versions/hardware:
    when the records say none; expected: racegate's table of known failures (None: the committed
    racegate/harness/expectations/race.toml): a row covering the production strategy's runs
    makes it UNSAFE, quoting the row.
    """
    records = list(records)
    probes = probes or {}
    control = calibration.control
    names = [production, *strategies, *(r.scenario.strategy for r in records)]
    names = list(dict.fromkeys(str(n) for n in names))
    by = {n: [r for r in records if r.scenario.strategy == n] for n in names}
    rates = control_rates(records, control)
    first = records[0] if records else None
    found = first.versions.to_json() if first else {}
    found = found or dict(versions or {})
    torch_version = found.get("torch", "?")
    verdicts = tuple(
        judge_strategy(n, by[n], probes, rates, calibration, torch_version) for n in names
    )
    if expected is None:
        expected = race_expectations.load()
    row = known_failure(by[production], expected) if production != control else None
    if row is not None:
        verdicts = (_known(verdicts[0], row), *verdicts[1:])
    return Verdict(
        versions=found,
        hardware=_hardware(first) if first else (hardware or "?"),
        production=production,
        strategies=verdicts,
        advice=_advice(verdicts[0], list(verdicts[1:]), control),
        control=control,
        rates=tuple(rates.values()),
        faster=faster_than_production(by, verdicts, production),
    )


def wrap(text: str, indent: int) -> list[str]:
    """Wrap at word boundaries (never mid-value), continuation lines indented."""
    return textwrap.wrap(text, WIDTH, subsequent_indent=" " * indent, break_long_words=False)


FAILED_RUNS_SHOWN = 5  # per UNSAFE strategy; the rest are counted


def render(verdict: Verdict, decision: Decided) -> list[str]:
    """The verdict block: at most WIDTH columns a line, no emoji (plain terminals, CI logs).
    Its last line is the gate's decision, which the caller makes (racegate.harness.judge.gate, from
    this verdict and whatever else it judged, such as failed pytest cases): gate imports this
    module, not the other way round."""
    v = verdict.versions
    cuda = v.get(
        "cuda"
    )  # "None": records from before racegate/harness/scenario/versions.py said ABSENT
    lines = [" racegate verdict ".center(WIDTH, "=")]
    lines += wrap(
        f"torch {v.get('torch', '?')} · transformers {v.get('transformers', '?')} · python "
        f"{v.get('python', '?')} · {verdict.hardware}"
        + (f" · cuda {cuda}" if cuda not in (None, "None", ABSENT) else ""),
        2,
    )
    if verdict.rates:
        rates = "; ".join(r.describe() for r in verdict.rates)
        lines += wrap(f"positive control {verdict.control} failed: {rates}", 4)
    else:
        lines += wrap(f"positive control {verdict.control}: no run of it here", 4)
    for s in verdict.strategies:
        role = {verdict.production: " (production)", verdict.control: " (positive control)"}
        lines += wrap(f"  {s.status:<12} {s.strategy}{role.get(s.strategy, '')}: {s.why}", 15)
        if s.covered and s.strategy == verdict.production:
            lines += wrap(f"{'':15}ran: {'; '.join(s.covered)}", 20)
        shown = () if s.strategy == verdict.control else s.failed_runs  # the control must fail
        for run in shown[:FAILED_RUNS_SHOWN]:
            lines += wrap(f"{'':15}failed: {run}", 23)
        if (more := len(shown) - FAILED_RUNS_SHOWN) > 0:
            lines += wrap(f"{'':15}failed: {more} more run{'s' * (more != 1)}", 23)
        for run in s.unclean_runs[:FAILED_RUNS_SHOWN]:
            lines += wrap(f"{'':15}not clean: {run}", 26)
        if (more := len(s.unclean_runs) - FAILED_RUNS_SHOWN) > 0:
            lines += wrap(f"{'':15}not clean: {more} more run{'s' * (more != 1)}", 26)
    for f in verdict.faster:
        lines += wrap(f"  faster:      {f.describe(verdict.production)}", 15)
    indent = " " * (len(decision.word) + 2)  # the page's anchor never splits at its hyphen
    lines += textwrap.wrap(decision.line(), WIDTH, subsequent_indent=indent,
                           break_long_words=False, break_on_hyphens=False)  # fmt: skip
    return lines

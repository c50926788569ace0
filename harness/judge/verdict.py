"""The verdict a user reads: per strategy SAFE / UNSAFE / MASKED / NOT RUN, and what to do.

One pure function (`decide`) over judged run records and this torch's probe verdicts; pytest's
terminal summary, the CLI and the report all render its result with `render`.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from harness.record import RunRecord
from harness.vocab import STRATEGIES, Outcome, Strategy

# The probes that show the nested-FX hazard itself (a compiled call in one thread broken by a
# trace in another): when one says "hazard" on this torch, a lazily compiling strategy that
# ran clean here was lucky, not safe (docs/torch-releases.md).
RACE_PROBES = (
    "compiled_call_during_make_fx",
    "compiled_call_during_compile",
    "flag_stuck_after_overlap",
)
WIDTH = 100  # the block never wraps in a 100-column CI log


class Status(StrEnum):
    SAFE = "SAFE"
    UNSAFE = "UNSAFE"
    MASKED = "MASKED"  # clean here, but a probe shows the hazard on this torch
    NOT_RUN = "NOT RUN"


@dataclass(frozen=True)
class StrategyVerdict:
    strategy: str
    status: Status
    runs: int
    failed: int
    failures: dict[str, int] = field(default_factory=dict)  # failed runs by outcome
    covered: tuple[str, ...] = ()  # "cold 1×2" cache state × topology, as run
    why: str = ""


@dataclass(frozen=True)
class Verdict:
    versions: dict[str, str]
    hardware: str
    production: str
    strategies: tuple[StrategyVerdict, ...]  # the production strategy first
    advice: str

    @property
    def production_verdict(self) -> StrategyVerdict:
        return next(s for s in self.strategies if s.strategy == self.production)

    @property
    def passed(self) -> bool:
        """The decision: the production strategy ran and is SAFE here."""
        return self.production_verdict.status is Status.SAFE


def _topology(record: RunRecord) -> str:
    s = record.scenario
    return f"{s['cache_state']} {len(s['devices'])}×{s['threads_per_device']}"


def _hazards(probes: Mapping[str, str]) -> list[str]:
    return [name for name in RACE_PROBES if probes.get(name) == "hazard"]


def judge_strategy(
    strategy: str, records: list[RunRecord], probes: Mapping[str, str]
) -> StrategyVerdict:
    """One strategy's status from its runs here and this torch's probe verdicts."""
    if not records:
        return StrategyVerdict(strategy, Status.NOT_RUN, 0, 0, why="no run of it here")
    failed = [r for r in records if r.outcome != Outcome.OK]
    failures = dict(Counter(r.outcome for r in failed).most_common())
    covered = tuple(sorted({_topology(r) for r in records}))
    n = len(records)
    if failed:
        what = ", ".join(f"{k} {v}" for k, v in failures.items())
        return StrategyVerdict(
            strategy, Status.UNSAFE, n, len(failed), failures, covered,
            f"failed {len(failed)} of {n} runs ({what})",
        )  # fmt: skip
    spec = STRATEGIES.get(Strategy(strategy)) if strategy in set(Strategy) else None
    hazards = _hazards(probes)
    if spec is not None and spec.races_lazily and hazards:
        return StrategyVerdict(
            strategy, Status.MASKED, n, 0, {}, covered,
            f"0 of {n} runs failed here, but probe {hazards[0]} shows the hazard on this torch",
        )  # fmt: skip
    return StrategyVerdict(strategy, Status.SAFE, n, 0, {}, covered, f"0 of {n} runs failed")


def _advice(production: StrategyVerdict, others: list[StrategyVerdict]) -> str:
    bad = [s.strategy for s in others if s.status in (Status.UNSAFE, Status.MASKED)]
    tail = f"; {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} unsafe here" if bad else ""
    if production.status is Status.SAFE:
        return f"keep {production.strategy}{tail}."
    if production.status is Status.NOT_RUN:
        return f"run {production.strategy} (the production strategy): nothing decided yet{tail}."
    safe = [s.strategy for s in others if s.status is Status.SAFE]
    switch = f"; {', '.join(safe)} held here" if safe else ""
    return f"do not upgrade with {production.strategy}: {production.why}{switch}{tail}."


def decide(
    records: Iterable[RunRecord],
    *,
    production: str,
    probes: Mapping[str, str] | None = None,
    strategies: Iterable[str] = (),
) -> Verdict:
    """The verdict for one hardware × torch × transformers set of records.

    probes: probe name -> verdict ("hazard"/"safe"/...) on this torch; strategies: those asked
    for, so an asked strategy with no run shows as NOT RUN.
    """
    records = list(records)
    probes = probes or {}
    names = [production, *dict.fromkeys([*strategies, *(r.scenario["strategy"] for r in records)])]
    names = list(dict.fromkeys(names))
    by = {n: [r for r in records if r.scenario["strategy"] == n] for n in names}
    verdicts = tuple(judge_strategy(n, by[n], probes) for n in names)
    first = records[0] if records else None
    return Verdict(
        versions=dict(first.versions) if first else {},
        hardware=str(first.hardware.get("device_name", "?")) if first else "?",
        production=production,
        strategies=verdicts,
        advice=_advice(verdicts[0], list(verdicts[1:])),
    )


def _wrap(text: str, indent: int) -> list[str]:
    """Wrap at word boundaries (never mid-value), continuation lines indented."""
    return textwrap.wrap(text, WIDTH, subsequent_indent=" " * indent, break_long_words=False)


def render(verdict: Verdict) -> list[str]:
    """The verdict block: at most WIDTH columns a line, no emoji (plain terminals, CI logs)."""
    v = verdict.versions
    lines = [
        "racegate verdict".center(WIDTH, "="),
        f"torch {v.get('torch', '?')} · transformers {v.get('transformers', '?')} · "
        f"{verdict.hardware}",
    ]
    for s in verdict.strategies:
        mark = " (production)" if s.strategy == verdict.production else ""
        lines += _wrap(f"  {s.status:<8} {s.strategy}{mark}: {s.why}", 11)
        if s.covered and s.strategy == verdict.production:
            lines += _wrap(f"           ran: {', '.join(s.covered)}", 16)
    decision = "PASS" if verdict.passed else "FAIL"
    lines += _wrap(f"{decision}: {verdict.advice}", 6)
    return lines

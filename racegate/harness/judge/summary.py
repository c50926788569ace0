"""Per-scenario summaries of many runs: outcome fractions with confidence intervals, tok/s.

Shared by the CLI's end-of-run table and the reports; pure over RunRecords. The table is plain
fixed-width text (no wrapping inside a value) ending in one pass/fail line.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from racegate.harness.judge.metrics import wilson_interval
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.spec import scenario_key
from racegate.harness.scenario.vocab import Outcome


@dataclass
class ScenarioSummary:
    key: str
    runs: int
    outcome_runs: dict[str, int] = field(default_factory=dict)  # runs whose outcome was X
    rate: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # p, lo, hi
    tokens_per_s: float | None = None  # median over runs


def summarise(records: list[RunRecord]) -> list[ScenarioSummary]:
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for r in records:
        groups[scenario_key(r.scenario)].append(r)
    out = []
    for key, runs in groups.items():
        s = ScenarioSummary(key=key, runs=len(runs))
        for outcome in Outcome:
            k = sum(1 for r in runs if r.outcome == outcome)
            if k:
                s.outcome_runs[str(outcome)] = k
                lo, hi = wilson_interval(k, len(runs))
                s.rate[str(outcome)] = (k / len(runs), lo, hi)
        tps = [r.tokens_per_s for r in runs if r.tokens_per_s]
        s.tokens_per_s = statistics.median(tps) if tps else None
        out.append(s)
    return out


STDERR_LINES = 3  # lines of a failed child's stderr shown: its end, where the error is


def failure_lines(record: RunRecord, stderr_lines: int = STDERR_LINES) -> list[str]:
    """What a failed run says: each distinct thread error, why the run failed, and the *tail*
    of the child's stderr (its first lines are usually unrelated warnings)."""
    if record.outcome == Outcome.OK:
        return []
    lines = [f"error: {e[:300]}" for e in dict.fromkeys(t.error for t in record.threads if t.error)]
    why, *stderrs = (record.detail or "").split("; stderr: ")
    if why:
        lines.append(f"why: {why[:300]}")
    for text in stderrs:
        tail = [ln.rstrip() for ln in text.splitlines() if ln.strip()][-stderr_lines:]
        lines += [f"stderr: {ln[-300:]}" for ln in tail]
    return lines or [f"{record.outcome}: no error text recorded"]


def _outcomes(s: ScenarioSummary) -> str:
    return ", ".join(
        f"{o} {s.outcome_runs[o]}" + (f" [{lo:.0%}–{hi:.0%}]" if s.runs > 1 else "")
        for o, (_, lo, hi) in s.rate.items()
    )


def format_table(summaries: list[ScenarioSummary], records: list[RunRecord]) -> list[str]:
    """The end-of-run table: one row per scenario, failures under their row, a final line."""
    head = ("scenario", "runs", "outcomes (runs [95% interval])", "median tok/s")
    rows = [
        (s.key, str(s.runs), _outcomes(s), f"{s.tokens_per_s:,.0f}" if s.tokens_per_s else "—")
        for s in summaries
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in (1, 3) else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    lines = [fmt(head)]
    for s, row in zip(summaries, rows, strict=True):
        lines.append(fmt(row))
        failed = [
            r for r in records if scenario_key(r.scenario) == s.key and r.outcome != Outcome.OK
        ]
        last = {r.outcome: r for r in failed}  # one run per failing outcome speaks for it
        for r in last.values():
            lines += [f"    {ln}" for ln in failure_lines(r)]
    bad = Counter(r.outcome for r in records if r.outcome != Outcome.OK)
    # Counts only: the decision (SAFE / UNSAFE / UNDECIDED) is the verdict block's last line.
    if not records:
        lines.append("runs: none finished")
    elif bad:
        what = ", ".join(f"{o} {n}" for o, n in bad.most_common())
        lines.append(f"runs: {sum(bad.values())} of {len(records)} failed ({what})")
    else:
        lines.append(f"runs: {len(records)} of {len(records)} ok")
    return lines

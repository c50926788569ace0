"""Per-scenario summaries of many runs: outcome fractions with confidence intervals, tok/s.

Shared by the CLI's end-of-run table and the reports; pure over RunRecords.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from harness.judge.metrics import wilson_interval
from harness.record import RunRecord
from harness.vocab import Outcome


def scenario_key(record: RunRecord) -> str:
    s = record.scenario
    devices = ",".join(s["devices"])
    return (
        f"{s['preset']}/{s['strategy']}/{s['cache_state']}/{s['schedule']}/"
        f"{devices}×{s['threads_per_device']}"
    )


@dataclass
class ScenarioSummary:
    key: str
    runs: int
    outcome_runs: dict[str, int] = field(default_factory=dict)  # runs whose outcome was X
    rate: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # p, lo, hi
    threads_hit: list[str] = field(default_factory=list)  # "2/4" nested-FX threads per run
    tokens_per_s: float | None = None  # median over runs
    versions: dict[str, str] = field(default_factory=dict)


def summarise(records: list[RunRecord]) -> list[ScenarioSummary]:
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for r in records:
        groups[scenario_key(r)].append(r)
    out = []
    for key, runs in groups.items():
        s = ScenarioSummary(key=key, runs=len(runs), versions=runs[0].versions)
        for outcome in Outcome:
            k = sum(1 for r in runs if r.outcome == outcome)
            if k:
                s.outcome_runs[str(outcome)] = k
                lo, hi = wilson_interval(k, len(runs))
                s.rate[str(outcome)] = (k / len(runs), lo, hi)
        s.threads_hit = [
            f"{r.outcome_counts.get(str(Outcome.NESTED_FX_ERROR), 0)}/{r.threads_asked}"
            for r in runs
        ]
        tps = [r.tokens_per_s for r in runs if r.tokens_per_s]
        s.tokens_per_s = statistics.median(tps) if tps else None
        out.append(s)
    return out

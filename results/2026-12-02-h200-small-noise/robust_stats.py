"""Would a per-run statistic other than tokens/s shrink `small`'s run-to-run spread? (session 18)

Over the committed one-thread `small` A/B pools, the spread (sd / mean) across runs of: the
run's steady time per token (1 / tokens/s, as the A/B compares it), its median steady step, its
fastest step and its 10th-percentile step. Steps are each run's steps after its warm-up steps.

    .venv/bin/python results/2026-12-02-h200-small-noise/robust_stats.py
"""

import statistics as st
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness.record import read_jsonl

POOLS = [
    "results/2026-12-02-h200-ab-power/c-ab-power/small/reference.jsonl",
    "results/2026-12-02-h200-ab-power/c-ab-power/small/candidate.jsonl",
    "results/2026-12-02-h200-ab/small-5.17.0/gpu_ab-torch-system-transformers-5.17.0/"
    "ab-records/reference.jsonl",
    "results/2026-12-02-h200-ab/small-5.17.0/gpu_ab-torch-system-transformers-5.17.0/"
    "ab-records/candidate.jsonl",
]


def spread(xs: list[float]) -> float:
    return st.stdev(xs) / st.mean(xs)


print("pool | runs | 1/tokens/s | median step | fastest step | 10th-percentile step")
for pool in POOLS:
    runs = [r for r in read_jsonl(Path(pool)) if r.outcome == "ok" and r.tokens_per_s]
    steady = [sorted(r.threads[0].step_s[r.scenario["warmup_steps"] :]) for r in runs]
    cols = (
        [1 / r.tokens_per_s for r in runs],
        [st.median(s) for s in steady],
        [s[0] for s in steady],
        [s[len(s) // 10] for s in steady],
    )
    print(
        pool.split("results/")[1], "|", len(runs), "|", " | ".join(f"{spread(c):.1%}" for c in cols)
    )

"""The tables of issue 21's GPU evidence, from what benchmarks/gpu_evidence_21.sh left in $OUT.

    python benchmarks/summarise_21.py OUT [OUT ...]   # markdown on stdout, for a results README

Several OUT folders (calls of the script) are read together: their runs add up, and the A/A
pools of each preset are concatenated before harness.ab's power summary draws its comparisons
(the same function `python -m harness.ab power` prints). A part
that left nothing says so in its table ("not run"); a run that failed is counted, never used as
a number. Exit 0; 2 when a folder does not exist.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from a checkout: harness is not installed

from harness.ab import PowerSummary, pooled_samples, power_summary  # noqa: E402
from harness.judge.compare import MIN_RUNS, compare  # noqa: E402
from harness.record import RunRecord, read_jsonl  # noqa: E402

STRATEGIES = ("warmup_locked", "warmup", "processes")  # part b's, the production one first
PER_SIDE = 2  # runs per side of each power comparison (as the script's `power` call)


def _k(tps: float | None) -> str:
    return f"{tps / 1e3:,.2f} K" if tps else "—"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _ok(record: RunRecord) -> bool:
    return record.outcome == "ok" and record.timing_valid and bool(record.tokens_per_s)


def _records(outs: Sequence[Path], pattern: str) -> list[RunRecord]:
    return [r for out in outs for f in sorted(out.glob(pattern)) for r in read_jsonl(f)]


def step_ratio(outs: Sequence[Path]) -> list[str]:
    """Part a: plain step vs racegate's, in the order they ran; the ratio of medians."""
    plain = [json.loads(f.read_text()) for o in outs for f in sorted(o.glob("a-step/plain-*.json"))]
    racegate = _records(outs, "a-step/racegate.jsonl")
    lines = ["## Step ratio: racegate's step over a plain one", ""]
    if not plain and not racegate:
        return [*lines, "Not run: no a-step/ runs.", ""]
    p_tps = [p["query_tokens_per_s"] for p in plain]
    r_ok = [r for r in racegate if _ok(r)]
    r_tps = [r.tokens_per_s for r in r_ok if r.tokens_per_s]
    preset = racegate[0].scenario.get("preset", "?") if racegate else "?"
    lines += [
        f"Same GPU, same call, alternating (plain first, then racegate first, …). Plain: "
        f"`benchmarks/plain_step.py` (query tokens/s over steady steps); racegate: `harness run "
        f"--preset {preset}` (steady-state tokens/s of its record).",
        "",
        "| step | runs | tokens/s per run | median | MFU (median) | peak memory |",
        "|---|---|---|---|---|---|",
    ]
    p_mfu = _median([p["mfu"] for p in plain if p.get("mfu") is not None])
    p_mem = max((p.get("peak_mem_bytes") or 0 for p in plain), default=0)
    r_mfu = _median([r.mfu for r in r_ok if r.mfu is not None])
    r_mem = max((sum(r.peak_mem_bytes.values()) for r in r_ok), default=0)
    failed = len(racegate) - len(r_ok)
    for name, tps, mfu, mem, extra in (
        ("plain", p_tps, p_mfu, p_mem, ""),
        ("racegate", r_tps, r_mfu, r_mem, f" ({failed} failed)" if failed else ""),
    ):
        med = _median(tps)
        lines.append(
            f"| {name} | {len(tps)}{extra} | {', '.join(_k(t) for t in tps) or '—'} | {_k(med)} "
            f"| {f'{mfu:.1%}' if mfu is not None else '—'} "
            f"| {f'{mem / 2**30:.1f} GiB' if mem else '—'} |"
        )
    pm, rm = _median(p_tps), _median(r_tps)
    ratio = f"**{rm / pm:.3f}×**" if pm and rm else "not measured (a side has no clean run)"
    lines += ["", f"racegate / plain, ratio of medians: {ratio}", ""]
    for name in ("plain", "racegate"):
        tables = [str(f.relative_to(o)) for o in outs for f in o.glob(f"a-step/profile-{name}.txt")]
        lines.append(f"- profile of the {name} step: {', '.join(tables) or 'not taken'}")
    return [*lines, ""]


def strategy_cost(outs: Sequence[Path]) -> list[str]:
    """Part b (and d): tokens/s per strategy at 2 threads on one GPU, against warmup_locked."""
    by_preset: dict[str, list[RunRecord]] = {}
    for r in _records(outs, "b-strategy/*.jsonl"):
        by_preset.setdefault(r.scenario.get("preset", "?"), []).append(r)
    lines = ["## The production strategy's cost: 2 threads on one GPU", ""]
    if not by_preset:
        return [*lines, "Not run: no b-strategy/ records.", ""]
    for preset, records in by_preset.items():
        lines += [
            f"`{preset}`, `harness run --threads-per-device 2 --devices 0` (schedule barrier, "
            "5 ms switch interval), rounds in rotated order:",
            "",
            "| strategy | runs (failed) | tokens/s per run | median | vs warmup_locked "
            "| 95% interval, call | peak memory on the GPU |",
            "|---|---|---|---|---|---|---|",
        ]
        meds, rates = {}, {}
        for s in STRATEGIES:
            runs = [r for r in records if r.scenario.get("strategy") == s]
            tps = [r.tokens_per_s for r in runs if _ok(r) and r.tokens_per_s]
            meds[s], rates[s] = _median(tps), tps
            base = meds.get("warmup_locked")
            vs = f"{meds[s] / base:.3f}×" if meds[s] and base else "—"
            bad = [f"{r.outcome}" for r in runs if not _ok(r)]
            mem = sorted({max(r.peak_mem_bytes.values()) for r in runs if r.peak_mem_bytes})
            lines.append(
                f"| {s} | {len(runs)} ({len(bad)}{': ' + ', '.join(bad) if bad else ''}) "
                f"| {', '.join(_k(t) for t in tps) or '—'} | {_k(meds[s])} | {vs} "
                f"| {_interval(rates.get('warmup_locked', []), tps, s)} "
                f"| {', '.join(f'{m / 2**30:.1f} GiB' for m in mem) or '—'} |"
            )
        lines += [
            "",
            "The interval and call are harness.judge.compare's (Welch on log tokens/s, 3% "
            "tolerance), where both strategies have ≥ 2 clean runs. Peak memory is what one "
            "record holds for the GPU: the two replicas together for threads; for `processes`, "
            "the sum of the children's own peaks (records made before that fix hold the first "
            "child's alone).",
            "",
        ]
    return lines


def _interval(reference: list[float], candidate: list[float], strategy: str) -> str:
    """The ratio's 95% interval and call against warmup_locked, or why there is none."""
    if strategy == "warmup_locked":
        return "—"
    if min(len(reference), len(candidate)) < MIN_RUNS:
        return f"— (< {MIN_RUNS} runs a side)"
    c = compare(reference, candidate)
    return f"[{c.low:.3f}, {c.high:.3f}], {c.word}"


def _power(pools: dict[str, list[Path]]) -> PowerSummary:
    """harness.ab's power summary over each side's concatenated pool files."""
    samples = {side: [x for f in files for x in pooled_samples(f, side)] for side, files in
               pools.items()}  # fmt: skip
    return power_summary(samples["reference"], samples["candidate"], PER_SIDE)


def power_table(outs: Sequence[Path]) -> list[str]:
    """Part c: A/A false alarms and catches of the injected slowdown, per preset."""
    lines = ["## A/A false alarms and the injected 5% slowdown", ""]
    presets = sorted({p.name for o in outs for p in o.glob("c-ab-power/*") if p.is_dir()})
    rows = []
    for preset in presets:
        pools = {s: sorted(o / "c-ab-power" / preset / f"{s}.jsonl" for o in outs) for s in
                 ("reference", "candidate")}  # fmt: skip
        pools = {s: [f for f in fs if f.is_file()] for s, fs in pools.items()}
        if not pools["reference"] or not pools["candidate"]:
            rows.append(f"| `{preset}` | no pool of both sides | | | | |")
            continue
        try:  # a torn or unreadable pool is a row saying so, not a crash of the whole summary
            runs = {s: [r for f in fs for r in read_jsonl(f)] for s, fs in pools.items()}
            summary = _power(pools)
        except ValueError as exc:  # a run of a pool failed: counted, never used as a number
            rows.append(f"| `{preset}` | power failed: {exc} | | | | |")
            continue
        ref = next((p for p in summary.pools if p.side == "reference"), None)
        walls = [r.wall_s for rs in runs.values() for r in rs if r.wall_s]
        run_s = _median(walls)
        cost = f"{2 * PER_SIDE * run_s / 60:.1f} min" if run_s else "—"
        rows.append(
            f"| `{preset}` | {len(runs['reference'])} + {len(runs['candidate'])} "
            f"| {f'{ref.spread:.2%}' if ref else '—'} "
            f"| {summary.false_alarms} of {len(summary.aa)} "
            f"| {summary.caught} of {len(summary.ab)} "
            f"| {(ref.runs_needed or '> 1000') if ref else '—'} | {cost} |"
        )
    if not rows:
        return [*lines, "Not run: no c-ab-power/ pools.", ""]
    return [
        *lines,
        f"Pools of interleaved runs (reference: the same versions; candidate: "
        f"RACEGATE_TEST_SLOWDOWN=0.05), disjoint {PER_SIDE}-vs-{PER_SIDE} comparisons drawn by "
        "harness.ab's power summary, as `python -m harness.ab power` prints it (A/A from each "
        "side's pool alone).",
        "",
        "| preset | runs (ref + cand) | run-to-run spread | A/A false alarms | slowdown called "
        f"slower | runs/side for 5% at 90% | one {PER_SIDE}-vs-{PER_SIDE} comparison |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(
            "summarise_21.py: error: give the OUT folder(s) of gpu_evidence_21.sh", file=sys.stderr
        )
        return 2
    outs = [Path(a) for a in args]
    for out in outs:
        if not out.is_dir():
            print(f"summarise_21.py: error: {out} is not a folder (an OUT of the script)",
                  file=sys.stderr)  # fmt: skip
            return 2
    lines = [*step_ratio(outs), *strategy_cost(outs), *power_table(outs)]
    env = [o / "env.txt" for o in outs if (o / "env.txt").is_file()]
    if env:
        lines += ["Environment (env.txt):", "", "```", *(e.read_text().strip() for e in env), "```"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

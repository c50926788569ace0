"""`python -m racegate report`: records into matrix.md, matrix.html, runs.html, one throughput
chart per preset, summary.json and gate.json; the verdict per hardware × torch × transformers
first (docs/gate.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from racegate.harness.ab.result import INJECTED, ABResult
from racegate.harness.ab.stats import SIDES, power_summary
from racegate.harness.ab.store import (
    AB_POOLS,
    AB_RECORDS,
    ab_files,
    cut_ab,
    cut_ab_dirs,
    pooled_samples,
    read_ab,
)
from racegate.harness.judge.baselines import FloorCall, memory_flat
from racegate.harness.judge.compare import Comparison
from racegate.harness.judge.gate import (
    Decision,
    Word,
    combine,
    decide_gate,
    infrastructure_cause,
)
from racegate.harness.judge.inputs import (
    dropped_note,
    read_record_file,
    read_records,
    record_files,
)
from racegate.harness.judge.metrics import wilson_interval
from racegate.harness.judge.race_evidence import shows_race
from racegate.harness.judge.verdict import Status, StrategyVerdict
from racegate.harness.report.matrix import (
    ABEntry,
    Cell,
    GateStatus,
    Group,
    Matrix,
    PoolEntry,
    gate,
    section_parts,
)
from racegate.harness.run.record import RunRecord, unique_runs
from racegate.harness.scenario.vocab import SEVERITY, TEST_SLOWDOWN_ENV, Outcome

__all__ = ["gate", "memory_flat", "render_markdown"]

MAX_REASONS_SHOWN = 3
NO_DATA = "NO DATA"  # a strategy with no run in this group (the verdict's NOT RUN)
FILES = ("matrix.md", "matrix.html", "runs.html", "summary.json", "gate.json")  # + charts

LEGEND = [
    "SAFE: every run ended ok, the positive control (the workload's known-bad strategy;"
    " per_device for the built-in drafter) failed here in the same cache"
    " states and topologies, and the runs were as many as its rate asks for (99% power;"
    " docs/vocabulary.md). UNSAFE: some run failed (counts: failed/runs; the details say which"
    " outcome). INCONCLUSIVE: no run failed, but the evidence is short (the control did not run"
    " or fire in a cell, more runs are needed: the details say how many, or some runs were still"
    " busy at their deadline: too slow to judge). MASKED: every"
    " run ended ok, the control never failed here, and a probe in"
    " racegate/harness/expectations/probes.toml"
    " shows the hazard on this torch, so nothing could be seen (docs/torch-releases.md). NO DATA:"
    " not run here.",
    "Gate: per hardware × torch × transformers, SAFE when the production strategy is SAFE (no"
    " nested-FX error, silent fallback, hang or other failure in any cache state and topology),"
    " tokens/s within floor × (1 ± tolerance) where a floor exists and memory flat; UNSAFE when"
    " a production run failed or tokens/s or memory missed its bar; UNDECIDED otherwise"
    " (docs/gate.md, docs/vocabulary.md#verdict-words). `not gated`: no run of the production"
    " strategy in that group (older records): neither. The report is SAFE only when some group"
    " was gated and every gated group is SAFE; `report` exits 0 SAFE, 1 UNSAFE, 7 UNDECIDED.",
    "tok/s: median of the cell's passing runs (of all runs if none passed) as a ratio to its"
    " floor in baselines/<hardware>.json; `no floor`: not gated; `not gated (runs overlapped)`:"
    " the runs ran beside others (`--jobs`, pytest-xdist), so their timings count for nothing."
    " A stale floor (above tolerance) is refreshed with"
    " `python -m racegate baseline --update <records.jsonl>`.",
    "`detected 8/10 [49-94%]`: runs whose record shows the race"
    " (racegate/harness/judge/race_evidence.py:"
    " a nested-FX error, a silent fallback, a stall or fault inside torch's compiler; never a"
    " timeout or another failure), and the 95% Wilson interval of that rate.",
]


def kilo(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x / 1000:,.1f}K" if x >= 1000 else f"{x:,.0f}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def outcome_text(cell: Cell) -> list[str]:
    """Short phrases for one cell's outcomes, worst first (plain text, no emoji)."""
    ok = cell.outcome_runs.get(str(Outcome.OK), 0)
    if ok == cell.n:
        out = [f"ok {cell.n}/{cell.n}"]
        return out + ([] if cell.memory_ok else [f"mem +{(cell.mem_growth or 0):.1%}"])
    out = []
    if cell.nested_runs:
        out.append(
            f"nested-FX {cell.nested_runs}/{cell.n} runs ({cell.nested_threads}/{cell.threads} thr)"
        )
    if cell.fallback_runs:
        out.append(f"fallback {cell.fallback_runs}/{cell.n} runs")
    for outcome in SEVERITY:
        k = cell.outcome_runs.get(str(outcome), 0)
        if k and outcome not in (Outcome.NESTED_FX_ERROR, Outcome.SILENT_FALLBACK):
            out.append(f"{outcome} {k}/{cell.n}")
    if not cell.memory_ok:
        out.append(f"mem +{(cell.mem_growth or 0):.1%}")
    # Only runs whose record shows the race (race_evidence's rule) are detections: a timeout,
    # a crash with no fault dump or a turn-taking run failed, but caught nothing.
    detected = sum(shows_race(r) for r in cell.runs)
    if cell.n > 1 and detected:
        lo, hi = wilson_interval_text(detected, cell.n)
        out.append(f"detected {detected}/{cell.n} [{lo}-{hi}]")
    return out


def wilson_interval_text(hits: int, n: int) -> tuple[str, str]:
    lo, hi = wilson_interval(hits, n)
    return f"{lo:.0%}", f"{hi:.0%}"


def throughput_text(cell: Cell) -> str:
    t = cell.throughput
    if cell.timings_void:
        return "tok/s not gated (" + ("test slowdown" if cell.slowed else "runs overlapped") + ")"
    if t is None:
        return f"{kilo(cell.tokens_per_s)} tok/s (no floor)" if cell.tokens_per_s else ""
    if t.verdict is FloorCall.NO_BASELINE:
        return f"{kilo(cell.tokens_per_s)} tok/s (no floor)"
    if t.verdict is FloorCall.NO_THROUGHPUT or cell.tokens_per_s is None or not t.floor:
        return f"no tok/s measured (floor {kilo(t.floor)}): below floor"
    ratio = cell.tokens_per_s / t.floor
    where = {
        FloorCall.PASS: "at floor",
        FloorCall.BELOW_FLOOR: "BELOW floor",
        FloorCall.ABOVE_FLOOR: "ABOVE floor (stale)",
    }[t.verdict]
    return (
        f"{kilo(cell.tokens_per_s)} tok/s = {ratio:.2f}x floor {kilo(t.floor)}"
        f" ±{(t.tolerance or 0):.0%}: {where}"
    )


def status_word(sv: StrategyVerdict) -> str:
    return NO_DATA if sv.status is Status.NOT_RUN else str(sv.status)


def status_counts(sv: StrategyVerdict) -> str:
    if sv.status is Status.NOT_RUN:
        return ""
    if sv.status is Status.UNSAFE:
        return f"{sv.failed}/{plural(sv.runs, 'run')}"
    return plural(sv.runs, "run")


def cell_flags(cells: list[Cell]) -> list[str]:
    """What else is wrong with a strategy's cells besides its race verdict: throughput, memory."""
    flags = []
    verdict_set = {c.throughput.verdict for c in cells if c.throughput}
    if verdict_set & {FloorCall.BELOW_FLOOR, FloorCall.NO_THROUGHPUT}:
        flags.append("tok/s below floor")
    if FloorCall.ABOVE_FLOOR in verdict_set:
        flags.append("tok/s above floor")
    if not all(c.memory_ok for c in cells):
        flags.append("memory grew")
    return flags


def bar_problems(g: Group) -> list[str]:
    """What the production strategy's cells missed besides the race: tokens/s below (or no
    tokens/s against) its floor, memory that grew, runs under the test slowdown."""
    out = []
    for c in g.strategy_cells(g.verdict.production):
        if c.throughput and c.throughput.failed:
            out.append(f"{c.column.key}: {c.throughput.detail}")
        if not c.memory_ok:
            out.append(f"{c.column.key}: {c.memory_note}")
        if c.slowed:
            out.append(f"{c.column.key}: {c.slowed}/{c.n} runs under the test slowdown")
    return out


def group_decision(g: Group) -> Decision | None:
    """A gated group's decision (racegate.harness.judge.gate, as the terminal's and `harness
    run`'s); None where the group is not gated (no run of the production strategy)."""
    if not g.gate.gated:
        return None
    bars = bar_problems(g)
    d = decide_gate(g.verdict, missed=bars, infrastructure=infrastructure_cause(g.records))
    if d.passed and not g.gate.passed:  # fail closed: a problem the gate saw stops a SAFE
        return Decision(Word.UNSAFE, "; ".join(g.gate.reasons), "see matrix.md")
    return d


def ab_decision(a: ABEntry) -> Decision:
    """A gating A/B comparison that failed its gate: UNSAFE (a run failed, a metric regressed),
    or UNDECIDED where it was interrupted before its call (`racegate.harness.ab` and `racegate
    upgrade` exit 130 there: no decision, and nothing was found worse)."""
    why = f"A/B {a.path}: {a.result.why_failed or 'failed'}"
    if a.result.interrupted:
        return Decision(Word.UNDECIDED, why, f"run the A/B of {a.path} again, to its end")
    return Decision(Word.UNSAFE, why, "see matrix.md")


def decision(m: Matrix) -> Decision:
    """The report's one decision: every gated group's, and each gating A/B comparison that
    failed (ab_decision); no gated group is UNDECIDED."""
    found = [d for g in m.groups.values() if (d := group_decision(g)) is not None]
    found += [ab_decision(a) for a in m.ab_failed]
    if not m.gated:  # an A/B alone never stands in for race evidence
        found = [d for d in found if d.word is Word.UNSAFE]
        if not found:
            return combine((), empty=f"no group ran the production strategy "
                                     f"{m.productions}: nothing was gated")  # fmt: skip
    return combine(found, empty="nothing was gated")


def gate_word(g: Group) -> str:
    """A group's gate cell: its decision word (SAFE / UNSAFE / UNDECIDED), or `not gated`."""
    d = group_decision(g)
    return "not gated" if d is None else str(d.word)


def headline(m: Matrix) -> str:
    """One sentence: the decision and what it rests on."""
    gated = m.gated
    failed = [g for g in gated if not g.passed]
    not_gated = len(m.groups) - len(gated)
    skip = f"; {not_gated} not gated (no {m.productions} runs)" if not_gated else ""
    gating = m.ab_gated
    ab = (
        f"; A/B: {len(gating) - len(m.ab_failed)} of {plural(len(gating), 'comparison')} passed"
        if gating
        else ""
    )
    if cal := m.calibrations:
        ok = sum(not a.result.failed for a in cal)
        ab += f"; A/B calibrations (not gated): {ok} of {len(cal)} as they must"
    word = decision(m).word
    if not gated:
        return (
            f"{word}: no group ran the production strategy {m.productions}, "
            f"so nothing was gated ({plural(len(m.groups), 'group')}){ab}."
        )
    return (
        f"{word}: {len(gated) - len(failed)} of {plural(len(gated), 'gated group')} SAFE{skip}{ab}."
    )


def ab_text(entry: ABEntry) -> dict[str, str]:
    """One A/B comparison's cells: its ratios with their intervals, runs and gate word."""
    r = entry.result

    def ratio(c: Comparison) -> str:
        return f"{c.ratio_text()}: {c.word}"

    runs = {s: sum(x.side == s for x in r.samples) for s in SIDES}
    cut = "interrupted" if r.interrupted else "a run failed" if r.failure else "no runs"
    return {
        "tokens_per_s": ratio(r.throughput) if r.throughput else "not compared",
        "memory": (ratio(r.memory) if r.memory else f"not compared ({r.memory_note or cut})")
        + "".join(f"; {d.cell()}" for d in r.device_memory),  # each device: peak, growth
        "runs": f"{runs['reference']} vs {runs['candidate']}"
        if r.samples or not entry.runs_left_out
        else f"{plural(entry.runs_left_out, 'run')}, no result",
        "gate": ab_gate_word(r),
    }


def ab_gate_word(r: ABResult) -> str:
    """An A/B's gate cell: PASS / FAIL, or for a calibration whether it came out as it must."""
    if r.calibration is None:
        return "INTERRUPTED" if r.interrupted else "FAIL" if r.failed else "PASS"
    if r.failure is not None or r.throughput is None:
        return "calibration: no call"
    return "calibration: as it must" if r.as_calibrated else "calibration: missed"


def ab_json(entry: ABEntry) -> dict[str, Any]:
    r = entry.result
    return {
        "path": entry.path,
        "preset": entry.preset,
        "change": entry.change,
        "calibration": r.calibration,  # not null: shown, not gated
        "passed": not r.failed,
        "failure": r.failure,
        "lines": r.lines(),
        "runs_left_out_of_the_race_tables": entry.runs_left_out,
        **{k: v for k, v in ab_text(entry).items() if k != "gate"},
    }


def ab_markdown(m: Matrix) -> list[str]:
    if not m.ab:
        return []
    lines = [
        "",
        "## A/B comparisons",
        "",
        "Candidate / reference, interleaved runs on one machine (`python -m racegate.harness.ab`).",
        "",
        "| comparison | preset | what changed | tokens/s (95%) | peak memory (95%) | runs | gate |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in m.ab:
        t = ab_text(a)
        lines.append(
            f"| {_md(a.path)} | {_md(a.preset)} | {_md(a.change)} | {_md(t['tokens_per_s'])} | "
            f"{_md(t['memory'])} | {t['runs']} | {t['gate']} |"
        )
    for a in m.ab_failed:
        word = ab_gate_word(a.result)
        lines += ["", f"**{word} {_md(a.path)}**: {_md(a.result.why_failed or '?')}"]
    for a in m.calibrations:
        if a.result.failed:
            why = _md(a.result.why_failed or "?")
            lines += ["", f"**Calibration not as it must, {_md(a.path)}**: {why}"]
    if note := ab_note(m):
        lines += ["", f"_Note: {note}_"]
    return lines + pool_markdown(m)


# The calibration pools' comparisons: 2 vs 2, as benchmarks/ab_power_gpu.sh draws them.
POOL_PER_SIDE = 2
POOL_HEADS = (
    "pool",
    "runs (reference + candidate)",
    "run-to-run spread",
    "A/A false alarms",
    "slowdown called slower",
    "runs a side to call it 90% of the time",
    "GPUs",
)
POOL_INTRO = (
    "Disjoint {k}-vs-{k} comparisons drawn from each injected-slowdown calibration's pooled"
    " runs (`python -m racegate.harness.ab power`): A/A from each side's own runs, which must"
    " call no"
    " change, and reference against candidate, which must call the slowdown slower."
)


def pool_cells(p: PoolEntry) -> tuple[str, ...]:
    """One calibration pool's row (POOL_HEADS), or its path and why it could not be read."""
    s = p.summary
    if s is None:
        return (p.path, f"not read: {p.problem}", "", "", "", "", "")
    by = {x.side: x for x in s.pools}
    runs = " + ".join(str(by[n].runs) if n in by else "< 2" for n in SIDES)  # no spread
    spread = " / ".join(f"{by[n].spread:.2%}" if n in by else "-" for n in SIDES)
    need = " / ".join(str(by[n].runs_needed or "> 1000") if n in by else "-" for n in SIDES)
    return (
        p.path,
        runs,
        spread,
        f"{s.false_alarms} of {len(s.aa)}",
        f"{s.caught} of {len(s.ab)} ({s.slowdown:.0%})",
        need,
        _gpu_count(s.gpus),
    )


def _gpu_count(gpus: dict[tuple[str, ...], int]) -> str:
    """How many GPUs (sets of them) a pool's runs name, and how many runs name none."""
    named, unnamed = [g for g in gpus if g], gpus.get((), 0)
    if not named:
        return "not recorded"
    return str(len(named)) + (f" ({plural(unnamed, 'run')} name none)" if unnamed else "")


def pool_markdown(m: Matrix) -> list[str]:
    if not m.pools:
        return []
    lines = ["", "### Calibration pools", "", POOL_INTRO.format(k=POOL_PER_SIDE), ""]
    lines += ["| " + " | ".join(POOL_HEADS) + " |", "|" + "---|" * len(POOL_HEADS)]
    lines += ["| " + " | ".join(_md(c) for c in pool_cells(p)) + " |" for p in m.pools]
    return lines


def ab_note(m: Matrix) -> str | None:
    """Where the A/B comparisons' own runs went (matrix.md and matrix.html)."""
    left = sum(a.runs_left_out for a in m.ab)
    notes = []
    if left:
        notes.append(
            f"the {plural(left, 'run')} of these comparisons are shown here, not in the race "
            "tables: one thread each, no race evidence."
        )
    if m.calibrations:
        notes.append(
            "A calibration runs the same versions on both sides, as an A/A (it must call no "
            "change) or with the candidate under the test slowdown (it must call it slower): "
            "it tests the comparison, and gates no upgrade."
        )
    return " ".join(notes) or None


def throughput_notes(m: Matrix, hw: str) -> list[str]:
    """Notes under this hardware's table: SAFE strategies faster than production, and the
    tok/s checks skipped in its gated groups, summed; one line each."""
    mine = [
        c
        for row in m.rows[hw]
        if (g := m.groups[hw, row]).gate.gated
        for c in g.strategy_cells(m.production(hw))
    ]
    # A cell run under the test slowdown fails its group, which says why: no note of its own.
    void = sum(c.timings_void and not c.slowed for c in mine)
    floorless = sum(
        not c.timings_void and (c.throughput is None or c.throughput.skipped) for c in mine
    )
    out = [
        f"torch {row[0]} / transformers {row[1]}: {f.describe(m.production(hw))}"
        for row in m.rows[hw]
        for f in m.groups[hw, row].verdict.faster
    ]
    if floorless:
        out.append(
            f"tok/s not gated in {floorless} of {plural(len(mine), 'production cell')}: no floor"
            f" in baselines/{section_parts(hw)[0]}.json for their scenario"
        )
    if void:
        out.append(
            f"tok/s not gated in {void} of {plural(len(mine), 'production cell')}: their runs"
            " overlapped other runs"
        )
    return out


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _reasons(reasons: list[str], limit: int | None) -> list[str]:
    shown = reasons if limit is None else reasons[:limit]
    more = len(reasons) - len(shown)
    return shown + ([f"+{more} more (gate.json)"] if more else [])


def render_markdown(m: Matrix, title: str, inputs: str, with_details: bool = True) -> str:
    n_runs = sum(c.n for c in m.cells.values())
    lines = [
        f"# {title}",
        "",
        f"**{headline(m)}** Production strategy `{m.productions}` · {n_runs} runs "
        f"from {inputs} · {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
    ]
    if m.dropped:
        lines += ["", f"_{dropped_note(m.dropped).capitalize()}._"]
    every = invocations([r for g in m.groups.values() for r in g.records])
    if len(every) > 1:
        shown = ", ".join(f"`{k}` ({plural(n, 'run')})" for k, n in every.items())
        lines += ["", f"_Runs from {len(every)} invocations, first started first: {shown}; "
                  "each group's are named in gate.json (rows' `invocations`)._"]  # fmt: skip
    for hw in m.hardware:
        names = m.strategies[hw]
        head = [f"{s} (production)" if s == m.production(hw) else s for s in names]
        lines += ["", f"## {hw}", ""]
        lines.append("| torch | transformers | gate | " + " | ".join(head) + " |")
        lines.append("|---" * (len(names) + 3) + "|")
        failures = []
        for row in m.rows[hw]:
            g = m.groups[hw, row]
            texts = []
            for s in names:
                sv = g.status(s)
                text = f"{status_word(sv)} {status_counts(sv)}".strip()
                flags = cell_flags(g.strategy_cells(s))
                texts.append(_md("; ".join([text, *flags])))
            lines.append(
                f"| {_md(row[0])} | {_md(row[1])} | {gate_word(g)} | " + " | ".join(texts) + " |"
            )
            if g.gate.status is GateStatus.FAIL:
                limit = None if with_details else MAX_REASONS_SHOWN
                failures.append((row, g, _reasons(g.gate.reasons, limit)))
        for row, g, reasons in failures:
            lines += ["", f"**{gate_word(g)} torch {row[0]} / transformers {row[1]}**: "
                      f"{_md(g.verdict.advice)}", ""]  # fmt: skip
            lines += [f"- {_md(r)}" for r in reasons]
        if notes := throughput_notes(m, hw):
            lines += ["", *(f"_Note: {_md(n)}_" for n in notes)]
    lines += ab_markdown(m)
    if not with_details:
        lines += ["", "_Gate reasons cut to fit a step summary: see gate.json and matrix.html._"]
    lines += [
        "",
        "Per-cell details (cache states, topologies, tok/s, errors, stacks): matrix.html.",
    ]
    lines += ["", "### Legend", "", *(f"- {item}" for item in LEGEND), ""]
    return "\n".join(lines)


def summary_json(m: Matrix, title: str, inputs: list[str]) -> dict[str, Any]:
    return {
        "title": title,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "inputs": inputs,
        "production_strategy": m.productions,
        "roles": {hw: {"production": p, "control": c} for hw, (p, c) in m.roles.items()},
        "gate": gate_json(m),
        "groups": [
            {
                "hardware": g.hardware,
                "torch": g.row[0],
                "transformers": g.row[1],
                "gate": gate_word(g),
                "advice": g.verdict.advice,
                "faster": [f.describe(g.verdict.production) for f in g.verdict.faster],
                "strategies": {
                    s.strategy: {
                        "status": str(s.status),
                        "runs": s.runs,
                        "failed": s.failed,
                        "failures": s.failures,
                        "why": s.why,
                    }
                    for s in g.verdict.strategies
                },
            }
            for g in m.groups.values()
        ],
        "ab": [ab_json(a) for a in m.ab],
        "calibration_pools": [dict(zip(POOL_HEADS, pool_cells(p), strict=True)) for p in m.pools],
        "columns": [c.key for c in m.columns],
        "cells": [
            {**m.cells[rc].to_json(), "run_ids": [m.run_id(r) for r in m.cells[rc].runs]}
            for rc in sorted(m.cells)
        ],
    }


# A row's status in gate.json, from its decision: one answer, never "fail" beside UNDECIDED.
ROW_STATUS = {Word.SAFE: "pass", Word.UNSAFE: "fail", Word.UNDECIDED: "undecided"}


def row_json(g: Group) -> dict[str, Any]:
    """A group's gate.json row: its status, passed and decision all say its decision (passed:
    SAFE; None where not gated); and the invocations its runs came from."""
    d = group_decision(g)
    return {
        **g.gate.to_json(),
        "status": ROW_STATUS[d.word] if d else str(g.gate.status),
        "passed": d.passed if d else None,
        "decision": str(d.word) if d else None,
        "invocations": invocations(g.records),
    }


def invocations(records: list[RunRecord]) -> dict[str, int]:
    """Each invocation the records came from (racegate.harness.run.record.invocation) and its
    runs, first started first; records that name none are `unrecorded`."""
    counts: dict[str, int] = {}
    for r in sorted(records, key=lambda r: r.started_at):
        key = r.invocation or "unrecorded"
        counts[key] = counts.get(key, 0) + 1
    return counts


def gate_json(m: Matrix) -> dict[str, Any]:
    return {
        **decision(m).to_json(),  # passed, decision, exit_code, reason, next
        "headline": headline(m),
        "production_strategy": m.productions,
        "roles": {hw: {"production": p, "control": c} for hw, (p, c) in m.roles.items()},
        "rows": [row_json(g) for g in m.groups.values()],
        "ab": [ab_json(a) for a in m.ab],
        "race_only": m.race_only,
        "dropped_duplicates": m.dropped,
    }


def read_sourced(
    paths: list[Path], skip: frozenset[Path] = frozenset(), *, allow_none: bool = False
) -> tuple[list[RunRecord], list[str], int]:
    """Records as racegate.harness.judge.inputs.read_runs reads them (each run once), each with
    `file#k` (its k-th record), so the report can link a cell to its runs; and how many
    duplicates were dropped. Files in `skip` (an A/B comparison's runs) are left out;
    `allow_none`: no record left is no error (the report was given A/B comparisons)."""
    records, sources, dropped = [], [], 0
    for f in record_files(list(paths)):
        if f in skip:
            continue
        found = read_record_file(f)
        fresh, again = unique_runs(found, records)
        kept = {id(r) for r in fresh}
        sources += [f"{f}#{k}" for k, r in enumerate(found, 1) if id(r) in kept]
        records += fresh
        dropped += again
    if not records and not allow_none:
        read_records(list(paths))  # raises its one-line reason if empty
    return records, sources, dropped


def _shown(path: Path, inputs: list[Path]) -> str:
    """A path as the report shows it: relative to the input folder it was found under."""
    for base in inputs:
        if base.is_dir() and path.is_relative_to(base):
            return str(path.relative_to(base))
    return str(path)


def read_pool(folder: Path, result: ABResult, shown: str) -> PoolEntry:
    """What `racegate.harness.ab power` finds in the pools beside an injected-slowdown calibration,
    at its slowdown; a pool it cannot read (a failed run, a bad record) is shown with why."""
    try:
        slowdown = float(result.sides["candidate"]["env"][TEST_SLOWDOWN_ENV])
        pools = [
            pooled_samples(folder / name, side) for name, side in zip(AB_POOLS, SIDES, strict=True)
        ]
        summary = power_summary(*pools, POOL_PER_SIDE, slowdown=slowdown)
    except ValueError as exc:
        return PoolEntry(shown, None, str(exc))
    return PoolEntry(shown, summary)


def read_ab_entries(
    paths: list[Path],
) -> tuple[list[ABEntry], list[PoolEntry], frozenset[Path]]:
    """The A/B comparisons among `paths` (and gpu_ab folders cut before their ab.json was
    written: failed comparisons); the pools of the injected-slowdown calibrations, once per
    folder; and the record files of their runs, which the race rows leave out: beside the
    ab.json, gpu_ab's `ab-records/` and compare's side pools."""
    by_dir: dict[Path, list[Path]] = {}
    for f in record_files(paths):
        by_dir.setdefault(f.parent, []).append(f)
    entries, taken = [], set[Path]()
    pooled: dict[Path, PoolEntry] = {}

    def runs(files: list[Path]) -> int:  # each file counted once, by its first comparison
        mine = [f for f in files if f not in taken]
        taken.update(mine)
        return sum(len(read_record_file(f)) for f in mine)

    for p in ab_files(paths):
        pools = [f for f in by_dir.get(p.parent, []) if f.name in AB_POOLS]
        files = [*by_dir.get(p.parent / AB_RECORDS, []), *pools]
        result = read_ab(p)
        entries.append(ABEntry(_shown(p, paths), result, runs(files)))
        both = len(pools) == len(AB_POOLS)
        if both and p.parent not in pooled and result.calibration_kind == INJECTED:
            pooled[p.parent] = read_pool(p.parent, result, _shown(p.parent, paths))
    for d in cut_ab_dirs(paths):
        entries.append(ABEntry(_shown(d, paths), cut_ab(), runs(by_dir.get(d, []))))
    return entries, list(pooled.values()), frozenset(taken)

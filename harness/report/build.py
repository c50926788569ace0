"""`python -m harness report`: merge run records into matrix.md, matrix.html, throughput.png,
summary.json and gate.json (the DESIGN §5 verdict per torch × transformers row).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import settings
from harness.judge.baselines import Verdict, memory_flat, read_records
from harness.judge.metrics import wilson_interval
from harness.record import RunRecord
from harness.report.matrix import Cell, Column, Matrix, Row, build_matrix, gate
from harness.vocab import SEVERITY, Outcome

__all__ = ["gate", "memory_flat", "render_markdown", "write_reports"]

MAX_MARKDOWN_BYTES = 400_000  # a GitHub step summary holds 1 MiB; leave room for other steps
MAX_REASONS_SHOWN = 3
FILES = ("matrix.md", "matrix.html", "throughput.png", "summary.json", "gate.json")

LEGEND = [
    "✅ every run ok, tokens/s within the floor's tolerance (where a floor exists), memory flat;"
    " ❌ otherwise; — not run.",
    "`FX 2/3 runs · 5/12 thr`: runs, and threads over all runs, that hit the nested-FX error.",
    "`detected 8/10 [49–94%]`: runs with any failure, and the 95% Wilson interval of that rate.",
    "`fallback …`: silent fallback (compiled attention ran eager, the incident's 'fix');"
    " other outcomes as `hang 1/3`.",
    "tok/s: median of passing runs (of all runs if none passed), and how far it lies from the"
    " floor. `at floor` within the floor's tolerance; `▼ floor` below it (regression);"
    " `▲ floor` above it (stale floor: refresh with"
    " `python -m harness baseline --update <records.jsonl>`); `no floor`: not gated;"
    " `not gated (runs overlapped)`: the runs ran beside others (`--jobs`, pytest-xdist),"
    " so their timings count for nothing.",
    "Gate (DESIGN §5): per row, the production strategy shows no nested-FX error, silent"
    " fallback or other failure in any cache state and topology, tokens/s ≥ floor × (1 − tol),"
    " memory flat.",
]


def kilo(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x / 1000:,.1f}K" if x >= 1000 else f"{x:,.0f}"


def outcome_text(cell: Cell) -> list[str]:
    """Short phrases for one cell's outcomes, worst first."""
    if cell.outcome_runs == {str(Outcome.OK): cell.n}:  # failed on throughput or memory only
        return [f"{'✅' if cell.passed else '❌'} {cell.n}/{cell.n} ok"] + (
            [] if cell.memory_ok else [f"mem +{(cell.mem_growth or 0):.1%}"]
        )
    out = ["❌"]
    if cell.nested_runs:
        out.append(
            f"FX {cell.nested_runs}/{cell.n} runs · {cell.nested_threads}/{cell.threads} thr"
        )
    if cell.fallback_runs:
        out.append(f"fallback {cell.fallback_runs}/{cell.n} runs")
    for outcome in SEVERITY:
        k = cell.outcome_runs.get(str(outcome), 0)
        if k and outcome not in (Outcome.NESTED_FX_ERROR, Outcome.SILENT_FALLBACK):
            out.append(f"{outcome} {k}/{cell.n}")
    if not cell.memory_ok:
        out.append(f"mem +{(cell.mem_growth or 0):.1%}")
    failed = cell.n - cell.outcome_runs.get(str(Outcome.OK), 0)
    if cell.n > 1 and failed:
        lo, hi = wilson_interval(failed, cell.n)  # the detection rate, with its 95% interval
        out.append(f"detected {failed}/{cell.n} [{lo:.0%}–{hi:.0%}]")
    return [" ".join(out[:2]), *out[2:]]


def throughput_text(cell: Cell) -> str:
    t = cell.throughput
    if cell.timings_void:
        return "tok/s not gated (runs overlapped)"
    if t is None:
        return ""
    marks = {
        Verdict.PASS: "at floor",
        Verdict.BELOW_FLOOR: "▼ floor",
        Verdict.ABOVE_FLOOR: "▲ floor",
        Verdict.NO_THROUGHPUT: "▼ floor",
    }
    if t.verdict is Verdict.NO_BASELINE:
        return f"{kilo(cell.tokens_per_s)} tok/s (no floor)"
    text = f"{kilo(cell.tokens_per_s)} tok/s {marks[t.verdict]} {kilo(t.floor)}"
    if cell.tokens_per_s is not None and t.floor:  # e.g. 42.9K sits 0.3% below a 43.0K floor
        text += f" ({cell.tokens_per_s / t.floor - 1:+.1%})"
    return text


def sections(m: Matrix) -> list[tuple[str, str, list[Column]]]:
    """(preset, strategy, columns) per table: the production strategy first."""
    keys = sorted(
        {(c.preset, c.strategy) for c in m.columns},
        key=lambda k: (k[1] != m.production_strategy, k),
    )
    return [(p, s, [c for c in m.columns if (c.preset, c.strategy) == (p, s)]) for p, s in keys]


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row_name(row: Row) -> str:
    return f"{row[0]} · {row[1]}"


def _gate_why(reasons: list[str]) -> str:
    shown = reasons[:MAX_REASONS_SHOWN]
    more = len(reasons) - len(shown)
    return "; ".join(shown) + (f"; +{more} more (gate.json)" if more else "")


def render_markdown(m: Matrix, title: str, inputs: str, with_details: bool = True) -> str:
    verdict = "✅ passed" if m.passed else "❌ failed"
    n_runs = sum(c.n for c in m.cells.values())
    lines = [
        f"# {title}",
        "",
        f"**Gate: {verdict}** · production strategy `{m.production_strategy}` · {n_runs} runs "
        f"from {inputs} · {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        "| torch | transformers | gate | why |",
        "|---|---|---|---|",
    ]
    for row in m.rows:
        g = m.gates[row]
        why = _gate_why(g.reasons) if g.reasons else _gate_why(g.notes)
        lines.append(
            f"| {_md(row[0])} | {_md(row[1])} | {'✅ pass' if g.passed else '❌ fail'} "
            f"| {_md(why)} |"
        )
    if with_details:
        for preset, strategy, cols in sections(m):
            prod = " (production)" if strategy == m.production_strategy else ""
            lines += ["", f"## {preset} · {strategy}{prod}", ""]
            lines.append(
                "| torch · transformers | " + " | ".join(_md(c.label) for c in cols) + " |"
            )
            lines.append("|---" * (len(cols) + 1) + "|")
            for row in m.rows:
                texts = []
                for c in cols:
                    cell = m.cells.get((row, c))
                    parts = [*outcome_text(cell), throughput_text(cell)] if cell else ["—"]
                    texts.append("<br>".join(_md(p) for p in parts if p))
                lines.append(f"| {_md(_row_name(row))} | " + " | ".join(texts) + " |")
    else:
        lines += ["", "_Per-scenario tables left out to fit a step summary: see matrix.html._"]
    lines += ["", "### Legend", "", *(f"- {item}" for item in LEGEND), ""]
    return "\n".join(lines)


def summary_json(m: Matrix, title: str, inputs: list[str]) -> dict[str, Any]:
    return {
        "title": title,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "inputs": inputs,
        "production_strategy": m.production_strategy,
        "gate": gate_json(m),
        "rows": [{"torch": r[0], "transformers": r[1]} for r in m.rows],
        "columns": [c.key for c in m.columns],
        "cells": [m.cells[rc].to_json() for rc in sorted(m.cells)],
    }


def gate_json(m: Matrix) -> dict[str, Any]:
    return {
        "passed": m.passed,
        "production_strategy": m.production_strategy,
        "rows": [m.gates[r].to_json() for r in m.rows],
    }


def write_reports(
    record_paths: list[Path],
    out_dir: Path,
    *,
    baselines_dir: Path,
    title: str,
    production_strategy: str | None = None,
    overlapped_paths: list[Path] | None = None,
) -> list[Path]:
    """Write the five report files into `out_dir`; return their paths (gate.json last).

    `overlapped_paths`: records of runs that overlapped other runs but were written before
    `timing_valid` existed; their tokens/s are neither shown nor gated. They may lie under
    `record_paths` too: each file is read once."""
    from harness.report.html import render_html
    from harness.report.png import plot_throughput

    overlapped_paths = list(overlapped_paths or [])
    records: list[RunRecord] = (
        read_records(record_paths, without=overlapped_paths) if record_paths else []
    )
    if overlapped_paths:
        overlapped = read_records(overlapped_paths)
        records += [dataclasses.replace(r, timing_valid=False) for r in overlapped]
    record_paths = [*record_paths, *overlapped_paths]
    production = str(settings.production_strategy(production_strategy))
    m = build_matrix(records, baselines_dir, production)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    inputs = [str(p) for p in record_paths]
    shown = ", ".join(inputs) if len(inputs) <= 3 else f"{len(inputs)} paths"
    md = render_markdown(m, title, shown)
    if len(md.encode()) > MAX_MARKDOWN_BYTES:
        md = render_markdown(m, title, shown, with_details=False)
    paths = [out_dir / f for f in FILES]
    paths[0].write_text(md)
    paths[1].write_text(render_html(m, title, shown, LEGEND))
    plot_throughput(m, paths[2], title)
    paths[3].write_text(json.dumps(summary_json(m, title, inputs), indent=2) + "\n")
    paths[4].write_text(json.dumps(gate_json(m), indent=2) + "\n")
    return paths

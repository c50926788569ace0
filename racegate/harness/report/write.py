"""`python -m racegate report`'s files: the records read once, then matrix.md, matrix.html,
runs.html, the throughput charts, summary.json and gate.json written from one matrix."""

from __future__ import annotations

import json
from pathlib import Path

from racegate.harness.ab.store import is_ab_file
from racegate.harness.judge.inputs import unnamed_roles
from racegate.harness.report.build import (
    FILES,
    LEGEND,
    gate_json,
    read_ab_entries,
    read_sourced,
    render_markdown,
    summary_json,
)
from racegate.harness.report.html import render_html
from racegate.harness.report.matrix import build_matrix
from racegate.harness.report.png import plot_throughput
from racegate.harness.report.runs import render_runs
from racegate.harness.run import state
from racegate.harness.run.files import PUBLISHED, write_whole

MAX_MARKDOWN_BYTES = 400_000  # a GitHub step summary holds 1 MiB; leave room for other steps


def write_reports(
    record_paths: list[Path],
    out_dir: Path,
    *,
    baselines_dir: Path,
    title: str,
    production_strategy: str | None = None,
    race_only: bool = False,
) -> list[Path]:
    """Write the report files into `out_dir`; return their paths (gate.json last).

    Whether a run's tokens/s count is its record's `timing_valid`, set when the record was
    made; the report only reads it."""
    out_dir = Path(out_dir)
    # Never written through a link, the folder's or a file's: refused before anything is read.
    state.refuse_link(out_dir, "the report folder")
    for name in FILES:
        state.refuse_link(out_dir / name, "the report file")
    record_paths = [Path(p) for p in record_paths]
    inputs_ = [p for p in record_paths if not (p.is_file() and is_ab_file(p))]
    entries, pools, ab_runs = read_ab_entries(record_paths)
    records, sources, dropped = (
        read_sourced(inputs_, ab_runs, allow_none=bool(entries)) if inputs_ else ([], [], 0)
    )
    # Each section is judged by the roles its records ran under; `production_strategy` only
    # for records that name none (older ones; by default the project's: inputs.unnamed_roles).
    production = production_strategy or unnamed_roles()[0]
    m = build_matrix(records, baselines_dir, production, race_only)
    m.ab, m.pools, m.dropped = entries, pools, dropped
    out_dir.mkdir(parents=True, exist_ok=True)
    inputs = [str(p) for p in record_paths]
    shown = ", ".join(inputs) if len(inputs) <= 3 else f"{len(inputs)} paths"
    md = render_markdown(m, title, shown)
    if len(md.encode()) > MAX_MARKDOWN_BYTES:
        md = render_markdown(m, title, shown, with_details=False)
    md_path, html_path, runs_path, summary_path, gate_path = (out_dir / f for f in FILES)
    charts = plot_throughput(m, out_dir, title)
    # Each a private temporary renamed into place: a link planted at a name, before or
    # during the writing, is replaced, never written through (racegate.harness.run.files).
    pages = {
        md_path: md,
        html_path: render_html(m, title, shown, LEGEND, charts),
        runs_path: render_runs(m, records, sources, title),
        summary_path: json.dumps(summary_json(m, title, inputs), indent=2) + "\n",
        gate_path: json.dumps(gate_json(m), indent=2) + "\n",
    }
    for path, text in pages.items():
        write_whole(path, text, mode=PUBLISHED)
    return [md_path, html_path, runs_path, *charts, summary_path, gate_path]

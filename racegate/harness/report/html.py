"""matrix.html: the verdict per hardware first, per-cell details folded below it; one
self-contained page (inline CSS, no scripts, no external assets, no emoji)."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from racegate.harness.judge.gate import WORDS_DOC
from racegate.harness.judge.verdict import Status
from racegate.harness.report.build import (
    POOL_HEADS,
    POOL_INTRO,
    POOL_PER_SIDE,
    ab_gate_word,
    ab_note,
    ab_text,
    cell_flags,
    decision,
    gate_word,
    headline,
    outcome_text,
    plural,
    pool_cells,
    status_counts,
    status_word,
    throughput_notes,
    throughput_text,
)
from racegate.harness.report.matrix import Cell, Group, Matrix, section_parts
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.vocab import Outcome

MAX_RUN_LINKS = 24  # per cell line; runs.html lists them all
MAX_REASONS = 6  # per failed group; gate.json lists them all

CSS = """
body { font: 14px/1.45 "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 1.2em 1.5em;
       color: #1f2328; max-width: 1400px; }
h1 { font-size: 1.45em; margin: 0 0 .3em; } h2 { font-size: 1.2em; margin: 1.4em 0 .3em; }
h3 { font-size: 1em; margin: 1em 0 .3em; }
table { border-collapse: collapse; margin: .4em 0; }
th, td { border: 1px solid #d0d7de; padding: 3px 7px; vertical-align: top; text-align: left; }
th { background: #f6f8fa; font-weight: 600; }
/* A verdict cell wraps between its badge and its counts, never inside either: the matrix
   fits a 1,200 px window (nowrap cut the last column off). */
table.v td .n, table.v td .b { white-space: nowrap; }
td.safe { background: #eefbf1; } td.unsafe { background: #fff0ee; }
td.masked { background: #fff8e1; } td.nodata { color: #8c959f; }
.b { display: inline-block; padding: 0 6px; border-radius: 3px; font-weight: 700;
     font-size: 12px; line-height: 18px; letter-spacing: .02em; }
.b.safe, .b.pass, .b.ok { background: #1a7f37; color: #fff; }
.b.unsafe, .b.fail { background: #cf222e; color: #fff; }
.b.masked { background: #9a6700; color: #fff; }
.b.muted { background: none; color: #57606a; border: 1px solid #afb8c1; font-weight: 400; }
.n { color: #57606a; font-size: 12px; } .flag { color: #cf222e; font-size: 12px; }
.headline { font-size: 1.15em; font-weight: 700; margin: .3em 0; }
.headline.safe { color: #1a7f37; } .headline.unsafe { color: #cf222e; }
.headline.undecided { color: #9a6700; }
a { color: #0969da; text-decoration: none; } a:hover { text-decoration: underline; }
td a { color: inherit; }
ul.why { margin: .2em 0; padding-left: 1.3em; } .why { color: #57606a; }
details { margin: 2px 0; } summary { cursor: pointer; }
details.cell > div { margin: .2em 0 .6em 1em; }
div.cells { display: grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr));
            gap: 2px 12px; margin: 0 0 .4em 1.2em; }
div.cells details[open] { grid-column: 1 / -1; }
h4 { font-size: 14px; font-weight: 600; margin: .7em 0 .1em; }
pre { white-space: pre-wrap; font-size: 12px; background: #f6f8fa; padding: 6px;
      max-height: 30em; overflow: auto; }
section.run { border-top: 1px solid #d0d7de; padding: 2px 0; } section.run p { margin: 2px 0; }
:target { outline: 2px solid #0969da; }
"""

STATUS_CLASS = {
    Status.SAFE: "safe",
    Status.UNSAFE: "unsafe",
    Status.MASKED: "masked",
    Status.INCONCLUSIVE: "masked",  # clean, but not enough evidence: the same amber
    Status.NOT_RUN: "nodata",
}
# A group's gate badge, by its decision word: UNDECIDED is amber (no failure shown), not red.
GATE_CLASS = {"SAFE": "pass", "UNSAFE": "fail", "UNDECIDED": "masked", "not gated": "muted"}
# A gating A/B's badge, by its gate cell (racegate.harness.report.build.ab_gate_word): one
# interrupted before its call is amber, as the UNDECIDED it makes the report.
AB_CLASS = {"PASS": "pass", "FAIL": "fail", "INTERRUPTED": "masked"}


def gate_badge(g: Group) -> str:
    word = gate_word(g)
    return badge(word, GATE_CLASS[word])


def badge(text: str, cls: str) -> str:
    return f'<span class="b {cls}">{escape(text)}</span>'


def slug(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(parts)).strip("-")


def cell_anchor(g: Group, strategy: str) -> str:
    return slug("c", g.hardware, g.row[0], g.row[1], strategy)


def hardware_label(m: Matrix, hw: str) -> str:
    """'h200x2 (NVIDIA H200, 2 visible)' from the records that say what they ran on."""
    names = Counter(
        r.hardware.device_name
        for g in m.groups.values()
        if g.hardware == hw
        for r in g.records
        if r.hardware.device_name and "did not report" not in r.hardware.device_name
    )
    hardware, _ = section_parts(hw)  # the section's rest names a workload of its own, if any
    if hardware == "cpu" or not names:
        return hw
    return f"{hardware} ({names.most_common(1)[0][0]}){hw[len(hardware) :]}"


def run_links(m: Matrix, runs: list[RunRecord]) -> str:
    ids = [m.run_id(r) for r in runs]
    shown = "".join(f' <a href="runs.html#run-{i}">#{i}</a>' for i in ids[:MAX_RUN_LINKS])
    more = len(ids) - MAX_RUN_LINKS
    return shown + (f" +{more} more" if more > 0 else "")


def _first_error(r: RunRecord) -> str:
    """The failed thread's first error line, else the run's detail, else any thread's error."""
    errors = [t.error for t in r.threads if t.error and t.outcome != Outcome.OK]
    return (errors or [r.detail or ""])[0] or next((t.error for t in r.threads if t.error), "")


def _errors_html(m: Matrix, cells: list[Cell]) -> str:
    """Distinct failure messages of the cells' runs, with the runs that hit each."""
    by: dict[tuple[str, str], list[RunRecord]] = {}
    for c in cells:
        for r in c.runs:
            if r.outcome != Outcome.OK:
                by.setdefault((str(r.outcome), _first_error(r)[:300]), []).append(r)
    if not by:
        return ""
    items = sorted(by.items(), key=lambda kv: -len(kv[1]))
    return (
        '<ul class="why">'
        + "".join(
            f"<li><b>{escape(o)}</b> in {plural(len(rs), 'run')}: {escape(e) or '(no message)'}"
            f"{run_links(m, rs[:6])}</li>"
            for (o, e), rs in items
        )
        + "</ul>"
    )


def _cell_details(m: Matrix, g: Group, strategy: str) -> str:
    cells = sorted(g.strategy_cells(strategy), key=lambda c: c.column)
    sv = g.status(strategy)
    cls = STATUS_CLASS[sv.status]
    head = ["preset", "cache state", "schedule", "topology", "outcomes", "tok/s against the floor"]
    rows = [
        [
            escape(c.column.preset), escape(c.column.cache_state), escape(c.column.schedule),
            escape(c.column.topology), escape("; ".join(outcome_text(c))),
            (f"<span class=flag>{escape(throughput_text(c))}</span>"
             if c.throughput is not None and c.throughput.failed else escape(throughput_text(c))),
        ]
        for c in cells
    ]  # fmt: skip
    keep = [j for j in range(len(head)) if any(r[j] for r in rows)]  # no all-empty column
    table = (
        "<table><tr>"
        + "".join(f"<th>{head[j]}</th>" for j in keep)
        + "<th>runs</th></tr>"
        + "".join(
            "<tr>"
            + "".join(f"<td>{r[j]}</td>" for j in keep)
            + f"<td>{run_links(m, c.runs)}</td></tr>"
            for r, c in zip(rows, cells, strict=True)
        )
        + "</table>"
    )
    prod = " <span class='n'>(production)</span>" if strategy == g.verdict.production else ""
    return (
        f'<details class="cell" id="{cell_anchor(g, strategy)}"><summary>'
        f"<b>{escape(strategy)}</b>{prod} {badge(status_word(sv), cls)} "
        f"<span class='n'>{escape(status_counts(sv))}</span></summary>"
        f'<div><p class="why">torch {escape(g.row[0])} · transformers {escape(g.row[1])} · '
        f"{escape(g.hardware)}: {escape(sv.why)}</p>{table}{_errors_html(m, cells)}</div>"
        "</details>"
    )


def _verdict_cell(g: Group, strategy: str) -> str:
    sv = g.status(strategy)
    if sv.status is Status.NOT_RUN:
        return '<td class="nodata">no data</td>'
    cls = STATUS_CLASS[sv.status]
    flags = cell_flags(g.strategy_cells(strategy))
    extra = "".join(f'<br><span class="flag">{escape(f)}</span>' for f in flags)
    return (
        f'<td class="{cls}"><a href="#{cell_anchor(g, strategy)}" title="{escape(sv.why)}">'
        f"{badge(status_word(sv), cls)} "
        f'<span class="n">{escape(status_counts(sv))}</span></a>{extra}</td>'
    )


def _hardware_section(m: Matrix, hw: str) -> list[str]:
    names = m.strategies[hw]
    groups = [m.groups[hw, row] for row in m.rows[hw]]
    gated = [g for g in groups if g.gate.gated]
    failed = [g for g in gated if not g.gate.passed]
    summary = (
        f"{plural(len(groups), 'torch × transformers row')}, "
        f"{sum(len(g.records) for g in groups)} runs; gate: "
        + (
            f"{len(gated) - len(failed)} of {len(gated)} gated rows SAFE"
            if gated
            else f"not gated (no {m.production(hw)} runs)"
        )
    )
    out = [f"<h2>{escape(hardware_label(m, hw))}</h2>", f'<p class="n">{escape(summary)}</p>']
    prod = "<br><span class=n>production</span>"
    head = "".join(f"<th>{escape(s)}{prod if s == m.production(hw) else ''}</th>" for s in names)
    show_gate = bool(gated)  # a gate column only where some row was gated
    out.append(
        "<table class='v'><tr><th>torch</th><th>transformers</th>"
        + ("<th>gate</th>" if show_gate else "")
        + head
        + "</tr>"
    )
    for g in groups:
        gate = f"<td>{gate_badge(g)}</td>" if show_gate else ""
        out.append(
            f"<tr><td>{escape(g.row[0])}</td><td>{escape(g.row[1])}</td>{gate}"
            + "".join(_verdict_cell(g, s) for s in names)
            + "</tr>"
        )
    out.append("</table>")
    for g in failed:
        reasons = g.gate.reasons[:MAX_REASONS]
        more = len(g.gate.reasons) - len(reasons)
        out.append(
            f"<p>{gate_badge(g)} torch {escape(g.row[0])} / transformers "
            f"{escape(g.row[1])}: {escape(g.verdict.advice)}</p><ul class='why'>"
            + "".join(f"<li>{escape(r)}</li>" for r in reasons)
            + (f"<li>+{more} more in gate.json</li>" if more > 0 else "")
            + "</ul>"
        )
    if latest := [g for g in gated if g.gate.passed][-1:]:
        g = latest[0]
        out.append(
            f"<p>Newest gated row (torch {escape(g.row[0])} / transformers {escape(g.row[1])}):"
            f" <b>{escape(g.verdict.advice)}</b></p>"
        )
    if notes := throughput_notes(m, hw):
        out.append('<ul class="why">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    return out


def _details_section(m: Matrix, hw: str) -> list[str]:
    """Per row a heading and one fold per cell (strategy), laid out side by side; an opened
    fold spans the row. The verdict table's badges link to the folds (ids on the folds
    themselves: browsers do not reveal an anchor inside a closed fold)."""
    out = [f"<h3>{escape(hardware_label(m, hw))}</h3>"]
    for row in m.rows[hw]:
        g = m.groups[hw, row]
        out.append(
            f"<h4>torch {escape(row[0])} · transformers {escape(row[1])} · gate "
            f"{gate_badge(g)}</h4><div class='cells'>"
        )
        out += [_cell_details(m, g, s) for s in m.strategies[hw] if g.strategy_cells(s)]
        out.append("</div>")
    return out


def _ab_section(m: Matrix) -> list[str]:
    """The A/B comparisons given to the report: one row each, a failure's reason below."""
    if not m.ab:
        return []
    heads = ("comparison", "preset", "what changed", "tokens/s (95%)", "peak memory (95%)",
             "runs", "gate")  # fmt: skip
    out = [
        "<h2>A/B comparisons</h2><p class='n'>Candidate / reference, interleaved runs on one"
        " machine (<code>python -m racegate.harness.ab</code>).</p>",
        "<table><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr>",
    ]
    for a in m.ab:
        t = ab_text(a)
        cls = AB_CLASS.get(t["gate"], "muted")  # a calibration's call: muted, never gated
        cells = (a.path, a.preset, a.change, t["tokens_per_s"], t["memory"], t["runs"])
        out.append(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells)
            + f"<td>{badge(t['gate'], cls)}</td></tr>"
        )  # fmt: skip
    out.append("</table>")
    for a in m.ab_failed:
        why, word = a.result.why_failed or "?", ab_gate_word(a.result)
        out.append(f"<p>{badge(word, AB_CLASS[word])} {escape(a.path)}: {escape(why)}</p>")
    for a in (c for c in m.calibrations if c.result.failed):
        why = a.result.why_failed or "?"
        out.append(f"<p>{badge('calibration', 'muted')} {escape(a.path)}: {escape(why)}</p>")
    if note := ab_note(m):
        out.append(f"<p class='n'>{escape(note[0].upper() + note[1:])}</p>")
    if m.pools:
        out += [
            "<h3>Calibration pools</h3><p class='n'>"
            + re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(POOL_INTRO.format(k=POOL_PER_SIDE)))
            + "</p><table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in POOL_HEADS) + "</tr>",
            *("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in pool_cells(p)) + "</tr>"
              for p in m.pools),
            "</table>",
        ]  # fmt: skip
    return out


def render_html(
    m: Matrix, title: str, inputs: str, legend: list[str], charts: list[Path] = ()
) -> str:
    word = decision(m).word  # the headline's colour: the decision's own word
    n_runs = sum(c.n for c in m.cells.values())
    chart_links = " · ".join(f'<a href="{escape(p.name)}">{escape(p.name)}</a>' for p in charts)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="headline {word.lower()}">{escape(headline(m))}</p>',
        f"<p class='n'>Words: {escape(WORDS_DOC)}</p>",
        f"<p class='n'>Production strategy <code>{escape(m.productions)}</code> · "
        f"{n_runs} runs from {escape(inputs)} · generated "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC · <a href='runs.html'>every run</a>"
        + (f" · tokens/s charts: {chart_links}" if charts else "")
        + "</p>",
    ]
    for hw in m.hardware:
        out += _hardware_section(m, hw)
    out += _ab_section(m)
    out.append(
        "<h2>Details per cell</h2><p class='n'>Unfold a row, then a strategy: cache state"
        " × topology, tokens/s against the floor, errors, and links to each run's record"
        " and stacks in runs.html. A badge in the tables above links to its cell here"
        " (a fold: click it open).</p>"
    )
    for hw in m.hardware:
        out += _details_section(m, hw)
    out.append("<h2>Legend</h2><ul>" + "".join(f"<li>{escape(i)}</li>" for i in legend) + "</ul>")
    out.append("</body></html>\n")
    return "\n".join(out)

"""The report as one self-contained HTML page: inline CSS, no scripts, no external assets."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

from harness.report.build import outcome_text, sections, throughput_text
from harness.report.matrix import Cell, Matrix

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #1f2328; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; vertical-align: top; }
th { background: #f6f8fa; text-align: left; font-weight: 600; }
td.pass { background: #dafbe1; } td.fail { background: #ffebe9; } td.none { color: #8c959f; }
td small { color: #57606a; }
.verdict { font-size: 1.1em; font-weight: 600; }
.verdict.pass { color: #1a7f37; } .verdict.fail { color: #cf222e; }
ul.why { margin: 0; padding-left: 1.2em; }
"""


def _cell_html(cell: Cell | None) -> str:
    if cell is None:
        return '<td class="none">—</td>'
    tip = [f"{cell.n} runs"]
    tip += [
        f"{o}: {p:.0%} [{lo:.0%}–{hi:.0%}] (95% Wilson)" for o, (p, lo, hi) in cell.rates.items()
    ]
    tip += cell.problems()
    lines = [escape(t) for t in outcome_text(cell)]
    tps = throughput_text(cell)
    if tps:
        lines.append(f"<small>{escape(tps)}</small>")
    cls = "pass" if cell.passed else "fail"
    return f'<td class="{cls}" title="{escape(chr(10).join(tip))}">' + "<br>".join(lines) + "</td>"


def render_html(m: Matrix, title: str, inputs: str, legend: list[str]) -> str:
    ok = m.passed
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="verdict {"pass" if ok else "fail"}">Gate: {"passed" if ok else "failed"}</p>',
        f"<p>Production strategy <code>{escape(m.production_strategy)}</code> · "
        f"{sum(c.n for c in m.cells.values())} runs from {escape(inputs)} · generated "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC</p>",
        "<table><tr><th>torch</th><th>transformers</th><th>gate</th><th>why</th></tr>",
    ]
    for row in m.rows:
        g = m.gates[row]
        items = "".join(f"<li>{escape(r)}</li>" for r in g.reasons + g.notes)
        out.append(
            f"<tr><td>{escape(row[0])}</td><td>{escape(row[1])}</td>"
            f'<td class="{"pass" if g.passed else "fail"}">{"pass" if g.passed else "fail"}</td>'
            f'<td><ul class="why">{items}</ul></td></tr>'
        )
    out.append("</table>")
    for preset, strategy, cols in sections(m):
        prod = " (production)" if strategy == m.production_strategy else ""
        out.append(f"<h2>{escape(preset)} · {escape(strategy)}{prod}</h2><table><tr>")
        out.append("<th>torch · transformers</th><th>gate</th>")
        out += [f"<th>{escape(c.label)}</th>" for c in cols]
        out.append("</tr>")
        for row in m.rows:
            g = m.gates[row]
            out.append(
                f"<tr><th>{escape(row[0])} · {escape(row[1])}</th>"
                f'<td class="{"pass" if g.passed else "fail"}">{"pass" if g.passed else "fail"}'
                "</td>" + "".join(_cell_html(m.cells.get((row, c))) for c in cols) + "</tr>"
            )
        out.append("</table>")
    out.append("<h2>Legend</h2><ul>" + "".join(f"<li>{escape(i)}</li>" for i in legend) + "</ul>")
    out.append("</body></html>\n")
    return "\n".join(out)

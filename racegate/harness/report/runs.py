"""runs.html: every run record of a report under an anchor of its own (`#run-N`), with its
outcome, error text and stacks, so a matrix cell can link to the runs behind it."""

from __future__ import annotations

from collections import Counter
from html import escape

from racegate.harness.report.html import CSS, badge
from racegate.harness.report.matrix import Matrix, column_of
from racegate.harness.run.record import RunRecord
from racegate.harness.scenario.vocab import Outcome

MAX_ERROR_CHARS = 1_500  # per distinct error text; the record holds the rest
MAX_STACK_CHARS = 4_000


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit:,} more characters in the record)"


def _run_html(n: int, r: RunRecord, source: str) -> str:
    col = column_of(r)
    ok = r.outcome == Outcome.OK
    tps = f" · {r.tokens_per_s:,.0f} tok/s" if r.tokens_per_s else ""
    timing = "" if r.timed else f" (not timed: {r.why_untimed})"
    head = (
        f"<b>#{n}</b> {badge(str(r.outcome), 'safe' if ok else 'unsafe')} "
        f"{escape(col.preset)} · {escape(col.strategy)} · {escape(col.label)} · "
        f"torch {escape(r.versions.torch)} · "
        f"transformers {escape(r.versions.transformers)}{tps}{timing} · "
        f"{r.wall_s:.0f} s · <code>{escape(source)}</code>"
    )
    out = [f'<section class="run" id="run-{n}"><p>{head}</p>']
    if r.detail:
        out.append(f'<p class="why">{escape(r.detail)}</p>')
    errors = Counter(t.error for t in r.threads if t.error)
    if errors:
        out.append(
            '<ul class="why">'
            + "".join(f"<li>{k} thread(s): {escape(e)}</li>" for e, k in errors.most_common())
            + "</ul>"
        )
    texts = list(dict.fromkeys(t.error_text for t in r.threads if t.error_text))
    for i, text in enumerate(texts, 1):
        label = "error text" + (f" {i} of {len(texts)}" if len(texts) > 1 else "")
        out.append(
            f"<details><summary>{label}</summary><pre>{escape(_cut(text, MAX_ERROR_CHARS))}"
            "</pre></details>"
        )
    if r.stacks:
        out.append(
            f"<details><summary>stacks ({len(r.stacks):,} characters)</summary>"
            f"<pre>{escape(_cut(r.stacks, MAX_STACK_CHARS))}</pre></details>"
        )
    out.append("</section>")
    return "".join(out)


def render_runs(m: Matrix, records: list[RunRecord], sources: list[str], title: str) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}: runs</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}: every run</h1>",
        f"<p>{len(records)} run records, numbered as matrix.html links them; "
        '<a href="matrix.html">back to the matrix</a>.</p>',
    ]
    out += [_run_html(m.run_id(r), r, src) for r, src in zip(records, sources, strict=True)]
    out.append("</body></html>\n")
    return "\n".join(out)

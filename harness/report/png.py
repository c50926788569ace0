"""The throughput chart: tokens/s per matrix cell as bars, each with its floor and tolerance band
drawn (matplotlib's Agg backend: no display needed). One panel per preset.
"""

from __future__ import annotations

from pathlib import Path

from harness.report.matrix import Cell, Matrix

MAX_BARS_PER_PANEL = 120  # beyond this a chart is unreadable; the HTML has every cell


def _cells_by_preset(m: Matrix) -> dict[str, list[Cell]]:
    out: dict[str, list[Cell]] = {}
    for col in m.columns:
        for row in m.rows:
            cell = m.cells.get((row, col))
            if cell and (cell.tokens_per_s or (cell.throughput and cell.throughput.floor)):
                out.setdefault(col.preset, []).append(cell)
    for preset, cells in out.items():  # production strategy first, so a cut keeps it
        cells.sort(key=lambda c: c.column.strategy != m.production_strategy)
        out[preset] = cells[:MAX_BARS_PER_PANEL]
    return out


def plot_throughput(m: Matrix, path: Path, title: str) -> Path:
    # A bare Figure renders through Agg without pyplot's global state (safe in any process).
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    panels = _cells_by_preset(m)
    if not panels:
        fig = Figure(figsize=(7, 1.6))
        ax = fig.subplots()
        ax.axis("off")
        ax.text(0.5, 0.5, "no tokens/s in these records", ha="center", va="center")
        fig.suptitle(title)
        fig.savefig(path, dpi=100)
        return path
    heights = [max(1.5, 0.28 * len(c) + 0.9) for c in panels.values()]
    fig = Figure(figsize=(11, sum(heights) + 1.2), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, gridspec_kw={"height_ratios": heights})
    colors = colormaps["tab10"]
    row_color = {row: colors(i % 10) for i, row in enumerate(m.rows)}
    for ax, (preset, cells) in zip(axes[:, 0], panels.items(), strict=True):
        ys = range(len(cells))
        ax.barh(
            list(ys),
            [c.tokens_per_s or 0 for c in cells],
            color=[row_color[c.row] for c in cells],
            edgecolor=["#cf222e" if not c.passed else "none" for c in cells],
            height=0.7,
        )
        for y, c in zip(ys, cells, strict=True):
            t = c.throughput
            if t and t.floor:
                tol = t.tolerance or 0.0
                ax.fill_betweenx(
                    [y - 0.4, y + 0.4],
                    t.floor * (1 - tol),
                    t.floor * (1 + tol),
                    color="0.5",
                    alpha=0.25,
                    linewidth=0,
                )
                ax.plot([t.floor, t.floor], [y - 0.45, y + 0.45], color="black", linewidth=1.5)
        ax.set_yticks(list(ys))
        ax.set_yticklabels(
            [f"{c.column.strategy} · {c.column.label} — {c.row[0]} / {c.row[1]}" for c in cells],
            fontsize=7,
        )
        ax.invert_yaxis()
        ax.set_title(
            f"{preset}: tokens/s (bar; red edge: cell failed), floor (black) ± tolerance (grey)",
            fontsize=9,
        )
        ax.margins(y=0.01)
        ax.set_xlabel("tokens/s")
        ax.grid(axis="x", alpha=0.3)
    handles = [
        Patch(color=color, label=f"torch {r[0]} · transformers {r[1]}")
        for r, color in row_color.items()
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=8)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    return path

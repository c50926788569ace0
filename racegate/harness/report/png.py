"""The throughput charts: one PNG per preset, each cell's tokens/s as a ratio to its floor with
the floor's tolerance band shaded (matplotlib's Agg backend: no display needed).

Only cells with a floor are drawn (a ratio needs one); one row per scenario, one marker per
hardware × torch × transformers, so a chart stays readable at 1,200 px however many runs.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from racegate.harness.report.matrix import Cell, Column, Matrix, Row
from racegate.harness.run.files import PUBLISHED, write_whole

WIDTH_IN, DPI = 12.0, 100  # 1,200 px wide
MARKERS = "osD^vP*Xhp<>"


def _floored(m: Matrix) -> dict[str, list[Cell]]:
    """preset -> its cells that have a floor and measured tokens/s."""
    out: dict[str, list[Cell]] = {}
    for (_, col), cell in sorted(m.cells.items(), key=lambda kv: kv[0][1]):
        t = cell.throughput
        if t and t.floor and cell.tokens_per_s and not cell.timings_void:
            out.setdefault(col.preset, []).append(cell)
    return out


def chart_path(out_dir: Path, preset: str) -> Path:
    return Path(out_dir) / f"throughput-{re.sub(r'[^A-Za-z0-9_.-]+', '-', preset)}.png"


def _scenario(col: Column) -> tuple[str, ...]:
    return (col.section, col.strategy, col.cache_state, col.schedule, col.topology)


def plot_preset(m: Matrix, preset: str, cells: list[Cell], path: Path, title: str) -> Path:
    # A bare Figure renders through Agg without pyplot's global state (safe in any process).
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    scenarios = sorted({_scenario(c.column) for c in cells}, key=lambda s: (
        s[0], s[1] not in {m.production(hw) for hw in m.hardware}, s[1:]))  # fmt: skip
    versions: list[tuple[str, Row]] = sorted({(c.column.section, c.row) for c in cells})
    colors = colormaps["tab10"]
    style = {
        v: (colors(i % 10), MARKERS[(i // 10 + i) % len(MARKERS)]) for i, v in enumerate(versions)
    }
    height = 1.9 + 0.42 * len(scenarios) + 0.28 * ((len(versions) + 2) // 3)
    fig = Figure(figsize=(WIDTH_IN, height), layout="constrained")
    ax = fig.subplots()
    y_of = {s: i for i, s in enumerate(scenarios)}
    spread = 0.6 / max(1, len(versions))
    xs = [1.0]
    banded: set[int] = set()
    for c in cells:
        t = c.throughput
        assert t and t.floor and c.tokens_per_s  # _floored kept only these
        y = y_of[_scenario(c.column)]
        tol = t.tolerance or 0.0
        if y not in banded:  # one floor key per scenario row, so one band
            banded.add(y)
            ax.fill_betweenx([y - 0.42, y + 0.42], 1 - tol, 1 + tol, color="#2da44e",
                             alpha=0.15, linewidth=0)  # fmt: skip
        xs += [1 - tol, 1 + tol]
        ratio = c.tokens_per_s / t.floor
        xs.append(ratio)
        color, marker = style[c.column.section, c.row]
        dy = (versions.index((c.column.section, c.row)) - (len(versions) - 1) / 2) * spread
        ax.scatter(
            [ratio], [y + dy], s=64, marker=marker, zorder=3, linewidths=1.6,
            facecolors=color if c.passed else "white", edgecolors=color,
        )  # fmt: skip
    ax.axvline(1.0, color="black", linewidth=1)
    lo, hi = min(xs), max(xs)
    pad = (hi - lo) * 0.06 or 0.05
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_yticks(range(len(scenarios)))
    ax.set_yticklabels([f"{s[1]} · {s[2]} · {s[3]} · {s[4]}" for s in scenarios], fontsize=10)
    ax.set_ylim(len(scenarios) - 0.5, -0.5)
    ax.set_xlabel("tokens/s ÷ floor (1.0 = the floor in baselines/<hardware>.json)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{title}: preset {preset}, tokens/s as a ratio to the floor", fontsize=12)
    ax.set_title(
        "green band: the floor's tolerance · hollow marker: the cell failed (outcome, tok/s or"
        " memory)\nnot drawn: cells without a floor, or whose runs overlapped others",
        fontsize=9,
    )
    handles = [
        Line2D([], [], linestyle="none", marker=mk, color=col, markersize=8,
               label=f"{hw} · torch {row[0]} · transformers {row[1]}"[-60:])
        for (hw, row), (col, mk) in style.items()
    ]  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=9, frameon=False)
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI)
    write_whole(path, png.getvalue(), mode=PUBLISHED)  # never through a link at `path`
    return path


def plot_throughput(m: Matrix, out_dir: Path, title: str) -> list[Path]:
    """One chart per preset that has a floored cell; stale charts of other presets removed."""
    written = [
        plot_preset(m, preset, cells, chart_path(out_dir, preset), title)
        for preset, cells in sorted(_floored(m).items())
    ]
    for old in Path(out_dir).glob("throughput-*.png"):
        if old not in written:
            old.unlink()
    return written

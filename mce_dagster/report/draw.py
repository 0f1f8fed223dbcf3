"""The report's pictures as PNG bytes, drawn with matplotlib's Agg backend (no
display, no GUI toolkit). Imported only when a report is written: matplotlib takes
a second to import."""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from .model import Distribution, Rollup  # noqa: E402

DPI = 80
# Bars shown per roll-up chart; the HTML table beside it lists every group.
MAX_GROUPS = 20
COLOR = "#4C72B0"


def _png(fig) -> bytes:
    # Fixed margins, no "tight" bounding box: that costs a second drawing pass per figure.
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    plt.close(fig)
    return buffer.getvalue()


def histogram_png(d: Distribution) -> bytes:
    """One metric's distribution: a bar per bin, the mean (and the pooled ratio) marked."""
    fig, ax = plt.subplots(figsize=(4.6, 2.8))
    fig.subplots_adjust(left=0.14, right=0.97, top=0.89, bottom=0.17)
    h = d.histogram
    widths = [b - a for a, b in zip(h.edges, h.edges[1:])]
    ax.bar(h.edges[:-1], h.counts, width=widths, align="edge", color=COLOR, edgecolor="white", linewidth=0.5)
    ax.axvline(d.summary.mean, color="#C44E52", linewidth=1.2, label=f"mean {d.summary.mean:.4g}")
    if d.summary.pooled is not None:
        ax.axvline(d.summary.pooled, color="#55A868", linewidth=1.2, linestyle="--", label=f"sum/sum {d.summary.pooled:.4g}")
    ax.legend(fontsize=7, frameon=False)
    ax.set_title(f"{d.key}  (n={d.summary.count:,})", fontsize=9)
    ax.set_xlabel(d.unit or "value", fontsize=8)
    ax.set_ylabel("results", fontsize=8)
    ax.tick_params(labelsize=7)
    return _png(fig)


LABEL_CHARS = 24  # longer group names are cut, the table beside the chart has them whole
INCH_PER_CHAR = 0.06  # at the tick font size
BAR_INCH = 0.2
PLOT_WIDTH = 3.0


def rollups_png(rollups: Sequence[Rollup], cut: str) -> bytes:
    """Every metric rolled up per `cut`: one horizontal bar chart per metric, in a grid."""
    charts = []
    for r in rollups:
        # the groups with most results, then by name: an app sits at the same place in every chart
        shown = sorted(r.rows, key=lambda row: (-row.count, row.group))[:MAX_GROUPS]
        shown = sorted((row for row in shown if row.value is not None), key=lambda row: row.group)
        charts.append((r, shown))
    columns = 3
    rows = max(1, -(-len(charts) // columns))
    longest = max((len(row.group[:LABEL_CHARS]) for _, shown in charts for row in shown), default=4)
    label = 0.2 + INCH_PER_CHAR * longest
    plot_height = 0.3 + BAR_INCH * max((len(shown) for _, shown in charts), default=1)
    gap = 0.75  # a title above, tick labels below
    width = columns * (label + PLOT_WIDTH) + 0.2
    height = rows * (plot_height + gap) + 0.65
    fig, axes = plt.subplots(rows, columns, figsize=(width, height), squeeze=False)
    fig.subplots_adjust(
        left=label / width, right=1 - 0.2 / width, top=1 - 0.8 / height, bottom=0.35 / height,
        wspace=label / PLOT_WIDTH, hspace=gap / plot_height,
    )
    for ax, (r, shown) in zip(axes.flat, charts):
        ax.barh([row.group[:LABEL_CHARS] for row in shown], [row.value for row in shown], color=COLOR)
        ax.invert_yaxis()
        more = f", {len(shown)} of {len(r.rows)}" if len(r.rows) > len(shown) else ""
        ax.set_title(f"{r.key} ({r.unit or 'value'}{more})", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(charts):]:
        ax.axis("off")
    fig.suptitle(f"per {cut}", fontsize=10)
    return _png(fig)

"""The report as one standalone HTML file: images inline as base64, styles inline,
nothing fetched from the network. Each roll-up cell carries its exact value in
`data-value`, so a program can read the numbers the page shows."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from html import escape

from ..core.summary import ValueSummary
from .model import Report, Rollup

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; } h3 { font-size: 1em; margin: 1.2em 0 0.3em; }
.grid { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 0; } figcaption { font-size: 0.8em; color: #555; }
table { border-collapse: collapse; font-size: 0.85em; margin-bottom: 1em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; } th:first-child, td:first-child { text-align: left; }
.note { color: #555; font-size: 0.85em; }
"""


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _summary_text(s: ValueSummary) -> str:
    pooled = f", sum/sum {fmt(s.pooled)}" if s.pooled is not None else ""
    return f"n={s.count:,}, mean {fmt(s.mean)}, min {fmt(s.minimum)}, max {fmt(s.maximum)}{pooled}"


def _rollup_table(r: Rollup) -> str:
    ratio = any(row.denominator is not None for row in r.rows)
    head = f"<tr><th>{escape(r.cut)}</th><th>value</th>" + ("<th>numerator</th><th>denominator</th>" if ratio else "") + "<th>results</th></tr>"
    body = []
    for row in r.rows:
        cells = [f"<td>{escape(row.group)}</td>", f'<td class="value" data-value="{"" if row.value is None else repr(float(row.value))}">{fmt(row.value)}</td>']
        if ratio:
            cells += [f"<td>{fmt(row.numerator)}</td>", f"<td>{fmt(row.denominator)}</td>"]
        cells.append(f"<td>{row.count:,}</td>")
        body.append(f'<tr data-group="{escape(row.group)}">' + "".join(cells) + "</tr>")
    return (
        f'<h3>{escape(r.key)} <span class="note">({escape(r.unit or "value")}; {escape(r.rule)})</span></h3>'
        f'<table class="rollup" data-cut="{escape(r.cut)}" data-metric="{escape(r.key)}">{head}{"".join(body)}</table>'
    )


def render(report: Report, histograms: Mapping[str, bytes], rollup_charts: Mapping[str, bytes]) -> str:
    """`histograms`: metric key -> PNG; `rollup_charts`: cut -> PNG."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>MCE evaluation report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Evaluation report</h1>",
        f'<p>{report.sessions:,} evaluated sessions, {report.results:,} results of {len(report.distributions)} metrics; '
        f"generated {escape(report.generated_at)}.",
    ]
    if report.other_versions:
        parts.append(f" {report.other_versions:,} results of older metric versions are left out.")
    parts.append("</p>")
    parts.append("<h2>Distributions</h2><div class='grid'>")
    for d in report.distributions:
        parts.append(
            f'<figure><img class="distribution" data-metric="{escape(d.key)}" alt="{escape(d.key)}" src="{data_uri(histograms[d.key])}">'
            f"<figcaption>{escape(_summary_text(d.summary))}</figcaption></figure>"
        )
    parts.append("</div>")
    for cut in ("app", "agent"):
        rollups = report.rollups_by(cut)
        parts.append(f"<h2>Per {cut}</h2>")
        if not rollups:
            parts.append(f"<p class='note'>No metric with results can be rolled up per {cut}.</p>")
            continue
        parts.append(
            "<p class='note'>Rolled up as the registry query does (mce serve): ratios as sum of numerators over sum of "
            "denominators, never a mean of per-session rates; counts, tokens and costs summed; durations and judged "
            "scores averaged.</p>"
        )
        parts.append(f'<img class="rollup" data-cut="{cut}" alt="per {cut}" src="{data_uri(rollup_charts[cut])}">')
        parts.extend(_rollup_table(r) for r in rollups)
    parts.append("</body></html>")
    return "\n".join(parts)

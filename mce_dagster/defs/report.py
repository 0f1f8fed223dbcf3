"""The evaluation report as an asset: unpartitioned, in its own group, reading
whatever results the graph holds.

It has no upstream asset on purpose: an edge to every metric asset would make each
new session's evaluation mark the report stale and pull every metric into a
"materialize all" selection; the report is a view of the graph, refreshed when asked
(from the UI, `dagster asset materialize --select evaluation_report`, or `mce report`)."""

import dagster as dg

from ..report.build import collect, draw, write_html
from ..report.html import data_uri, fmt
from .resources import KnowledgeGraphResource, LocalFilesResource

EVALUATION_REPORT_KEY = dg.AssetKey(["evaluation_report"])
REPORT_GROUP = "reports"


def _images(pairs) -> dg.MetadataValue:
    """PNG images inline in Markdown, which the UI renders."""
    return dg.MetadataValue.md("\n\n".join(f"**{title}**\n\n![{title}]({data_uri(png)})" for title, png in pairs))


@dg.asset(key=EVALUATION_REPORT_KEY, group_name=REPORT_GROUP, code_version="1", kinds={"html"})
def evaluation_report(
    context: dg.AssetExecutionContext, knowledge_graph: KnowledgeGraphResource, local_files: LocalFilesResource
) -> dg.MaterializeResult:
    """The distribution of each metric over the evaluated sessions, and roll-ups per
    app and per agent (ratios as sum of numerators over sum of denominators, as the
    registry query answers them), as pictures here and as one standalone HTML file
    under $MCE_HOME/reports/."""
    from ..catalog import load_catalog

    with knowledge_graph.retrying(context):
        report = collect(knowledge_graph.open(), load_catalog())
    pictures = draw(report)
    path = write_html(report, pictures, local_files.report_path())
    metadata: dict[str, dg.RawMetadataValue] = {
        "sessions": report.sessions,
        "results": report.results,
        "metrics": len(report.distributions),
        "report": dg.MetadataValue.path(str(path)),
        "distributions": _images((d.key, pictures.histograms[d.key]) for d in report.distributions),
    }
    for cut, png in pictures.rollups.items():
        rows = [f"| {r.key} | {row.group} | {fmt(row.value)} | {row.count} |" for r in report.rollups_by(cut) for row in r.rows]
        table = f"| metric | {cut} | value | results |\n|---|---|---|---|\n" + "\n".join(rows)
        metadata[f"per {cut}"] = dg.MetadataValue.md(f"![per {cut}]({data_uri(png)})\n\n{table}")
    context.log.info(f"evaluation report over {report.sessions} sessions written to {path}")
    return dg.MaterializeResult(metadata=metadata)

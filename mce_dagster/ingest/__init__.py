"""Ingestion: OpenTelemetry span exports (the ClickHouse exporter's layout, or
OTLP JSON converted to it: see `reader`) -> the knowledge graph. The rules a row
is placed by are in `pipeline`; `in_memory` maps small inputs without writing."""

from .in_memory import build_graphs, collect_spans
from .pipeline import MAX_BATCH_BYTES, MAX_LISTED, ingest_paths
from .report import IngestReport, RowProblem

__all__ = ["MAX_BATCH_BYTES", "MAX_LISTED", "IngestReport", "RowProblem", "build_graphs", "collect_spans", "ingest_paths"]

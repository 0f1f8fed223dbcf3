"""Results read back from the graph: as rows and tables (`tables`), rolled up and cut
for agents (`query`), and the check of numbers written from them (`verify`)."""

from .tables import (
    COLUMN_TYPES,
    RESULT_FIELDS,
    TABLE_FORMATS,
    MetricSummary,
    ResultSelection,
    TableWriter,
    arrow_schema,
    frame,
    record_batch,
    summarize,
    to_public,
    to_record,
    top_sessions,
)

__all__ = [
    "COLUMN_TYPES",
    "RESULT_FIELDS",
    "TABLE_FORMATS",
    "MetricSummary",
    "ResultSelection",
    "TableWriter",
    "arrow_schema",
    "frame",
    "record_batch",
    "summarize",
    "to_public",
    "to_record",
    "top_sessions",
]

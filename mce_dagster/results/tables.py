"""Results read back from the graph, in the shape the CLI and the client show, and
as tables (Parquet, CSV, a pandas DataFrame) with the same columns."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.summary import summarize_values

if TYPE_CHECKING:
    import pandas
    import pyarrow

RESULT_FIELDS: tuple[tuple[str, str], ...] = (
    ("metric", "name"),
    ("provider", "provider"),
    ("scope", "scope"),
    ("entity_id", "entityId"),
    ("session_id", "sessionId"),
    ("value", "result"),
    ("numerator", "numerator"),
    ("denominator", "denominator"),
    ("reasoning", "reasoning"),
    ("method", "evaluationMethod"),
    ("evaluation_model", "evaluationModel"),
    ("evaluation_prompt_tokens", "evaluationPromptTokenCount"),
    ("evaluation_completion_tokens", "evaluationCompletionTokenCount"),
    ("evaluation_total_tokens", "evaluationTotalTokenCount"),
    ("evaluation_cost", "evaluationCost"),
    ("metric_version", "metricVersion"),
    ("computed_at", "computedAt"),
    ("metadata", "metadata"),
    ("run_id", "runId"),
    ("id", "id"),
)


def to_public(props: Mapping[str, Any]) -> dict[str, Any]:
    """One MetricResult node as a flat record (null where not applicable)."""
    return {public: props.get(graph) for public, graph in RESULT_FIELDS}


# -- results as a table ---------------------------------------------------------------

# The type of each column of a table of results: the keys and values of
# `mce kg metric get --json`, metadata (a JSON object there) as its JSON text.
COLUMN_TYPES: dict[str, str] = {
    "metric": "string",
    "provider": "string",
    "scope": "string",
    "entity_id": "string",
    "session_id": "string",
    "value": "float",
    "numerator": "float",
    "denominator": "float",
    "reasoning": "string",
    "method": "string",
    "evaluation_model": "string",
    "evaluation_prompt_tokens": "int",
    "evaluation_completion_tokens": "int",
    "evaluation_total_tokens": "int",
    "evaluation_cost": "float",
    "metric_version": "int",
    "computed_at": "float",
    "metadata": "json",
    "run_id": "string",
    "id": "string",
}
assert tuple(COLUMN_TYPES) == tuple(public for public, _ in RESULT_FIELDS)
TABLE_FORMATS = ("parquet", "csv")
_CASTS = {"string": str, "float": float, "int": int, "json": lambda v: json.dumps(v, ensure_ascii=False)}


def to_record(row: Mapping[str, Any]) -> dict[str, Any]:
    """A public result as a table row: each value as its column's type, null kept."""
    return {k: None if row.get(k) is None else _CASTS[kind](row[k]) for k, kind in COLUMN_TYPES.items()}


@dataclass(frozen=True)
class ResultSelection:
    """Which results a table holds: the sessions (with how many results each holds,
    in the order they are read), and the metrics (`Scope/provider.Name`) or scopes
    kept, None for all."""

    sessions: tuple[tuple[str, int], ...]
    keys: tuple[str, ...] | None = None
    scopes: tuple[str, ...] | None = None

    def batches(self, max_rows: int) -> Iterator[list[str]]:
        """Consecutive sessions holding at most `max_rows` results together (a
        session holding more is a batch of its own), so a batch bounds memory."""
        batch: list[str] = []
        held = 0
        for session_id, results in self.sessions:
            if batch and held + results > max_rows:
                yield batch
                batch, held = [], 0
            batch.append(session_id)
            held += results
        if batch:
            yield batch


def arrow_schema() -> "pyarrow.Schema":
    import pyarrow as pa

    types = {"string": pa.string(), "float": pa.float64(), "int": pa.int64(), "json": pa.string()}
    return pa.schema([(name, types[kind]) for name, kind in COLUMN_TYPES.items()])


def record_batch(rows: Sequence[Mapping[str, Any]], schema: "pyarrow.Schema") -> "pyarrow.RecordBatch":
    import pyarrow as pa

    return pa.RecordBatch.from_pylist([to_record(r) for r in rows], schema=schema)


class TableWriter:
    """Batches of public results appended to a Parquet or CSV file; the file has the
    schema (and, in CSV, the header) even when no batch comes."""

    def __init__(self, path: Path, fmt: str):
        import pyarrow.csv
        import pyarrow.parquet

        self.schema = arrow_schema()
        self.rows = 0
        if fmt == "parquet":
            self._writer: Any = pyarrow.parquet.ParquetWriter(str(path), self.schema)
        else:
            self._writer = pyarrow.csv.CSVWriter(str(path), self.schema)

    def write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._writer.write_batch(record_batch(rows, self.schema))
            self.rows += len(rows)

    def close(self) -> None:
        self._writer.close()


def frame(batches: Iterable[Sequence[Mapping[str, Any]]]) -> "pandas.DataFrame":
    """Public results as a DataFrame with the table's columns, in pandas' nullable
    dtypes: the frame `pandas.read_parquet(path, dtype_backend="numpy_nullable")`
    gives of the exported file."""
    import pandas as pd
    import pyarrow as pa

    schema = arrow_schema()
    table = pa.Table.from_batches([record_batch(rows, schema) for rows in batches if rows], schema=schema)
    dtypes = {pa.string(): pd.StringDtype(), pa.float64(): pd.Float64Dtype(), pa.int64(): pd.Int64Dtype()}
    return table.to_pandas(types_mapper=dtypes.get)


@dataclass(frozen=True)
class MetricSummary:
    metric: str
    scope: str
    evaluated: int
    mean: float
    minimum: float
    maximum: float
    pooled: float | None  # sum(numerator) / sum(denominator), for ratios


def summarize(results: Iterable[Mapping[str, Any]]) -> list[MetricSummary]:
    """Per (scope, metric): count, mean, min, max; ratios also rolled up as sum over sum."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in results:
        groups[(r["scope"], r["metric"])].append(r)
    out = []
    for (scope, metric), rows in sorted(groups.items(), key=lambda kv: (kv[0][0] != "Session", kv[0])):
        s = summarize_values((r["value"], r.get("numerator"), r.get("denominator")) for r in rows)
        out.append(MetricSummary(metric, scope, s.count, s.mean, s.minimum, s.maximum, s.pooled))
    return out


def top_sessions(results: Iterable[Mapping[str, Any]], metric: str, n: int = 5) -> list[tuple[str, float]]:
    rows = [(r["session_id"], float(r["value"])) for r in results if r["metric"] == metric and r["scope"] == "Session"]
    rows.sort(key=lambda x: (-x[1], x[0]))
    return [r for r in rows[:n] if r[1] > 0]

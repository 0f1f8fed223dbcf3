"""What the interfaces do, once: the CLI, the Python API (and any server over them)
call these functions and carry no logic of their own.

Each function opens what it needs from the settings and returns plain data; errors a
user can fix are `MCEError`s. Dagster is imported only by the functions that
evaluate, so reading results or ingesting starts fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core.ontology import Label, Scope
from .errors import InputError, UnknownMetricError, UnknownSessionError
from .files import partial_path, private_file
from .graph import KnowledgeGraph, describe, open_graph, stop_embedded_server
from .results import TABLE_FORMATS, ResultSelection, TableWriter, frame, to_public

if TYPE_CHECKING:
    import pandas

    from .catalog import Catalog, CatalogMetric
    from .ingest import IngestReport
    from .report.model import Report
    from .runner import ComputeOutcome


def catalog() -> "Catalog":
    from .catalog import load_catalog

    return load_catalog()


# -- ingestion and evaluation -------------------------------------------------


def ingest(
    paths: Sequence[Path | str],
    batch_size: int = 200,
    replace: bool = False,
    kg: KnowledgeGraph | None = None,
    on_sessions: Callable[[int], None] | None = None,
) -> "IngestReport":
    """Span exports into the graph; `replace` rebuilds sessions already stored;
    `on_sessions(n)` is told each batch of sessions written (a progress bar)."""
    from .ingest import ingest_paths

    graph: Any = kg or open_graph()
    if on_sessions is not None:
        graph = _CountingWrites(graph, on_sessions)
    return ingest_paths([Path(p) for p in paths], graph, batch_size=batch_size, replace=replace)


class _CountingWrites:
    """The graph, telling `on_sessions(n)` of each batch of sessions written: how far
    an ingest is, whose session count is known only once its files are read."""

    def __init__(self, kg: KnowledgeGraph, on_sessions: Callable[[int], None]):
        self._kg, self._on_sessions = kg, on_sessions

    def write_sessions(self, sessions: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        written = self._kg.write_sessions(sessions, *args, **kwargs)
        self._on_sessions(len(sessions))
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kg, name)


def parse_metric_list(text: str | None) -> list[str] | None:
    """`--metrics Duration,Session/Cost` -> names; None (every enabled metric) when
    absent. A list that names nothing (`","`) is refused, not read as "all"."""
    if text is None:
        return None
    from .catalog import MetricRef

    names = [m.strip() for m in text.split(",") if m.strip()]
    for name in names:
        MetricRef.parse(name)  # a malformed name fails before anything runs
    if not names:
        raise UnknownMetricError(f"--metrics {text!r} names no metric (leave it out to run every enabled metric)")
    return names


def sessions_to_evaluate(session_ids: Sequence[str], all_sessions: bool, kg: KnowledgeGraph | None = None) -> list[str]:
    if all_sessions == bool(session_ids):
        raise InputError("give session ids or --all (not both)")
    ids = (kg or open_graph()).session_ids() if all_sessions else list(dict.fromkeys(session_ids))
    if not ids:
        raise InputError("no session to evaluate: the knowledge graph holds none (ingest traces first)")
    return ids


def compute(
    session_ids: Sequence[str],
    metrics: Sequence[str] | None = None,
    budget_usd: float | None = None,
    on_run: Callable[[int], None] | None = None,
    quiet: bool = True,
    workers: int | None = None,
) -> "ComputeOutcome":
    """Evaluate the enabled metrics (or `metrics` and what they depend on) through
    the Dagster definitions; results land in the graph. `budget_usd`: a ceiling on
    judge spend over the whole call (else MCE_JUDGE_BUDGET_USD); `on_run(n)`: told
    each finished run's sessions; `quiet`: Dagster's run log shows warnings only;
    `workers`: runs at once, each in a process of its own (else the engine setting)."""
    from .runner import compute_sessions
    from .settings import Settings

    if budget_usd is None:
        budget_usd = Settings.from_env().judge.budget_usd
    if budget_usd is not None and budget_usd < 0:
        raise InputError(f"--budget {budget_usd} must be 0 or more (USD)")
    if workers is not None and workers < 1:
        raise InputError(f"--workers {workers} must be 1 or more")
    return compute_sessions(session_ids, metrics, budget_usd=budget_usd, on_run=on_run, quiet=quiet, workers=workers)


# -- reading results ------------------------------------------------------------


def results(
    session_id: str,
    metric_ids: Sequence[str] | None = None,
    recursive: bool = False,
    kg: KnowledgeGraph | None = None,
) -> list[dict[str, Any]]:
    """Results stored for the session: Session-scope ones, or with `recursive`
    those of every call in it too. `metric_ids` filters by name (`Duration`)
    or `provider.name`. `session_id` may be the raw platform id; one the graph
    does not hold is an error."""
    kg = kg or open_graph()
    rows = session_results([stored_session_id(session_id, kg)], kg)
    if not recursive:
        rows = [r for r in rows if r["scope"] == Scope.SESSION.value]
    if metric_ids:
        from .catalog import MetricRef
        from .core.metric import DependencyKey

        refs = [MetricRef.parse(t) for t in metric_ids]
        rows = [r for r in rows if any(ref.matches(DependencyKey(Scope(r["scope"]), r["metric"], r["provider"])) for ref in refs)]
    return rows


def session_results(session_ids: Sequence[str], kg: KnowledgeGraph | None = None) -> list[dict[str, Any]]:
    """Every result stored for the sessions, at every scope."""
    return [to_public(p) for p in (kg or open_graph()).read_results(list(session_ids))]


def list_sessions(
    app: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    evaluated: bool | None = None,
    kg: KnowledgeGraph | None = None,
) -> list[dict[str, Any]]:
    """Sessions in the graph by start time: id, app, start and end (Unix seconds) and
    how many results each holds. `since`/`until`: ISO 8601 or a datetime (UTC unless
    it says otherwise) on the session's start, half-open; `evaluated`: only those
    holding results (True) or none (False)."""
    t_since, t_until = parse_window(since, until)
    rows = (kg or open_graph()).select_sessions(app=app, since=t_since, until=t_until, evaluated=evaluated)
    return [
        {"session_id": r["id"], "app": r["app"], "start_time": r["startTime"], "end_time": r["endTime"], "results": int(r["results"])}
        for r in rows
    ]


# -- results as tables (Parquet, CSV, pandas) ---------------------------------------

# Results read per query and held at once while exporting: whole sessions up to
# this many results (a session holding more is read alone).
EXPORT_BATCH_ROWS = 10_000


def parse_time(value: str | datetime | None, name: str) -> float | None:
    """ISO 8601 text or a datetime (UTC unless it says otherwise) -> Unix seconds."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InputError(f"{name} {value!r} is not an ISO 8601 date or time (as in 2025-03-01 or 2025-03-01T12:00:00Z)") from None
    if not isinstance(value, datetime):
        raise InputError(f"{name} {value!r} is not an ISO 8601 date or time")
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()


def parse_window(since: str | datetime | None, until: str | datetime | None) -> tuple[float | None, float | None]:
    start, end = parse_time(since, "since"), parse_time(until, "until")
    if start is not None and end is not None and start >= end:
        raise InputError(f"since ({since}) must be before until ({until})")
    return start, end


def split_names(values: str | Iterable[str] | None) -> list[str]:
    """Names given repeated or as comma lists (`Duration,Cost`), in order, once each."""
    if values is None:
        return []
    items = [values] if isinstance(values, str) else list(values)
    return list(dict.fromkeys(n.strip() for item in items for n in item.split(",") if n.strip()))


def _scopes(values: str | Iterable[str] | None) -> list[Scope]:
    scopes = []
    for text in split_names(values):
        try:
            scopes.append(Scope(text))
        except ValueError:
            known = ", ".join(s.value for s in Scope)
            raise UnknownMetricError(f"unknown scope {text!r} (scopes: {known})") from None
    return scopes


def _resolve(name: str, scopes: Sequence[Scope]) -> list["CatalogMetric"]:
    """The metrics a name stands for, at the scopes given where it is defined; an
    error naming it when it stands for none."""
    if not scopes:
        return catalog().resolve(name)
    found: list[CatalogMetric] = []
    refused: UnknownMetricError | None = None
    for scope in scopes:
        try:
            found.extend(catalog().resolve(name, scope))
        except UnknownMetricError as exc:
            refused = exc
    if not found and refused is not None:
        raise refused
    return found


def select_results(
    metrics: str | Iterable[str] | None = None,
    scopes: str | Iterable[str] | None = None,
    sessions: str | Iterable[str] | None = None,
    app: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    kg: KnowledgeGraph | None = None,
) -> ResultSelection:
    """Which stored results the filters keep. `metrics`: names as the catalog
    resolves them (Name, provider.Name, Scope/Name), at every scope they are
    defined at or at `scopes`; `sessions`: ids, each one the graph must hold;
    `since`/`until`: on the session's start time (see list_sessions)."""
    kg = kg or open_graph()
    scope_list = _scopes(scopes)
    keys = [f"{m.scope.value}/{m.provider}.{m.name}" for name in split_names(metrics) for m in _resolve(name, scope_list)]
    t_since, t_until = parse_window(since, until)
    ids = split_names(sessions) or None
    if ids:
        stored = kg.resolve_sessions(ids)
        missing = [i for i in ids if i not in stored]
        if missing:
            raise UnknownSessionError(missing)
        ids = list(dict.fromkeys(stored[i] for i in ids))
    rows = kg.select_sessions(ids=ids, app=app, since=t_since, until=t_until, evaluated=True)
    # By id, the order each batch's query sorts in, so the rows' order does not
    # depend on where batches end.
    return ResultSelection(
        sessions=tuple(sorted((r["id"], int(r["results"])) for r in rows)),
        keys=tuple(dict.fromkeys(keys)) or None,
        scopes=None if keys else tuple(s.value for s in scope_list) or None,
    )


def result_batches(
    selection: ResultSelection, batch_rows: int = EXPORT_BATCH_ROWS, kg: KnowledgeGraph | None = None
) -> Iterator[tuple[list[str], list[dict[str, Any]]]]:
    """The selected results, one query per batch of sessions: (the batch's
    sessions, their results as `results()` gives them)."""
    kg = kg or open_graph()
    for ids in selection.batches(batch_rows):
        rows = kg.select_results(ids, keys=selection.keys, scopes=selection.scopes)
        yield ids, [to_public(p) for p in rows]


@dataclass(frozen=True)
class ExportReport:
    path: Path
    format: str
    rows: int
    sessions: int  # sessions with at least one row in the file


def export_results(
    selection: ResultSelection,
    output: Path | str,
    fmt: str = "parquet",
    batch_rows: int = EXPORT_BATCH_ROWS,
    on_batch: Callable[[int], None] | None = None,
    kg: KnowledgeGraph | None = None,
) -> ExportReport:
    """The selected results into one Parquet or CSV file, one row per result, written
    batch by batch. The file replaces `output` once complete, and has the columns
    even when no result is selected. `on_batch(n)` is told each batch's sessions."""
    if fmt not in TABLE_FORMATS:
        raise InputError(f"format {fmt!r} is not one of {', '.join(TABLE_FORMATS)}")
    output = Path(output)
    if output.is_dir() or not output.parent.is_dir():
        raise InputError(f"cannot write {output}: " + ("it is a directory" if output.is_dir() else f"the directory {output.parent} does not exist"))
    partial = partial_path(output)  # unique: two exports to one file do not mix their rows
    try:
        # Created owner-only before a row is in it: pyarrow truncates it and keeps its mode.
        writer = TableWriter(private_file(partial), fmt)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise InputError(f"cannot write {output}: {exc}") from None
    sessions = 0
    try:
        for ids, rows in result_batches(selection, batch_rows, kg):
            writer.write(rows)
            sessions += len({r["session_id"] for r in rows})
            if on_batch:
                on_batch(len(ids))
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    writer.close()
    partial.replace(output)
    return ExportReport(output, fmt, writer.rows, sessions)


def results_frame(
    metrics: str | Iterable[str] | None = None,
    scopes: str | Iterable[str] | None = None,
    sessions: str | Iterable[str] | None = None,
    app: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    kg: KnowledgeGraph | None = None,
) -> "pandas.DataFrame":
    """The results `export_results` would write for these filters, as a DataFrame."""
    selection = select_results(metrics, scopes, sessions, app, since, until, kg=kg)
    return frame(rows for _, rows in result_batches(selection, kg=kg))


# -- the evaluation report ------------------------------------------------------------


def write_report(
    output: Path | str | None = None, on_batch: Callable[[int], None] | None = None, kg: KnowledgeGraph | None = None
) -> tuple[Path, "Report"]:
    """The evaluation report (distributions, roll-ups per app and per agent) over every
    evaluated session, as one standalone HTML file: `output`, else
    $MCE_HOME/reports/evaluation_report.html. The file's path and the numbers."""
    from .report.build import REPORT_PATH, collect, draw, write_html
    from .settings import Settings

    report = collect(kg or open_graph(), catalog(), on_batch=on_batch)
    path = Path(output) if output is not None else Settings.from_env().mce_home / REPORT_PATH
    return write_html(report, draw(report), path), report


# -- the graph -------------------------------------------------------------------


@dataclass(frozen=True)
class GraphStatus:
    where: str
    sessions: int
    results: int
    # session id -> label -> calls naming a session the graph has no Session node for
    orphans: dict[str, dict[str, int]]

    @property
    def calls_without_session(self) -> int:
        return sum(sum(by_label.values()) for by_label in self.orphans.values())


def graph_status() -> GraphStatus:
    kg = open_graph()
    return GraphStatus(describe(), kg.count_sessions(), kg.count_results(), kg.calls_without_session())


def calls_without_session(kg: KnowledgeGraph | None = None) -> dict[str, dict[str, int]]:
    """Session id -> call label -> calls that name a session the graph holds no
    Session node for (the platform writes none for a trace with no agent span):
    they are not evaluated."""
    return (kg or open_graph()).calls_without_session()


def stop_graph() -> bool:
    return stop_embedded_server()


@dataclass
class GraphCheck:
    """Every graph property the catalog's metrics read, resolved against the graph."""

    metrics: int = 0
    checked: int = 0
    missing: list[str] = field(default_factory=list)  # required and absent: metrics cannot run
    unset: list[str] = field(default_factory=list)  # optional, set on no node sampled
    empty_labels: list[str] = field(default_factory=list)  # no nodes yet to check
    labels: list[str] = field(default_factory=list)  # every label the catalog reads

    @property
    def empty(self) -> bool:
        """The graph holds no node of any label the catalog reads: nothing was checked."""
        return set(self.labels) <= set(self.empty_labels)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.empty


def check_graph(kg: KnowledgeGraph | None = None) -> GraphCheck:
    from .core.models import NODE_MODELS

    kg = kg or open_graph()
    definitions = sorted(catalog().definitions.values(), key=lambda d: d.name)
    report = GraphCheck(metrics=len(definitions))
    seen: dict[Label, set[str]] = {}
    for d in definitions:
        for label, props in d.requires.items():
            keys = seen.setdefault(label, kg.property_keys(label))
            fields = NODE_MODELS[label].model_fields
            for prop in props:
                if not keys:  # no node of that label to resolve it against
                    continue
                report.checked += 1
                if prop in keys:
                    continue
                # An optional property may be absent everywhere (no call failed, say).
                (report.missing if fields[prop].is_required() else report.unset).append(f"{d.name}: {label.value}.{prop}")
    report.empty_labels = sorted(label.value for label, keys in seen.items() if not keys)
    report.labels = sorted(label.value for label in seen)
    return report


# -- agents: the registry queries and the check of answers (mce serve) --------------


def list_metrics() -> list[dict[str, Any]]:
    """What exists: name, provider, scopes, unit and one line, per metric."""
    from .results.query import metric_summary

    return [metric_summary(d) for d in sorted(catalog().definitions.values(), key=lambda d: (d.provider, d.name))]


def get_metric(metric: str) -> dict[str, Any]:
    """What one metric means: caveats, range, version, how it rolls up, allowed cuts."""
    from .results.query import find_definition, metric_detail

    return metric_detail(find_definition(catalog(), metric)[0])


def query_metric(
    metric: str,
    scope: str | None = "Session",
    session_id: str | None = None,
    app: str | None = None,
    agent: str | None = None,
    since: str | None = None,
    until: str | None = None,
    by: str | None = None,
    kg: KnowledgeGraph | None = None,
) -> dict[str, Any]:
    """One metric's stored results, for a session or rolled up, cut by at most one
    allowed dimension; kept under MCE_HOME by its result id (see results.query)."""
    from .results import query
    from .settings import Settings

    kg = kg or open_graph()
    if session_id is not None:
        session_id = stored_session_id(session_id, kg)
    answer = query.query_metric(kg, catalog(), metric, scope, session_id, app, agent, since, until, by)
    vocabulary = {kind: sorted(names) for kind, names in kg.result_vocabulary().items()}
    settings = Settings.from_env()
    query.save_result(settings.mce_home, answer, vocabulary, keep=settings.query_results_kept)
    return answer


def verify_answer(result_id: str, text: str, scoped: bool = True) -> dict[str, Any]:
    """Every number of `text` checked against the stored result `result_id`."""
    from .results.query import load_result
    from .results.verify import verify
    from .settings import Settings

    return verify(load_result(Settings.from_env().mce_home, result_id), text, scoped=scoped)


def prepare_submissions(workspace: Path | None = None) -> None:
    """Before serving: the instance queues what is submitted (or a ConfigurationError
    says why not), and runs are created from the code location of `workspace` (a
    workspace file, as the daemon loads it) or else the project's definitions."""
    from . import queued
    from .runner import dagster_instance

    queued.check_instance(dagster_instance())
    queued.use_workspace(workspace)


def submit_compute(session_ids: Sequence[str], metrics: Sequence[str] | None = None) -> list[str]:
    """Queue the evaluation as Dagster runs through the instance (see `queued`): the
    run ids, at once; the instance's daemon launches them."""
    from .queued import submit

    if not session_ids:
        raise InputError("session_ids: give at least one session id")
    if metrics is not None:
        for name in metrics:
            catalog().resolve(name)  # an unknown metric fails before any run exists
    return submit(session_ids, metrics)


def run_report(run_id: str) -> dict[str, Any] | None:
    """A submitted run's status and, once done, its sessions' results (None: no such run)."""
    from .queued import run_status

    out = run_status(run_id)
    if out is not None and out["done"]:
        out["results"] = [r for sid in out["sessions"] for r in results(sid)]
    return out


def status() -> dict[str, Any]:
    """Whether the graph and the Dagster instance are reachable (and how its run queue
    stands), and the versions."""
    import platform
    from importlib.metadata import version

    from .settings import Settings

    out: dict[str, Any] = {"versions": {"mce-dagster": version("mce-dagster"), "python": platform.python_version()}}
    try:
        kg = open_graph()
        out["graph"] = {"reachable": True, "where": describe(), "sessions": kg.count_sessions(), "results": kg.count_results()}
    except Exception as exc:  # reported, not raised: this is the health check
        out["graph"] = {"reachable": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    try:
        from .queued import queue_status
        from .runner import dagster_instance

        instance = dagster_instance()
        out["instance"] = {
            "reachable": True, "dagster_home": str(Settings.from_env().dagster_home), "runs": instance.get_runs_count(),
            "queue": queue_status(instance),
        }
        out["versions"]["dagster"] = version("dagster")
    except Exception as exc:
        out["instance"] = {"reachable": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return out


def stored_session_id(session_id: str, kg: KnowledgeGraph | None = None) -> str:
    """The id the graph stores the session under: itself, or for a raw platform id
    (`<app>_<uuid>`) the bare one. UnknownSessionError when it holds none."""
    stored = (kg or open_graph()).resolve_sessions([session_id])
    if session_id not in stored:
        raise UnknownSessionError([session_id])
    return stored[session_id]


def unknown_sessions(session_ids: Sequence[str], kg: KnowledgeGraph | None = None) -> list[str]:
    """The given sessions the graph does not hold (a raw platform id is held when
    its session is, see KnowledgeGraph.resolve_sessions)."""
    known = (kg or open_graph()).resolve_sessions(list(session_ids))
    return [s for s in session_ids if s not in known]

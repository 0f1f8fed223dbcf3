"""What the interfaces do, once: the CLI, the Python API (and any server over them)
call these functions and carry no logic of their own.

Each function opens what it needs from the settings and returns plain data; errors a
user can fix are `MCEError`s. Dagster is imported only by the functions that
evaluate, so reading results or ingesting starts fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core.ontology import Label, Scope
from .errors import InputError, UnknownMetricError
from .graph import KnowledgeGraph, describe, open_graph, stop_embedded_server
from .results import to_public

if TYPE_CHECKING:
    from .catalog import Catalog
    from .ingest import IngestReport
    from .runner import ComputeOutcome


def catalog() -> "Catalog":
    from .catalog import load_catalog

    return load_catalog()


# -- ingestion and evaluation -------------------------------------------------


def ingest(
    paths: Sequence[Path | str], batch_size: int = 200, replace: bool = False, kg: KnowledgeGraph | None = None
) -> "IngestReport":
    """Span exports into the graph; `replace` rebuilds sessions already stored."""
    from .ingest import ingest_paths

    return ingest_paths([Path(p) for p in paths], kg or open_graph(), batch_size=batch_size, replace=replace)


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
    session_ids: Sequence[str], metrics: Sequence[str] | None = None, budget_usd: float | None = None
) -> "ComputeOutcome":
    """Evaluate the enabled metrics (or `metrics` and what they depend on) through
    the Dagster definitions; results land in the graph. `budget_usd`: a ceiling on
    judge spend over the whole call (else MCE_JUDGE_BUDGET_USD)."""
    from .runner import compute_sessions
    from .settings import Settings

    if budget_usd is None:
        budget_usd = Settings.from_env().judge.budget_usd
    if budget_usd is not None and budget_usd < 0:
        raise InputError(f"--budget {budget_usd} must be 0 or more (USD)")
    return compute_sessions(session_ids, metrics, budget_usd=budget_usd)


# -- reading results ------------------------------------------------------------


def results(
    session_id: str,
    metric_ids: Sequence[str] | None = None,
    recursive: bool = False,
    kg: KnowledgeGraph | None = None,
) -> list[dict[str, Any]]:
    """Results stored for the session: Session-scope ones, or with `recursive`
    those of every call in it too. `metric_ids` filters by name (`Duration`)
    or `provider.name`."""
    rows = session_results([session_id], kg)
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


# -- the graph -------------------------------------------------------------------


@dataclass(frozen=True)
class GraphStatus:
    where: str
    sessions: int
    results: int


def graph_status() -> GraphStatus:
    kg = open_graph()
    return GraphStatus(describe(), kg.count_sessions(), kg.count_results())


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

    @property
    def ok(self) -> bool:
        return not self.missing


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
                report.checked += 1
                if not keys or prop in keys:
                    continue
                # An optional property may be absent everywhere (no call failed, say).
                (report.missing if fields[prop].is_required() else report.unset).append(f"{d.name}: {label.value}.{prop}")
    report.empty_labels = sorted(label.value for label, keys in seen.items() if not keys)
    return report


# -- agents: the registry queries and the check of answers (mce serve) --------------


def list_metrics() -> list[dict[str, Any]]:
    """What exists: name, provider, scopes, unit and one line, per metric."""
    from .serve.query import metric_summary

    return [metric_summary(d) for d in sorted(catalog().definitions.values(), key=lambda d: (d.provider, d.name))]


def get_metric(metric: str) -> dict[str, Any]:
    """What one metric means: caveats, range, version, how it rolls up, allowed cuts."""
    from .serve.query import find_definition, metric_detail

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
    allowed dimension; kept under MCE_HOME by its result id (see serve.query)."""
    from .serve import query
    from .settings import Settings

    kg = kg or open_graph()
    answer = query.query_metric(kg, catalog(), metric, scope, session_id, app, agent, since, until, by)
    vocabulary = {kind: sorted(names) for kind, names in kg.result_vocabulary().items()}
    query.save_result(Settings.from_env().mce_home, answer, vocabulary)
    return answer


def verify_answer(result_id: str, text: str, scoped: bool = True) -> dict[str, Any]:
    """Every number of `text` checked against the stored result `result_id`."""
    from .serve.query import load_result
    from .serve.verify import verify
    from .settings import Settings

    return verify(load_result(Settings.from_env().mce_home, result_id), text, scoped=scoped)


def submit_compute(session_ids: Sequence[str], metrics: Sequence[str] | None = None) -> list[str]:
    """Submit the evaluation as Dagster runs through the instance, executed by worker
    processes (serve.runs): the run ids, at once."""
    from .serve.runs import submit

    if not session_ids:
        raise InputError("session_ids: give at least one session id")
    if metrics is not None:
        for name in metrics:
            catalog().resolve(name)  # an unknown metric fails before any run exists
    return submit(session_ids, metrics)


def run_report(run_id: str) -> dict[str, Any] | None:
    """A submitted run's status and, once done, its sessions' results (None: no such run)."""
    from .serve.runs import report

    return report(run_id)


def status() -> dict[str, Any]:
    """Whether the graph and the Dagster instance are reachable, and the versions."""
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
        from .runner import dagster_instance

        instance = dagster_instance()
        out["instance"] = {"reachable": True, "dagster_home": str(Settings.from_env().dagster_home), "runs": instance.get_runs_count()}
        out["versions"]["dagster"] = version("dagster")
    except Exception as exc:
        out["instance"] = {"reachable": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return out


def unknown_sessions(session_ids: Sequence[str], kg: KnowledgeGraph | None = None) -> list[str]:
    """The given sessions the graph does not hold."""
    known = (kg or open_graph()).existing_sessions(list(session_ids))
    return [s for s in session_ids if s not in known]

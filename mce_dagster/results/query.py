"""The registry query: one metric's stored results, for a session or rolled up over
an app, an agent or a time window, cut by at most one dimension of the metric's
allow-list (`cuts:` in its definition).

How a metric rolls up is decided by its definition, never by the caller: a ratio
(and an aggregate mean, which stores its sum and count) as sum of numerators over sum
of denominators, with both returned; counts, tokens and costs summed; durations and
judged scores as a mean with its count; an aggregate max or min as the max or min.
Anything not allowed (a metric, a scope, a cut, a filter) is refused with what is
allowed, never approximated. Every answer is kept under MCE_HOME by its result id,
so `verify_answer` can check a sentence against it after a restart: the id is the
digest of the question and the answer, so asking again keeps no second copy, and
only the most recently saved answers are kept (MCE_QUERY_RESULTS_KEPT).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ..catalog import CUT_SCOPE, Catalog, MetricDefinition, MetricRef
from ..core.ontology import Scope
from ..errors import InputError, UnknownMetricError, shown
from ..files import private_folder, write_text_atomically
from ..graph import KnowledgeGraph

#: the folder under MCE_HOME that keeps answered queries, by result id
RESULTS_DIR = "query_results"
_RESULT_ID = re.compile(r"^[0-9a-f]{32}$")
DAY_S = 86400.0


class QueryRefused(InputError):
    """A query the registry does not answer; `allowed` is what it would answer."""

    def __init__(self, message: str, field: str, allowed: list[str] | None = None):
        super().__init__(message)
        self.field = field
        self.allowed = list(allowed or [])

    def as_json(self) -> dict[str, Any]:
        return {"error": str(self), "field": self.field, "allowed": self.allowed}


# -- how a metric rolls up -------------------------------------------------------------

ROLLUP_TEXT = {
    "ratio": "sum(numerator) / sum(denominator) over the results, never a mean of rates",
    "sum": "sum of the results",
    "mean": "mean of the results, with their count",
    "max": "largest of the results",
    "min": "smallest of the results",
}


def rollup_of(d: MetricDefinition) -> str:
    """ratio, sum, mean, max or min: from the definition's kind and unit."""
    if d.kind == "aggregate" and d.aggregate is not None:
        # An aggregate mean stores its sum and count as numerator and denominator.
        return {"avg": "ratio", "sum": "sum", "max": "max", "min": "min"}[d.aggregate.function]
    if d.unit == "ratio":
        return "ratio"
    if d.kind == "llm_judge" or d.unit == "ms":
        return "mean"
    return "sum"


# -- the catalog, as an agent reads it ---------------------------------------------------


def metric_summary(d: MetricDefinition) -> dict[str, Any]:
    return {
        "metric": str(d.ref),
        "provider": d.provider,
        "scopes": [s.value for s in d.scopes],
        "unit": d.unit,
        "description": " ".join(d.description.split()).split(". ")[0].rstrip(".") + ".",
    }


def metric_detail(d: MetricDefinition) -> dict[str, Any]:
    return {
        "metric": str(d.ref),
        "name": d.name,
        "provider": d.provider,
        "kind": d.kind,
        "scopes": [s.value for s in d.scopes],
        "unit": d.unit,
        "value_range": list(d.value_range),
        "version": d.version,
        "description": " ".join(d.description.split()),
        "caveats": " ".join(d.caveats.split()) if d.caveats else None,
        "rollup": ROLLUP_TEXT[rollup_of(d)],
        "cuts": {s.value: list(d.cuts_at(s)) for s in d.scopes},
        "depends_on": list(d.depends_on),
    }


def find_definition(catalog: Catalog, metric: str) -> tuple[MetricDefinition, Scope | None]:
    """The definition a name stands for (and the scope the name gives), or a refusal
    that lists what exists."""
    try:
        ref = MetricRef.parse(metric)
        return catalog.definition(ref), ref.scope
    except UnknownMetricError as exc:
        names = sorted(str(d.ref) for d in catalog.definitions.values())
        raise QueryRefused(f"{exc}. Metrics: {', '.join(names)}", "metric", names) from None


# -- the query --------------------------------------------------------------------------


def parse_time(value: str | None, field: str) -> float | None:
    """ISO 8601 (a date, or a date and time; UTC unless it says otherwise) -> Unix seconds."""
    if value is None or value == "":
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except (ValueError, AttributeError, TypeError):
        raise QueryRefused(f"{field}={shown(value)} is not an ISO 8601 date or time (as in 2025-03-01 or 2025-03-01T12:00:00Z)", field) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


def _day_text(day: int) -> str:
    return (date(1970, 1, 1) + timedelta(days=int(day))).isoformat()


def _period_bounds(kind: str, key: str) -> tuple[float, float]:
    if kind == "day":
        start = datetime.fromisoformat(key).replace(tzinfo=timezone.utc)
        return start.timestamp(), (start + timedelta(days=1)).timestamp()
    year, month = (int(p) for p in key.split("-"))
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=timezone.utc)
    return start.timestamp(), end.timestamp()


@dataclass
class _Group:
    n: int = 0
    total: float = 0.0
    lo: float | None = None
    hi: float | None = None
    num: float = 0.0
    den: float = 0.0
    ratios: int = 0

    def add(self, row: dict[str, Any]) -> None:
        self.n += int(row["n"] or 0)
        self.total += float(row["total"] or 0.0)
        self.num += float(row["num"] or 0.0)
        self.den += float(row["den"] or 0.0)
        self.ratios += int(row["ratios"] or 0)
        for attr, pick in (("lo", min), ("hi", max)):
            value = row[attr]
            if value is not None:
                current = getattr(self, attr)
                setattr(self, attr, float(value) if current is None else pick(current, float(value)))


def _value(rollup: str, g: _Group) -> dict[str, Any]:
    if rollup == "ratio":
        value = g.num / g.den if g.den else None
        return {"value": value, "numerator": g.num, "denominator": g.den, "count": g.n}
    if rollup == "sum":
        return {"value": g.total, "count": g.n}
    if rollup == "mean":
        return {"value": g.total / g.n if g.n else None, "count": g.n}
    return {"value": g.hi if rollup == "max" else g.lo, "count": g.n}


def query_metric(
    kg: KnowledgeGraph,
    catalog: Catalog,
    metric: str,
    scope: str | None = "Session",
    session_id: str | None = None,
    app: str | None = None,
    agent: str | None = None,
    since: str | None = None,
    until: str | None = None,
    by: str | None = None,
) -> dict[str, Any]:
    """The answer as one JSON-ready object: result_id, rows, cypher and the rest."""
    d, named_scope = find_definition(catalog, metric)
    scopes = [s.value for s in d.scopes]
    if named_scope is not None and scope not in (None, "Session", named_scope.value):
        raise QueryRefused(f"{shown(metric)} names scope {named_scope.value}, the query asks for {shown(scope)}", "scope", scopes)
    scope_text = named_scope.value if named_scope else (scope or "Session")
    if scope_text not in scopes:
        raise QueryRefused(f"{d.ref} is not defined at scope {shown(scope_text)}. Allowed: {', '.join(scopes)}.", "scope", scopes)
    at = Scope(scope_text)
    allowed_cuts = list(d.cuts_at(at))
    if by is not None and by not in allowed_cuts:
        elsewhere = [f"{c} at {CUT_SCOPE[c].value} scope" for c in d.cuts if c not in allowed_cuts]
        more = f" (also {', '.join(elsewhere)})" if elsewhere else ""
        listed = ", ".join(allowed_cuts) or "none"
        raise QueryRefused(f"{d.ref} at {at.value} cannot be cut by {shown(by)}. Allowed: {listed}.{more}", "by", allowed_cuts)
    if agent is not None and at is not Scope.AGENT_CALL:
        where = "AgentCall" if Scope.AGENT_CALL in d.scopes else "no scope of this metric"
        raise QueryRefused(
            f"an agent filter needs results at AgentCall scope ({d.ref} is at {', '.join(scopes)}; agents are at {where}). "
            "Allowed filters here: session_id, app, since, until.",
            "agent",
            ["session_id", "app", "since", "until"],
        )
    t_since, t_until = parse_time(since, "since"), parse_time(until, "until")
    if t_since is not None and t_until is not None and t_since >= t_until:
        raise QueryRefused(f"since ({shown(since, quoted=False)}) must be before until ({shown(until, quoted=False)})", "until")

    rollup = rollup_of(d)
    filters = {"session_id": session_id, "app": app, "agent": agent, "since": t_since, "until": t_until}
    statement, params, raw = kg.rollup_results(name=d.name, provider=d.provider, scope=at, version=d.version, by=by, filters=filters)
    groups: dict[Any, _Group] = {}
    for row in raw:
        key = row["key"]
        if by in ("day", "month") and key is not None:
            key = _day_text(key)[: 7 if by == "month" else 10]
        groups.setdefault(key, _Group()).add(row)
    newest, evaluated = kg.newest_evaluated(name=d.name, provider=d.provider, scope=at, version=d.version)

    notes: list[str] = []
    rows = []
    for key in sorted(groups, key=lambda k: (k is None, str(k))):
        g = groups[key]
        row: dict[str, Any] = {by: key} if by else {}
        row.update(_value(rollup, g))
        if rollup == "ratio" and g.ratios < g.n:
            notes.append(f"{g.n - g.ratios} result(s){f' of {by} {key}' if by else ''} carry no numerator/denominator and are left out of the ratio")
        if by in ("day", "month"):
            start, end = _period_bounds(by, key)
            cut_by_window = (t_since is not None and t_since > start) or (t_until is not None and t_until < end)
            not_evaluated = newest is not None and end > newest
            if cut_by_window or not_evaluated:
                row["incomplete"] = True
                why = "the window covers only part of it" if cut_by_window else f"it ends after the newest evaluated session ({iso(newest)})"
                notes.append(f"{key} is incomplete ({why}) - not comparable with the {by}s before it.")
        rows.append(row)

    window_incomplete = t_until is not None and (newest is None or t_until > newest)
    if window_incomplete:
        notes.append(
            f"The window ends {iso(t_until)}, after the newest evaluated session ({iso(newest) or 'none'}): "
            "it is not complete, and not comparable with complete windows."
        )
    if not rows:
        notes.append("No stored result matches: nothing is evaluated for this selection (which is not a value of 0).")
    answer: dict[str, Any] = {
        "metric": str(d.ref),
        "provider": d.provider,
        "scope": at.value,
        "version": d.version,
        "unit": d.unit,
        "rollup": ROLLUP_TEXT[rollup],
        "by": by,
        "filters": {k: v for k, v in {"session_id": session_id, "app": app, "agent": agent, "since": since, "until": until}.items() if v is not None},
        "window": {
            "since": iso(t_since),
            "until": iso(t_until),
            "newest_evaluated_session": iso(newest),
            "sessions_evaluated": evaluated,
            "incomplete": window_incomplete,
        },
        "rows": rows,
        "notes": notes,
        "caveats": " ".join(d.caveats.split()) if d.caveats else None,
        "cypher": statement,
        "parameters": params,
    }
    answer["result_id"] = _result_id(answer)
    return answer


def _result_id(answer: dict[str, Any]) -> str:
    """The same question over the same results gives the same id."""
    canonical = json.dumps(answer, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


# -- answers kept by id ------------------------------------------------------------------


class UnknownResultError(InputError):
    pass


def save_result(home: Path, answer: dict[str, Any], vocabulary: dict[str, list[str]], keep: int = 200) -> None:
    """Keep `answer` under its result id, then remove the least recently saved
    answers beyond `keep`. The same answer saved again replaces its own file (and
    counts as saved now)."""
    folder = private_folder(home / RESULTS_DIR)
    now = time.time_ns()
    record = {**answer, "vocabulary": vocabulary, "saved_at": now / 1e9}
    target = folder / f"{answer['result_id']}.json"
    write_text_atomically(target, json.dumps(record, indent=1, default=str))
    # The file system's own clock ticks in milliseconds at best: answers saved within
    # one tick would tie, and the newest could be taken for the oldest.
    os.utime(target, ns=(now, now))
    _forget_all_but(folder, keep, target)


def saved_results(folder: Path) -> list[Path]:
    """The kept answers in `folder`, oldest saved first."""
    found = []
    for path in folder.glob("*.json"):
        try:
            if _RESULT_ID.match(path.stem):
                found.append((path.stat().st_mtime_ns, path))
        except FileNotFoundError:  # removed by another process meanwhile
            continue
    return [path for _, path in sorted(found)]


def _forget_all_but(folder: Path, keep: int, newest: Path) -> None:
    saved = [p for p in saved_results(folder) if p != newest]
    for path in saved[: max(0, len(saved) + 1 - keep)]:
        path.unlink(missing_ok=True)


def load_result(home: Path, result_id: str) -> dict[str, Any]:
    if not isinstance(result_id, str) or not _RESULT_ID.match(result_id):
        raise UnknownResultError(f"{shown(result_id)} is not a result id (32 hex digits, from query_metric)")
    path = home / RESULTS_DIR / f"{result_id}.json"
    if not path.exists():
        raise UnknownResultError(f"no stored result {result_id}: query_metric first (results are kept under MCE_HOME/{RESULTS_DIR})")
    return json.loads(path.read_text())

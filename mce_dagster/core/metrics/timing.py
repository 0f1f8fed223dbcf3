from __future__ import annotations

from ..context import Node
from ..metric import EvaluationInput, MetricFailure, MetricValue, Outcome, native_metric
from ..ontology import Label


@native_metric("Duration")
def duration(entity: Node, inp: EvaluationInput) -> Outcome:
    """Milliseconds. A session spans from its earliest start to its latest end over
    all of its spans (calls and non-call spans); a call is its own duration."""
    if entity.label is Label.SESSION:
        spans = inp.session.all_spans()
        if not spans:
            raise MetricFailure("the session has no spans")
        start = min(s.start_ns for s in spans)
        end = max(s.end_ns for s in spans)
        return MetricValue(value=(end - start) / 1e6, metadata={"spans": len(spans)})
    value = entity.get("duration")
    if value is None:
        raise MetricFailure(f"{entity.label} {entity.id} has no duration")
    return MetricValue(value=float(value))

from __future__ import annotations

from ..context import Node
from ..metric import EvaluationInput, MetricFailure, MetricValue, NotApplicable, Outcome, native_metric
from ..ontology import Label


@native_metric("Duration")
def duration(entity: Node, inp: EvaluationInput) -> Outcome:
    """Milliseconds. A session spans from its earliest start to its latest end over
    all of its spans (calls and non-call spans); a call is its own duration."""
    provenance = inp.session.provenance
    if entity.label is Label.SESSION:
        if provenance.missing_parents:
            # The producer did not write every span (the platform's normalizer drops
            # task and workflow spans): the extent of what it wrote is not the session's.
            raise MetricFailure(
                f"{len(provenance.missing_parents)} call(s) have a parent span the graph does not hold "
                f"(first: {provenance.missing_parents[0]}): the session's first start and last end are not known"
            )
        spans = [s for s in inp.session.all_spans() if s.id not in provenance.invented]
        if not spans:
            raise MetricFailure("the session has no spans")
        start = min(s.start_ns for s in spans)
        end = max(s.end_ns for s in spans)
        return MetricValue(value=(end - start) / 1e6, metadata={"spans": len(spans)})
    value = entity.get("duration")
    if value is None and entity.id in provenance.invented:
        return NotApplicable(f"{entity.label} {entity.id} was made by the graph's producer, with no span to time")
    if value is None:
        raise MetricFailure(f"{entity.label} {entity.id} has no duration")
    return MetricValue(value=float(value))

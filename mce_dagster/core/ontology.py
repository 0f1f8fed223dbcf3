"""Names of the knowledge graph: labels, relationship types and properties.

Every label, relationship type and property name that reaches Cypher comes from
this module; values always travel as parameters.
"""

from __future__ import annotations

from enum import StrEnum


class Label(StrEnum):
    SESSION = "Session"
    MAS_CALL = "MASCall"
    AGENT_CALL = "AgentCall"
    TASK_CALL = "TaskCall"
    LLM_CALL = "LLMCall"
    TOOL_CALL = "ToolCall"
    SPAN = "Span"
    AGENT = "Agent"
    TOOL = "Tool"
    LLM = "LLM"
    STATE = "State"
    METRIC = "Metric"
    METRIC_RESULT = "MetricResult"
    # What a Population metric has counted so far, one node per (metric, app).
    POPULATION_STATE = "PopulationState"


class Rel(StrEnum):
    HAS_MAS_CALL = "hasMASCall"
    HAS_AGENT_CALL = "hasAgentCall"
    HAS_TASK_CALL = "hasTaskCall"
    HAS_LLM_CALL = "hasLLMCall"
    HAS_TOOL_CALL = "hasToolCall"
    HAS_SPAN = "hasSpan"
    EXECUTES_AGENT = "executesAgent"
    EXECUTES_TOOL = "executesTool"
    EXECUTES_LLM = "executesLLM"
    EXECUTES_SESSION = "executesSession"
    HAS_INITIAL_STATE = "hasInitialState"
    HAS_FINAL_STATE = "hasFinalState"
    OF_METRIC_TYPE = "ofMetricType"
    MEASURES = "measures"


# The call labels, outermost first. A metric scope is one of these or Session.
CALL_LABELS: tuple[Label, ...] = (
    Label.MAS_CALL,
    Label.AGENT_CALL,
    Label.TASK_CALL,
    Label.LLM_CALL,
    Label.TOOL_CALL,
)
EXECUTION_LABELS: tuple[Label, ...] = (Label.SESSION, *CALL_LABELS)

# The link that reaches a child call, by the child's label.
CHILD_REL: dict[Label, Rel] = {
    Label.MAS_CALL: Rel.HAS_MAS_CALL,
    Label.AGENT_CALL: Rel.HAS_AGENT_CALL,
    Label.TASK_CALL: Rel.HAS_TASK_CALL,
    Label.LLM_CALL: Rel.HAS_LLM_CALL,
    Label.TOOL_CALL: Rel.HAS_TOOL_CALL,
    Label.SPAN: Rel.HAS_SPAN,
}
CALL_RELS: tuple[Rel, ...] = tuple(CHILD_REL[label] for label in CALL_LABELS)


class Scope(StrEnum):
    """Where a metric is evaluated: an execution label, or across sessions."""

    SESSION = "Session"
    MAS_CALL = "MASCall"
    AGENT_CALL = "AgentCall"
    TASK_CALL = "TaskCall"
    LLM_CALL = "LLMCall"
    TOOL_CALL = "ToolCall"
    POPULATION = "Population"


CALL_SCOPES: tuple[Scope, ...] = tuple(Scope(label.value) for label in CALL_LABELS)

# Properties of execution nodes read back into a session context. Large text
# (states, message lists) is read only by the metrics that need it.
COMMON_PROPS: tuple[str, ...] = (
    "id",
    "sessionId",
    "name",
    "spanId",
    "parentSpanId",
    "startTime",
    "endTime",
    "startTimeUnixNano",
    "endTimeUnixNano",
    "duration",
    "success",
)
# On a Session: how many rows of it its ingest call could not place (absent: none).
ROWS_NOT_PLACED = "rowsNotPlaced"
# On every node the platform's normalizer writes (the OXP ontology's models): the
# mark of a producer that writes defaults for what it did not have (core.recorded).
ONTOLOGY_LAYER = "layer"
EXTRA_PROPS: dict[Label, tuple[str, ...]] = {
    Label.SESSION: ("appName", "ingestedAt", ROWS_NOT_PLACED, ONTOLOGY_LAYER),
    Label.MAS_CALL: (),
    Label.AGENT_CALL: ("agentName",),
    Label.TASK_CALL: ("taskName",),
    Label.LLM_CALL: (
        "modelName",
        "provider",
        "promptTokenCount",
        "completionTokenCount",
        "totalTokenCount",
        "cacheReadTokenCount",
        "temperature",
        "finishReason",
    ),
    Label.TOOL_CALL: ("toolName", "toolArguments", "errorMessage"),
    Label.SPAN: (),
}

# A call's name property, by label, and the structural node that also carries it
# (the platform's graph has the names only there: see core.recorded).
NAMED_BY: dict[Label, tuple[str, Rel, Label]] = {
    Label.AGENT_CALL: ("agentName", Rel.EXECUTES_AGENT, Label.AGENT),
    Label.LLM_CALL: ("modelName", Rel.EXECUTES_LLM, Label.LLM),
    Label.TOOL_CALL: ("toolName", Rel.EXECUTES_TOOL, Label.TOOL),
}

METRIC_PROPS: tuple[str, ...] = (
    "name",
    "provider",
    "scope",
    "unit",
    "valueRange",
    "description",
    "version",
)
METRIC_RESULT_PROPS: tuple[str, ...] = (
    "id",
    "name",
    "provider",
    "scope",
    "result",
    "reasoning",
    "numerator",
    "denominator",
    "metadata",
    "evaluationModel",
    "evaluationMethod",
    "evaluationPromptTokenCount",
    "evaluationCompletionTokenCount",
    "evaluationTotalTokenCount",
    "evaluationCost",
    "metricVersion",
    "sessionId",
    "entityId",
    "computedAt",
    "runId",
)

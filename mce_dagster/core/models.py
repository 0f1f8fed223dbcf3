"""Pydantic models of the graph's nodes (docs/graph.md): what ingestion writes, what
the engine reads, and the result nodes it writes back."""

from __future__ import annotations

import hashlib
import math
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .ontology import Label, Scope


class ExecutionNode(BaseModel):
    """Properties every execution node carries."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(min_length=1)
    sessionId: str = Field(min_length=1)
    name: str
    spanId: str | None = None
    parentSpanId: str | None = None
    startTime: float
    endTime: float
    # Exact times: float seconds lose sub-microsecond digits (and some stores
    # return doubles rounded to 15 digits).
    startTimeUnixNano: int | None = None
    endTimeUnixNano: int | None = None
    duration: float = Field(ge=0)
    # Absent means "not known", never "failed".
    success: bool | None = None

    @model_validator(mode="after")
    def _ordered_times(self) -> "ExecutionNode":
        if self.endTime < self.startTime:
            raise ValueError(f"endTime {self.endTime} is before startTime {self.startTime}")
        return self


class SessionNode(ExecutionNode):
    appName: str | None = None
    ingestedAt: float | None = None
    rowsNotPlaced: int | None = None


class MASCallNode(ExecutionNode):
    pass


class AgentCallNode(ExecutionNode):
    agentName: str


class TaskCallNode(ExecutionNode):
    taskName: str


class LLMCallNode(ExecutionNode):
    modelName: str | None = None
    provider: str | None = None
    promptTokenCount: int | None = Field(default=None, ge=0)
    completionTokenCount: int | None = Field(default=None, ge=0)
    totalTokenCount: int | None = Field(default=None, ge=0)
    cacheReadTokenCount: int | None = Field(default=None, ge=0)
    temperature: float | None = None
    finishReason: str | None = None
    inputMessages: str | None = None
    outputMessages: str | None = None


class ToolCallNode(ExecutionNode):
    toolName: str
    toolArguments: str | None = None
    errorMessage: str | None = None


class SpanNode(ExecutionNode):
    """A span that is not a call (HTTP client, message publish, start/end events)."""

    spanName: str | None = None


NODE_MODELS: dict[Label, type[ExecutionNode]] = {
    Label.SESSION: SessionNode,
    Label.MAS_CALL: MASCallNode,
    Label.AGENT_CALL: AgentCallNode,
    Label.TASK_CALL: TaskCallNode,
    Label.LLM_CALL: LLMCallNode,
    Label.TOOL_CALL: ToolCallNode,
    Label.SPAN: SpanNode,
}


class MetricNode(BaseModel):
    """One per metric definition, (name, provider)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    provider: str
    scope: list[str]
    unit: str
    # JSON text such as "[0, null]": graph lists cannot hold nulls.
    valueRange: str
    description: str
    version: int


# A fixed namespace so that result ids are the same on every machine.
RESULT_NAMESPACE = uuid.UUID("6f1c2b0e-4d1a-5c8e-9a77-3b2f0c9d4e51")
_RESULT_NAMESPACE_BYTES = RESULT_NAMESPACE.bytes


def result_id(name: str, provider: str, entity_id: str, version: int) -> str:
    """UUIDv5 of (metric name, provider, entity id, metric version): recomputing the
    same version on the same entity replaces the observation."""
    # uuid.uuid5 spelled out: the same bytes, without building a UUID object for
    # each of the hundreds of thousands of results a backfill writes.
    digest = bytearray(hashlib.sha1(_RESULT_NAMESPACE_BYTES + f"{provider}\x1f{name}\x1f{entity_id}\x1f{version}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class MetricResultNode(BaseModel):
    """One observation of one metric on one entity, validated before it is written."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    provider: str
    scope: Scope
    entityId: str = Field(min_length=1)
    # None only at Population scope: such a result measures many sessions.
    sessionId: str | None = Field(None, min_length=1)
    result: float
    reasoning: str | None = None
    numerator: float | None = None
    denominator: float | None = None
    # JSON text: graph properties cannot hold maps in Neo4j.
    metadata: str | None = None
    evaluationModel: str | None = None
    evaluationMethod: str | None = None
    evaluationPromptTokenCount: int = 0
    evaluationCompletionTokenCount: int = 0
    evaluationTotalTokenCount: int = 0
    evaluationCost: float = 0.0
    metricVersion: int
    computedAt: float
    runId: str | None = None

    @field_validator("result", "numerator", "denominator", "evaluationCost")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return value

    @model_validator(mode="after")
    def _session_unless_population(self) -> "MetricResultNode":
        if (self.sessionId is None) != (self.scope is Scope.POPULATION):
            raise ValueError("sessionId is required, except at Population scope where it is absent")
        return self

    def as_row(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

"""The REST API (the `[api]` extra): the engine as a service, over `mce_dagster.service`.

    mce serve --api 8000       # on 127.0.0.1; the schema at /openapi.json
    MCE_API_TOKEN=... mce serve --api 8000 --host 0.0.0.0

Every route but `GET /healthz` takes the bearer token when MCE_API_TOKEN is set, and
every request passes the checks of `serve.guard` (Host, token, body size) first.

`POST /compute_metrics` queues the evaluation as Dagster runs in the instance (see
`mce_dagster.queued`: bounded in sessions, runs and judge spend; 429 when the queue is
full) and returns their ids; `GET /runs/{id}` reports progress and, once done, the
results in the format of `mce kg metric get --json`. Bad input is a 4xx whose body names the
field: `{"error": ..., "field": ...}`.
"""

from __future__ import annotations

import json
import pathlib
from typing import Annotated, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from .. import service
from ..errors import MCEError, QueueFullError, RequestTooLargeError, UnknownMetricError, UnknownSessionError, shown
from .guard import LIVENESS_PATH, MAX_ID_LENGTH, MAX_METRICS_PER_REQUEST, MAX_NAME_LENGTH, MAX_SESSIONS_PER_REQUEST
from ..files import keep_private

HOST = "127.0.0.1"
# What an id may look like: printable, no path separators, bounded.
ID_PATTERN = rf"^[^/\s\x00-\x1f]{{1,{MAX_ID_LENGTH}}}$"



def _from_1_to(limit: int):
    """A length check that leaves the string as Python read it: pydantic's own
    max_length converts it first and refuses a lone surrogate a client's JSON may
    hold, which is an unknown id (404), not a malformed request."""

    def check(value: str) -> str:
        if not 0 < len(value) <= limit:
            raise ValueError(f"should have 1 to {limit} characters, not {len(value)}")
        return value

    return AfterValidator(check)


SessionId = Annotated[str, Field(json_schema_extra={"minLength": 1, "maxLength": MAX_ID_LENGTH}), _from_1_to(MAX_ID_LENGTH)]
MetricName = Annotated[str, Field(json_schema_extra={"minLength": 1, "maxLength": MAX_NAME_LENGTH}), _from_1_to(MAX_NAME_LENGTH)]


class ComputeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session_ids: list[SessionId] = Field(
        min_length=1, max_length=MAX_SESSIONS_PER_REQUEST, description="Sessions of the knowledge graph to evaluate."
    )
    metrics: list[MetricName] | None = Field(
        None, min_length=1, max_length=MAX_METRICS_PER_REQUEST,
        description="Metric names (Name, provider.Name, Scope/Name); null for every enabled metric.",
    )


class ComputeResponse(BaseModel):
    run_ids: list[str]


class Problem(BaseModel):
    error: str
    field: str | None = None


class RunReport(BaseModel):
    run_id: str
    status: str
    done: bool
    sessions: list[str]
    results: list[dict[str, Any]] | None = None


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII characters escaped: a lone surrogate a client sent (and an
    error message quotes back) has no UTF-8 form, and would make the reply a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _problem(status: int, error: str, field: str | None) -> JSONResponse:
    return AsciiJSONResponse(status_code=status, content={"error": error, "field": field})


class _Refused(Exception):
    def __init__(self, status: int, error: str, field: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(error)
        self.status, self.error, self.field, self.headers = status, error, field, headers


def build_app() -> FastAPI:
    app = FastAPI(
        default_response_class=AsciiJSONResponse,
        title="mce",
        version="0.1.0",
        description="Metrics over multi-agent sessions: the catalog, stored results, and evaluations run through Dagster.",
    )
    errors = {400: {"model": Problem}, 404: {"model": Problem}, 422: {"model": Problem}}
    queue_errors = {**errors, 429: {"model": Problem, "description": "The run queue is full: try again after Retry-After seconds."}}

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
        # A field name can be the caller's own (an unknown key): quoted short, like any value.
        field = shown(".".join(loc), quoted=False) if loc else None
        return _problem(422, f"{field or 'request'}: {shown(first.get('msg', 'invalid'), 200, quoted=False)}", field)

    @app.exception_handler(_Refused)
    async def _refused(request: Request, exc: _Refused) -> JSONResponse:
        response = _problem(exc.status, exc.error, exc.field)
        response.headers.update(exc.headers or {})
        return response

    @app.get(LIVENESS_PATH, summary="Liveness: the process answers (no token needed, nothing read)")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", summary="The metric catalog")
    def metrics() -> list[dict[str, Any]]:
        return [service.get_metric(m["metric"]) for m in service.list_metrics()]

    @app.get("/status", summary="Graph and Dagster instance reachable, and versions")
    def status() -> dict[str, Any]:
        return service.status()

    @app.post("/compute_metrics", summary="Queue an evaluation as Dagster runs", status_code=202, responses=queue_errors)
    def compute_metrics(body: ComputeRequest) -> ComputeResponse:
        try:
            return ComputeResponse(run_ids=service.submit_compute(body.session_ids, body.metrics))
        except UnknownSessionError as exc:
            raise _Refused(404, str(exc), "session_ids") from None
        except UnknownMetricError as exc:
            raise _Refused(422, str(exc), "metrics") from None
        except RequestTooLargeError as exc:
            raise _Refused(422, str(exc), "session_ids") from None
        except QueueFullError as exc:
            raise _Refused(429, str(exc), "session_ids", {"Retry-After": str(exc.retry_after_s)}) from None
        except MCEError as exc:
            raise _Refused(400, str(exc)) from None

    @app.get("/runs/{run_id}", summary="A submitted run: progress, and its results once done", responses=errors)
    def run(run_id: str = Path(max_length=MAX_ID_LENGTH, pattern=ID_PATTERN)) -> RunReport:
        found = service.run_report(run_id)
        if found is None:
            raise _Refused(404, f"no run {shown(run_id, quoted=False)} in the Dagster instance", "run_id")
        return RunReport(**found)

    @app.get("/sessions/{session_id}/metrics", summary="A session's stored results", responses=errors)
    def session_metrics(
        session_id: str = Path(max_length=MAX_ID_LENGTH, pattern=ID_PATTERN),
        recursive: bool = Query(False, description="Include the results on the session's calls."),
    ) -> list[dict[str, Any]]:
        try:
            return service.results(session_id, recursive=recursive)
        except UnknownSessionError:
            raise _Refused(404, f"session {shown(session_id, quoted=False)} is not in the knowledge graph", "session_id") from None
        except MCEError as exc:
            raise _Refused(400, str(exc)) from None

    return app


def serve_api(port: int, host: str = HOST, workspace: "pathlib.Path | None" = None) -> None:
    """Serve on host:port behind the guard; refused at once where it is not safe, or
    where the instance would start submitted runs unqueued. `workspace`: the
    workspace file of the code location the instance's daemon launches runs from."""
    import uvicorn

    keep_private()  # the query results and logs it writes
    from ..settings import Settings
    from .guard import check_bind, guarded

    settings = Settings.from_env()
    check_bind(host, settings)
    service.prepare_submissions(workspace)
    uvicorn.run(guarded(build_app(), host, port, settings), host=host, port=port, log_level="warning")

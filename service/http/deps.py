"""Router helpers: the runtime dependency and the documented error responses."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from service.engine.runtime import Runtime
from service.http.problems import PROBLEM_MEDIA_TYPE
from service.http.responses import ARROW_STREAM
from service.http.schemas import Problem


async def get_runtime(request: Request) -> Runtime:
    """Async on purpose: FastAPI runs a plain-def dependency in its thread pool, a thread hop per request."""
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]  # a route's `rt` parameter


def problems(*statuses: int) -> dict[int | str, dict]:
    """OpenAPI `responses` entries: each status answers problem+json."""
    words = {
        401: "missing or invalid API key",
        404: "unknown model or context set",
        413: "too many rows or too big a body",
        422: "invalid input (field, expected shape or range named)",
        503: "busy or store unreachable (Retry-After)",
        429: "the exact GP is busy (Retry-After); predictions without it are answered",
        504: "the exact GP passed its time limit (GRIDPFN_GP_TIMEOUT_S) and was stopped",
    }
    return {
        status: {
            "model": Problem,
            "description": words.get(status, "error"),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


# The query routes' 200 also comes as Arrow when asked for (service.http.responses): documented beside the JSON.
ARROW_200: dict[int | str, dict] = {
    200: {
        "description": "JSON by default; with `Accept: application/vnd.apache.arrow.stream` one Arrow IPC record batch "
        "(a row per query, a column per statistic and bus: voltages float64, std and probabilities "
        "float32; then `extrapolation` float64 and `extrapolated` bool per query; the rest as JSON in the schema "
        "metadata `gridpfn`)",
        "content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}},
    }
}

# ... and their queries may come as Arrow (service.http.arrow_request): documented beside the JSON body.
ARROW_BODY: dict[str, Any] = {
    "requestBody": {
        "description": "JSON, or with `Content-Type: application/vnd.apache.arrow.stream` one Arrow IPC stream: a column "
        "per load feature (p_mw_bus2 ... q_mvar_bus33), a row per query, and the other fields of the JSON "
        "body (model, context_id or context, quantiles, voltage_band, compare_gp) as a JSON object in the "
        "schema metadata `gridpfn`",
        "content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}},
    }
}

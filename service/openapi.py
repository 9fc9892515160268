"""/openapi.json with examples that chain: the predict-by-id example carries the real id of the
simulate example's context set (computed once, on the first schema request)."""
from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI

from service import examples

log = logging.getLogger(__name__)


def _replace(node: Any, old: str, new: str) -> Any:
    if isinstance(node, dict):
        return {k: _replace(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace(v, old, new) for v in node]
    return new if node == old else node


def install(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            try:
                schema = _replace(schema, examples.EXAMPLE_CONTEXT_ID, examples.simulated_context_id())
            except Exception:  # the docs still work, with a placeholder id
                log.exception("could not compute the example context id")
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi

"""/openapi.json with examples that run as shown against this server: the served model's name,
inline contexts of a size its card accepts, and the real content-addressed id of the simulate
example's context set (built with gridsim once, on the first schema request)."""
from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI

from service import examples

log = logging.getLogger(__name__)


def _live_examples(app: FastAPI) -> dict[str, list[dict]]:
    runtime = getattr(app.state, "runtime", None)
    models = sorted(runtime.registry.models.items()) if runtime is not None else []
    if not models:
        name, min_rows = examples.PREDICT_BY_ID["model"], 8
    else:
        name, loaded = models[0]
        min_rows = int((loaded.card.get("context_size") or {}).get("min", 8))
    return examples.live(name, min_rows)


def install(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            try:
                components = schema["components"]["schemas"]
                for model_name, model_examples in _live_examples(app).items():
                    components[model_name]["examples"] = model_examples
            except Exception:  # the docs still work, with the static examples
                log.exception("could not build the live examples")
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi

"""The FastAPI application: middleware, error handlers, routers, and a lifespan that loads the
registry once, warms every model (and the exact GP) and opens the store before serving.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service import logs
from service.engine import warmup
from service.engine.runtime import Runtime
from service.engine.store import open_store
from service.http import docs_pages, openapi, problems
from service.http.hot_routes import HotRoutes
from service.http.middleware import (
    BodyLimitMiddleware,
    HTTPMetricsMiddleware,
    RequestSettingsMiddleware,
    SecurityHeadersMiddleware,
)
from service.http.routers import (
    batch_jobs,
    context_sets,
    health,
    hosting_capacity,
    meter_placement,
    model_cards,
    networks,
    predict,
    simulate,
    studies,
    ui,
)
from service.metrics import Metrics
from service.process_privacy import forbid_inspection
from service.settings import Settings

log = logging.getLogger(__name__)


@asynccontextmanager
async def lifespan(app: FastAPI):
    settings: Settings = app.state.settings
    forbid_inspection()  # the keys in this process's environment stay out of same-user processes' reach
    if settings.torch_threads:
        import torch

        torch.set_num_threads(settings.torch_threads)
    warmup.one_blas_thread()
    registry = await asyncio.to_thread(warmup.load_registry, settings)
    store = open_store(settings.redis_url, settings.store_timeout_s)
    rt = Runtime(settings, registry, store, warmup.gp_method(settings), app.state.metrics)
    app.state.runtime = rt
    await asyncio.to_thread(warmup.warm, rt)
    rt.ready = True
    gc.freeze()  # start-up objects (registry, modules) leave the collector's view: full GC passes stay short
    log.info("ready: models %s, refused %s, store %s", registry.names(), sorted(registry.errors), store.kind)
    try:
        yield
    finally:
        rt.ready = False
        await batch_jobs.shutdown(app)
        await rt.close()


# FastAPI's own OpenTelemetry hooks (newer releases) look up the global providers on every request,
# a measurable share of a single-query predict's event-loop time (bench/results/service-notes.md); the service's metrics
# are its Prometheus ones.
_NO_NATIVE_TELEMETRY = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def create_app(settings: Settings | None = None) -> FastAPI:
    logs.configure_inherited()
    settings = settings or Settings()
    app = FastAPI(
        **_NO_NATIVE_TELEMETRY,
        title="GridPFN",
        version="0.1.0",
        description="Pretrained DVA-PFN power-flow surrogates for the IEEE 33-bus feeder: per-bus voltage "
        "distributions for load vectors, conditioned on a context set. Errors are RFC 9457 "
        "problem+json. With GRIDPFN_API_KEYS set, /v1 needs `Authorization: Bearer <key>`.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,  # served by service.http.docs_pages with local assets (offline)
    )
    app.state.settings = settings
    app.state.metrics = Metrics()
    problems.install(app)
    openapi.install(app)
    docs_pages.install(app)
    for module in (
        health,
        model_cards,
        context_sets,
        networks,
        predict,
        simulate,
        studies,
        hosting_capacity,
        meter_placement,
        batch_jobs,
        ui,
    ):
        app.include_router(module.router)
    # innermost of ours: body limit, metrics and Server-Timing still apply. With hot routes off it
    # still answers Arrow request bodies, which FastAPI cannot parse, and leaves JSON to FastAPI.
    app.add_middleware(HotRoutes, fastapi_app=app, json=settings.hot_routes)
    # the configured row limits, for the hot routes' and FastAPI's validation of a body (service.http.limits)
    app.add_middleware(RequestSettingsMiddleware, settings=settings)
    # batch-job uploads stream to disk under their own limit (JobSettings.upload_limit: the row limit's bytes), a
    # study's profile table under its form's (service.http.form_stream); no body is read before its key is checked
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        exempt=("/v1/batch-jobs",),
        streamed=("/v1/studies", "/v1/hosting-capacity"),
        api_keys=settings.api_keys,
        admin_api_key=settings.admin_api_key,
    )
    app.add_middleware(HTTPMetricsMiddleware, metrics=app.state.metrics)
    # outermost of ours: nosniff on every answer (the metrics' own 500s too), a page's frame and content policy
    app.add_middleware(SecurityHeadersMiddleware)
    return app

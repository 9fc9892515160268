"""The FastAPI application: middleware, error handlers, routers, and a lifespan that loads the
registry once, warms every model (and the exact GP) and opens the store before serving.
"""
from __future__ import annotations

import asyncio
import gc
import inspect
import logging
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
from fastapi import FastAPI

from service import docs_pages, errors, gridsim_calls, logs, openapi
from service.body_limit import BodyLimitMiddleware
from service.hot_routes import HotRoutes
from service.metrics import HTTPMetricsMiddleware, Metrics
from service.routers import batch_jobs, context_sets, gp, health, models, networks, predict, simulate, ui
from service.runtime import N_FEATURES, N_OUTPUTS, Runtime
from service.settings import Settings
from service.store import open_store

log = logging.getLogger(__name__)


def _load_registry(settings: Settings) -> Any:
    from models.registry import load_registry

    try:
        return load_registry(settings.model_dir, device=settings.device, calibrate=settings.calibration)
    except Exception as exc:  # an unusable model dir leaves the service alive but not ready
        log.error("could not load the model registry at %s: %s", settings.model_dir, exc)
        return SimpleNamespace(models={}, errors={"*": f"{type(exc).__name__}: {exc}"})


def _warm(rt: Runtime) -> None:
    """One fit + predict per model and one GP fit, so the first request pays no first-call costs."""
    rng = np.random.default_rng(0)
    for name, loaded in list(rt.registry.models.items()):
        sizes = loaded.card.get("context_size") or {}
        n = int(min(max(16, int(sizes.get("min", 1))), int(sizes.get("max", 16))))
        x, y = rng.normal(size=(n, N_FEATURES)), 1.0 + 0.01 * rng.normal(size=(n, N_OUTPUTS))
        try:
            encoded = loaded.method.fit(x, y)
            for m in (1, 8):
                loaded.method.predict(encoded, rng.normal(size=(m, N_FEATURES))).quantile([0.5])
        except Exception as exc:
            log.exception("warm-up of model %s failed; it will not be served", name)
            rt.registry.models.pop(name)
            rt.registry.errors[name] = f"warm-up failed: {type(exc).__name__}: {exc}"
    x, y = rng.normal(size=(16, N_FEATURES)), 1.0 + 0.01 * rng.normal(size=(16, N_OUTPUTS))
    quick_gp = _gp_method(rt.settings, max_iter=1)  # exercises the GP code paths, not its optimiser
    quick_gp.predict(quick_gp.fit(x, y), x[:2])
    # gridsim pulls in pandapower (pandas, scipy, networkx, sympy: ~130k objects); imported here, they
    # are frozen with the rest of start-up instead of making every later full GC pass ~100 ms long
    loads, _, _ = gridsim_calls.simulate_context(SimpleNamespace(n=2, delta=0.1, seed=0, network="ieee33"))
    gridsim_calls.solve(loads, "ieee33")


def _gp_method(settings: Settings, max_iter: int | None = None) -> Any:
    from models.gp import ExactGP

    max_iter = settings.gp_max_iter if max_iter is None else max_iter
    return ExactGP(linear_term=False) if max_iter is None else ExactGP(linear_term=False, max_iter=max_iter)


@asynccontextmanager
async def lifespan(app: FastAPI):
    settings: Settings = app.state.settings
    if settings.torch_threads:
        import torch

        torch.set_num_threads(settings.torch_threads)
    registry = await asyncio.to_thread(_load_registry, settings)
    store = open_store(settings.redis_url, settings.store_timeout_s)
    rt = Runtime(settings, registry, store, _gp_method(settings), app.state.metrics)
    app.state.runtime = rt
    await asyncio.to_thread(_warm, rt)
    rt.ready = True
    gc.freeze()  # start-up objects (registry, modules) leave the collector's view: full GC passes stay short
    log.info("ready: models %s, refused %s, store %s", sorted(registry.models), sorted(registry.errors), store.kind)
    try:
        yield
    finally:
        rt.ready = False
        await batch_jobs.shutdown(app)
        await rt.close()


# FastAPI's own OpenTelemetry hooks (newer releases) look up the global providers on every request,
# ~5 % of a single-query predict's event-loop time; the service's metrics are its Prometheus ones.
_NO_NATIVE_TELEMETRY = ({"telemetry": {"tracing": False, "metrics": False, "logs": False}}
                        if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})


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
        docs_url=None, redoc_url=None,  # served by service.docs_pages with local assets (offline)
    )
    app.state.settings = settings
    app.state.metrics = Metrics()
    errors.install(app)
    openapi.install(app)
    docs_pages.install(app)
    for module in (health, models, context_sets, networks, predict, gp, simulate, batch_jobs, ui):
        app.include_router(module.router)
    # innermost of ours: body limit, metrics and Server-Timing still apply. With hot routes off it
    # still answers Arrow request bodies, which FastAPI cannot parse, and leaves JSON to FastAPI.
    app.add_middleware(HotRoutes, fastapi_app=app, json=settings.hot_routes)
    # batch-job uploads stream to disk under their own limit (GRIDPFN_JOB_MAX_UPLOAD_BYTES)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, exempt=("/v1/batch-jobs",))
    app.add_middleware(HTTPMetricsMiddleware, metrics=app.state.metrics)
    return app

"""Liveness, readiness (models warmed and store reachable) and Prometheus metrics."""

from __future__ import annotations

import os

from fastapi import APIRouter
from starlette.responses import Response

from service.engine.errors import StoreUnavailable
from service.http.deps import RuntimeDep, problems
from service.http.problems import unavailable

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is alive")
@router.get("/v2/health/live", summary="Liveness (Open Inference Protocol path)")
async def live() -> dict:
    """`process`: the id of the server process that answered (which of `--processes N`, for operators)."""
    return {"status": "alive", "live": True, "process": os.getpid()}


@router.get("/readyz", summary="Models loaded and warmed, store reachable", responses=problems(503))
@router.get("/v2/health/ready", summary="Readiness (Open Inference Protocol path)", responses=problems(503))
async def ready(rt: RuntimeDep) -> dict:
    if not rt.ready:
        raise unavailable("not-ready", "Not ready", "models are still loading or warming up", 2)
    if not (rt.registry.checkpoints or rt.registry.any_network):  # physics-fit alone: the model dir is unusable
        raise unavailable("no-models", "No models", f"no usable checkpoint in {rt.settings.model_dir}", 30)
    try:
        await rt.store.ping()
    except StoreUnavailable as exc:
        raise unavailable("store-unavailable", "Context store unavailable", str(exc), 5) from exc
    return {"status": "ready", "ready": True, "models": rt.registry.names(), "store": rt.store.kind}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(rt: RuntimeDep) -> Response:
    return Response(rt.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

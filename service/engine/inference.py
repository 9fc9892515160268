"""The predict and GP-predict flows: resolve, check, encode (cached), run (batched or direct), answer.

They take the validated request objects and return the answer as plain data: a dict shaped like
the JSON answer whose arrays are numpy arrays in the dtype each kind travels in (voltages float64,
spreads and probabilities float32: service.engine.answers.on_the_wire). The HTTP layer writes it as
JSON (orjson straight from numpy) or Arrow; refusals are domain errors (service.engine.errors).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from service.engine.answers import Answer, AnswerSpec, on_the_wire
from service.engine.answers import answer as answer_of
from service.engine.context_sets import ContextSet
from service.engine.errors import NonFiniteAnswer
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant

BATCHABLE_ROWS = 8  # requests this small join micro-batches; bigger ones run on their own
# Requests at least this big are cut into one block per pool worker, run side by side: with one
# torch thread per worker (GRIDPFN_TORCH_THREADS) that is how one big answer uses every core.
SPLIT_ROWS = 1024
# the speedup's divisor at least this (ms): a PFN time rounded to 0 gives a large ratio, not a division by 0
MIN_DIVISOR_MS = 1e-6


def _direct(method: Any, fitted: Any, queries: np.ndarray, spec: AnswerSpec) -> tuple[Answer, float]:
    t0 = time.perf_counter()
    answer = answer_of(method, fitted, queries, spec)
    answer.all_finite()  # checked in the worker thread; the event loop reads the cached result
    return answer, time.perf_counter() - t0


async def _direct_split(
    rt: Runtime, method: Any, fitted: Any, queries: np.ndarray, spec: AnswerSpec
) -> tuple[Answer, float]:
    """_direct over blocks in parallel pool workers; the time is the wall time of the whole answer."""
    parts = min(rt.settings.workers, max(1, len(queries) // (SPLIT_ROWS // 2)))
    if parts < 2 or len(queries) < SPLIT_ROWS:
        return await rt.executor.run(_direct, method, fitted, queries, spec)
    t0 = time.perf_counter()
    blocks = np.array_split(queries, parts)
    answers = await asyncio.gather(*(rt.executor.run(_direct, method, fitted, block, spec) for block in blocks))
    return Answer.concat([a for a, _ in answers]), time.perf_counter() - t0


def _arrays(answer: Answer, spec: AnswerSpec, what: str) -> dict[str, Any]:
    if not answer.all_finite():
        raise NonFiniteAnswer(what)
    return {
        "mean": on_the_wire(answer.mean, voltage=True),
        "std": on_the_wire(answer.std, voltage=False),
        "quantiles": {
            repr(float(q)): on_the_wire(answer.quantiles[i], voltage=True) for i, q in enumerate(spec.quantiles)
        },
        "p_outside_band": None if answer.p_outside is None else on_the_wire(answer.p_outside, voltage=False),
    }


def _spec(req: Any) -> AnswerSpec:
    band = tuple(req.voltage_band) if req.voltage_band is not None else None
    return AnswerSpec(tuple(float(q) for q in req.quantiles), band)


async def context_of(rt: Runtime, request: Any, tenant: Tenant) -> tuple[ContextSet, Any]:
    """The request's context (inline, no store needed, or stored, by id) and its network (gridsim's
    Network: the widths, names and model choice follow it), as far as `tenant` sees them (another
    tenant's context set or uploaded network is NotFound; an inline context is addressed within the tenant)."""
    if request.context is not None:
        net = await rt.networks.resolve(request.context.network, "context.network", tenant=tenant)
        return rt.checks.context(request.context.x, request.context.y, net, owner=tenant.tag), net
    ctx = await rt.contexts.stored(request.context_id, tenant=tenant)
    return ctx, await rt.networks.resolve(ctx.network, "context_id", tenant=tenant)


async def _gp_answer(
    rt: Runtime, ctx: Any, queries: np.ndarray, spec: AnswerSpec, field: str
) -> tuple[Answer, dict[str, Any]]:
    """The exact GP's answer from its own pool (service.engine.gp_pool; `field` asked for it)."""
    answer, t = await rt.gp.answer(ctx.id, ctx.x, ctx.y, queries, spec, field)
    return answer, {
        "gp_fit_ms": t["fit_s"] * 1e3,
        "gp_predict_ms": t["predict_s"] * 1e3,
        "gp_fit_cached": t["fit_cached"],
    }


async def predict(rt: Runtime, req: Any, tenant: Tenant) -> dict[str, Any]:
    """The answer to a PredictRequest from `tenant` (see the module docstring)."""
    t0 = time.perf_counter()
    rt.models.known(req.model)
    ctx, net = await context_of(rt, req, tenant)
    loaded = await rt.models.choose(req.model, net, req.version)
    rt.checks.context_size(loaded, ctx)
    queries = rt.checks.queries(req.queries, net)
    spec = _spec(req)
    if req.compare_gp:
        rt.checks.gp(ctx, queries)
    encoded, hit = await rt.fits.encoded(loaded, ctx)
    if queries.shape[0] <= BATCHABLE_ROWS:
        result = await rt.executor.batched(
            (loaded.name, loaded.version, net.name, ctx.id), loaded.method, encoded.value, queries, spec
        )
        answer, predict_s, batch_rows = result.answer, result.predict_s, result.batch_rows
    else:
        answer, predict_s = await _direct_split(rt, loaded.method, encoded.value, queries, spec)
        batch_rows = queries.shape[0]
    rt.metrics.inference.labels(loaded.name, "predict").observe(predict_s)
    timing: dict[str, Any] = {
        "pfn_ms": (predict_s + (0.0 if hit else encoded.seconds)) * 1e3,
        "pfn_encode_ms": encoded.seconds * 1e3,
        "pfn_predict_ms": predict_s * 1e3,
        "context_cached": hit,
        "batch_rows": batch_rows,
    }
    gp = None
    if req.compare_gp:
        gp_answer, gp_timing = await _gp_answer(rt, ctx, queries, AnswerSpec(), "compare_gp")
        gp_arrays = _arrays(gp_answer, AnswerSpec(), "exact GP")
        gp = {"mean": gp_arrays["mean"], "std": gp_arrays["std"]}
        timing.update(gp_timing)
        pfn_total = timing["pfn_encode_ms"] + timing["pfn_predict_ms"]
        timing["speedup"] = (gp_timing["gp_fit_ms"] + gp_timing["gp_predict_ms"]) / max(pfn_total, MIN_DIVISOR_MS)
    body = {
        "model": loaded.name,
        "version": loaded.version,
        "network": net.name,
        "context_id": ctx.id,
        "outputs": list(net.output_names),
        **_arrays(answer, spec, f"model {loaded.name}"),
        "gp": gp,
    }
    timing["total_ms"] = (time.perf_counter() - t0) * 1e3
    body["timing"] = timing
    return body


async def gp_predict(rt: Runtime, req: Any, tenant: Tenant) -> dict[str, Any]:
    """The answer to a GPPredictRequest from `tenant`: the exact GP fitted on the context (cached per context)."""
    t0 = time.perf_counter()
    ctx, net = await context_of(rt, req, tenant)
    queries = rt.checks.queries(req.queries, net)
    rt.checks.gp(ctx, queries)
    spec = _spec(req)
    answer, timing = await _gp_answer(rt, ctx, queries, spec, "context_id" if req.context is None else "context")
    body = {
        "model": "exact-gp",
        "network": net.name,
        "context_id": ctx.id,
        "outputs": list(net.output_names),
        **_arrays(answer, spec, "exact GP"),
    }
    timing["total_ms"] = (time.perf_counter() - t0) * 1e3
    body["timing"] = timing
    return body

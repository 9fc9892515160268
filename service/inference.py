"""The predict and GP-predict flows: resolve, encode (cached), run (batched or direct), answer.

Responses are serialised here with orjson straight from numpy (voltages as float64, spreads and
probabilities as float32: service.answers.on_the_wire), because a 4500 x 32 answer through
FastAPI's encoder would take seconds.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import orjson
from starlette.responses import Response

from service.answers import Answer, AnswerSpec, answer as answer_of, on_the_wire
from service.arrow_answer import arrow_response, wants_arrow
from service.errors import ProblemError, too_large
from service.pool import PoolFull
from service.runtime import OUTPUT_NAMES, Runtime
from service.schemas import GPPredictRequest, PredictRequest

BATCHABLE_ROWS = 8  # requests this small join micro-batches; bigger ones run on their own
# Requests at least this big are cut into one block per pool worker, run side by side: with one
# torch thread per worker (GRIDPFN_TORCH_THREADS) that is how one big answer uses every core.
SPLIT_ROWS = 1024


def _direct(method: Any, fitted: Any, queries: np.ndarray, spec: AnswerSpec) -> tuple[Answer, float]:
    t0 = time.perf_counter()
    answer = answer_of(method, fitted, queries, spec)
    answer.all_finite()  # checked in the worker thread; the event loop reads the cached result
    return answer, time.perf_counter() - t0


async def _direct_split(rt: Runtime, method: Any, fitted: Any, queries: np.ndarray, spec: AnswerSpec) -> tuple[Answer, float]:
    """_direct over blocks in parallel pool workers; the time is the wall time of the whole answer."""
    parts = min(rt.settings.workers, max(1, len(queries) // (SPLIT_ROWS // 2)))
    if parts < 2 or len(queries) < SPLIT_ROWS:
        return await rt.run(_direct, method, fitted, queries, spec)
    t0 = time.perf_counter()
    blocks = np.array_split(queries, parts)
    answers = await asyncio.gather(*(rt.run(_direct, method, fitted, block, spec) for block in blocks))
    return Answer.concat([a for a, _ in answers]), time.perf_counter() - t0


def _arrays(answer: Answer, spec: AnswerSpec, what: str) -> dict[str, Any]:
    if not answer.all_finite():
        raise ProblemError(500, "non-finite-answer", "Non-finite answer",
                           f"the {what} produced NaN or infinity for this request; nothing is returned")
    return {
        "mean": on_the_wire(answer.mean, voltage=True),
        "std": on_the_wire(answer.std, voltage=False),
        "quantiles": {repr(float(q)): on_the_wire(answer.quantiles[i], voltage=True) for i, q in enumerate(spec.quantiles)},
        "p_outside_band": None if answer.p_outside is None else on_the_wire(answer.p_outside, voltage=False),
    }


def _spec(req: Any) -> AnswerSpec:
    band = tuple(req.voltage_band) if req.voltage_band is not None else None
    return AnswerSpec(tuple(float(q) for q in req.quantiles), band)


def json_response(body: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status,
                    media_type="application/json")


def _respond(body: dict[str, Any], accept: str | None) -> Response:
    """JSON, or Arrow when the client's Accept asks for it (service.arrow_answer)."""
    return arrow_response(body) if wants_arrow(accept) else json_response(body)


def _check_gp(rt: Runtime, ctx: Any, queries: np.ndarray) -> None:
    """Refuse GP work over the configured sizes before any model time is spent."""
    rt.check_gp_context(ctx)
    if queries.shape[0] > rt.settings.gp_max_queries:
        raise too_large("queries", f"{queries.shape[0]} rows is over the exact-GP limit",
                        f"at most {rt.settings.gp_max_queries} rows (GRIDPFN_GP_MAX_QUERIES); more: POST /v1/batch-jobs")


async def _gp_answer(rt: Runtime, ctx: Any, queries: np.ndarray, spec: AnswerSpec) -> tuple[Answer, dict]:
    fitted, hit = await rt.gp_fitted(ctx)
    answer, predict_s = await rt.run(_direct, rt.gp_method, fitted.value, queries, spec)
    rt.metrics.gp.labels("predict").observe(predict_s)
    return answer, {"gp_fit_ms": fitted.seconds * 1e3, "gp_predict_ms": predict_s * 1e3, "gp_fit_cached": hit}


async def predict(rt: Runtime, req: PredictRequest, accept: str | None = None) -> Response:
    t0 = time.perf_counter()
    loaded = rt.model(req.model)
    ctx = await rt.context_of(req)
    rt.check_context_size(loaded, ctx)
    queries = rt.check_queries(req.queries, len(loaded.card.get("features") or ()) or ctx.x.shape[1])
    spec = _spec(req)
    if req.compare_gp:
        _check_gp(rt, ctx, queries)
    encoded, hit = await rt.encoded(loaded, ctx)
    if queries.shape[0] <= BATCHABLE_ROWS:
        try:
            result = await rt.batcher.predict((loaded.name, loaded.version, ctx.id), loaded.method,
                                              encoded.value, queries, spec)
        except PoolFull as exc:
            raise rt.overloaded(exc) from exc
        except ValueError as exc:
            raise rt.rejected(exc) from exc
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
        gp_answer, gp_timing = await _gp_answer(rt, ctx, queries, AnswerSpec())
        gp_arrays = _arrays(gp_answer, AnswerSpec(), "exact GP")
        gp = {"mean": gp_arrays["mean"], "std": gp_arrays["std"]}
        timing.update(gp_timing)
        pfn_total = timing["pfn_encode_ms"] + timing["pfn_predict_ms"]
        timing["speedup"] = (gp_timing["gp_fit_ms"] + gp_timing["gp_predict_ms"]) / max(pfn_total, 1e-6)
    body = {"model": loaded.name, "context_id": ctx.id, "outputs": list(loaded.card.get("outputs") or OUTPUT_NAMES),
            **_arrays(answer, spec, f"model {loaded.name}"), "gp": gp}
    timing["total_ms"] = (time.perf_counter() - t0) * 1e3
    body["timing"] = timing
    return _respond(body, accept)


async def gp_predict(rt: Runtime, req: GPPredictRequest, accept: str | None = None) -> Response:
    t0 = time.perf_counter()
    ctx = await rt.context_of(req)
    queries = rt.check_queries(req.queries, ctx.x.shape[1])
    _check_gp(rt, ctx, queries)
    spec = _spec(req)
    answer, timing = await _gp_answer(rt, ctx, queries, spec)
    body = {"model": "exact-gp", "context_id": ctx.id, "outputs": OUTPUT_NAMES, **_arrays(answer, spec, "exact GP")}
    timing["total_ms"] = (time.perf_counter() - t0) * 1e3
    body["timing"] = timing
    return _respond(body, accept)

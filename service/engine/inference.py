"""The predict and GP-predict flows: resolve, check, encode (cached), run (batched or direct), answer.

They take the validated request objects and return the answer typed (service.engine.answers): a
`PredictAnswer` or the exact GP's `QueryAnswer`, whose arrays are numpy arrays in the dtype each kind
travels in (voltages float64, spreads and probabilities float32: service.engine.answers.on_the_wire)
and whose `OffContext` says, per query, how far outside the context's loads it lies (from the context
alone, whichever model answers). The HTTP layer writes it as JSON (orjson straight from numpy) or
Arrow; refusals are domain errors (service.engine.errors).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from models.errors import RowsRefused
from models.off_context import ContextGeometry
from service.engine.answers import (
    Answer,
    AnswerSpec,
    GPTiming,
    ModelTiming,
    OffContext,
    PredictAnswer,
    QueryAnswer,
    Statistics,
    Timing,
    needs_widening,
    placed_answer,
    widened,
    widens_every_row,
)
from service.engine.context_sets import ContextSet
from service.engine.errors import InputRejected, NonFiniteAnswer
from service.engine.executor import Encoded
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant

BATCHABLE_ROWS = 8  # requests this small join micro-batches; bigger ones run on their own
# Requests at least this big are cut into one block per pool worker, run side by side: with one
# torch thread per worker (GRIDPFN_TORCH_THREADS) that is how one big answer uses every core.
SPLIT_ROWS = 1024
# The exact GP's answers measure their queries' extrapolation on the event loop up to this many
# multiply-adds (queries x loads^2, well under a millisecond), in a pool worker beyond.
INLINE_WORK = 1 << 17


def _direct(
    method: Any, fitted: Any, geometry: ContextGeometry, queries: np.ndarray, spec: AnswerSpec, widen: bool = True
) -> tuple[Answer, OffContext, float]:
    t0 = time.perf_counter()
    answer, placed = placed_answer(method, fitted, geometry, queries, spec, widen)
    answer.all_finite()  # checked in the worker thread; the event loop reads the cached result
    return answer, placed, time.perf_counter() - t0


async def _direct_split(
    rt: Runtime, method: Any, fitted: Any, geometry: ContextGeometry, queries: np.ndarray, spec: AnswerSpec
) -> tuple[Answer, OffContext, float]:
    """_direct over blocks in parallel pool workers, a guarded method's answer widened once after them (its
    few far rows' small calls would crawl beside the other block's forward pass), or in each block where it is
    widened at every row (`widens_every_row`: the blocks' work is then even); the time is the wall time of the
    whole answer."""
    parts = min(rt.settings.workers, max(1, len(queries) // (SPLIT_ROWS // 2)))
    if parts < 2 or len(queries) < SPLIT_ROWS:
        return await rt.executor.run(_direct, method, fitted, geometry, queries, spec)
    t0 = time.perf_counter()
    in_blocks = widens_every_row(method, fitted)
    blocks = np.array_split(queries, parts)
    starts = np.cumsum([0] + [len(b) for b in blocks[:-1]])

    async def part(block: np.ndarray, start: int) -> tuple[Answer, OffContext, float]:
        try:
            return await rt.executor.run(_direct, method, fitted, geometry, block, spec, in_blocks)
        except InputRejected as exc:  # the rows in the request's numbering, not the block's
            refused = exc.__cause__
            if not isinstance(refused, RowsRefused) or not start:
                raise
            moved = RowsRefused(refused.field, [start + r for r in refused.rows], refused.reason, refused.expected)
            raise InputRejected(moved) from moved

    done = await asyncio.gather(*(part(block, int(start)) for block, start in zip(blocks, starts, strict=True)))
    answer, placed = Answer.concat([a for a, _, _ in done]), OffContext.concat([p for _, p, _ in done])
    if not in_blocks and needs_widening(method, fitted, placed):
        answer = await rt.executor.run(widened, method, fitted, queries, answer, placed, spec)
    return answer, placed, time.perf_counter() - t0


async def _off_context(rt: Runtime, geometry: ContextGeometry, queries: np.ndarray) -> OffContext:
    """The queries' extrapolation measure: on the event loop when it is small work, else in a pool worker."""
    if queries.shape[0] * geometry.mean.size**2 <= INLINE_WORK:
        return OffContext.of(geometry, queries)
    return await rt.executor.run(OffContext.of, geometry, queries)


def _statistics(answer: Answer, levels: tuple[float, ...], what: str) -> Statistics:
    if not answer.all_finite():
        raise NonFiniteAnswer(what)
    return Statistics.of(answer, levels)


_PLAIN = AnswerSpec()  # mean and std only: most requests (one object, and one micro-batch group, for all of them)


def _spec(req: Any) -> AnswerSpec:
    if not req.quantiles and req.voltage_band is None:
        return _PLAIN
    band = tuple(req.voltage_band) if req.voltage_band is not None else None
    return AnswerSpec(tuple(float(q) for q in req.quantiles), band)


async def context_of(rt: Runtime, request: Any, tenant: Tenant) -> tuple[ContextSet, Any]:
    """The request's context (inline, no store needed, its readings held to the network model once per process;
    or stored, by id) and its network (gridsim's Network: the widths, names and model choice follow it), as far
    as `tenant` sees them (another tenant's context set or uploaded network is NotFound; an inline context is
    addressed within the tenant)."""
    if request.context is not None:
        net = await rt.networks.resolve(request.context.network, "context.network", tenant=tenant)
        inline = request.context
        ctx = rt.checks.context(inline.x, inline.y, net, owner=tenant.tag, typical_loads=inline.typical_loads)
        return await rt.readings.checked(ctx, net, "context"), net
    ctx = await rt.contexts.stored(request.context_id, tenant=tenant)
    return ctx, await rt.networks.for_context(ctx.network, ctx.id, tenant=tenant)


async def model_and_context(rt: Runtime, req: Any, tenant: Tenant) -> tuple[Any, ContextSet, Any]:
    """The request's model (`model`, `version`) on its context's network, and the context, checked for that
    model (its row range; missing values only for a model that accepts them): every model route starts here."""
    rt.models.known(req.model)
    ctx, net = await context_of(rt, req, tenant)
    loaded = await rt.models.choose(req.model, net, req.version)
    rt.checks.context_size(loaded, ctx)
    rt.checks.accepts(loaded, ctx)  # a sparse context only for a model that accepts missing values
    return loaded, ctx, net


async def _gp_answer(
    rt: Runtime, ctx: Any, queries: np.ndarray, spec: AnswerSpec, field: str
) -> tuple[Statistics, GPTiming]:
    """The exact GP's answer from its own pool (service.engine.gp_pool; `field` asked for it)."""
    answer, t = await rt.gp.answer(ctx.id, ctx.x, ctx.y, queries, spec, field)
    return _statistics(answer, spec.quantiles, "exact GP"), GPTiming(t["fit_s"], t["predict_s"], t["fit_cached"])


async def predict(rt: Runtime, req: Any, tenant: Tenant) -> PredictAnswer:
    """The answer to a PredictRequest from `tenant` (see the module docstring)."""
    t0 = time.perf_counter()
    loaded, ctx, net = await model_and_context(rt, req, tenant)
    queries = rt.checks.queries(req.queries, net)
    spec = _spec(req)
    if req.compare_gp:
        rt.checks.gp(ctx, queries)
    encoded, hit, geometry = await rt.fits.prepared(loaded, ctx, net, queries)
    if queries.shape[0] <= BATCHABLE_ROWS:
        key = (loaded.name, loaded.version, net.name, ctx.id)
        result = await rt.executor.batched(key, Encoded(loaded.method, encoded.value, geometry), queries, spec)
        answer, placed, predict_s, batch_rows = result.answer, result.off_context, result.predict_s, result.batch_rows
        statistics = result.statistics  # converted once per pass in the worker; None when not finite
    else:
        answer, placed, predict_s = await _direct_split(rt, loaded.method, encoded.value, geometry, queries, spec)
        batch_rows, statistics = queries.shape[0], None
    rt.metrics.inference_time(loaded.name, "predict").observe(predict_s)
    if statistics is None:
        statistics = _statistics(answer, spec.quantiles, f"model {loaded.name}")
    gp, gp_timing = None, None
    if req.compare_gp:
        gp, gp_timing = await _gp_answer(rt, ctx, queries, AnswerSpec(), "compare_gp")
    return PredictAnswer(
        model=loaded.name,
        network=net.name,
        context_id=ctx.id,
        outputs=tuple(net.output_names),
        statistics=statistics,
        off_context=placed,
        timing=Timing(time.perf_counter() - t0, ModelTiming(encoded.seconds, predict_s, hit, batch_rows), gp_timing),
        version=loaded.version,
        gp=gp,
        metering=ctx.metering.with_fit(encoded.value),
    )


async def gp_predict(rt: Runtime, req: Any, tenant: Tenant) -> QueryAnswer:
    """The answer to a GPPredictRequest from `tenant`: the exact GP fitted on the context (cached per context)."""
    t0 = time.perf_counter()
    ctx, net = await context_of(rt, req, tenant)
    queries = rt.checks.queries(req.queries, net)
    rt.checks.gp(ctx, queries)
    spec = _spec(req)
    statistics, gp_timing = await _gp_answer(rt, ctx, queries, spec, "context_id" if req.context is None else "context")
    placed = await _off_context(rt, await rt.fits.geometry(ctx, net), queries)
    return QueryAnswer(
        model="exact-gp",
        network=net.name,
        context_id=ctx.id,
        outputs=tuple(net.output_names),
        statistics=statistics,
        off_context=placed,
        timing=Timing(time.perf_counter() - t0, gp=gp_timing),
    )


async def model_answer(
    rt: Runtime, loaded: Any, ctx: ContextSet, net: Any, queries: np.ndarray, spec: AnswerSpec
) -> tuple[Statistics, OffContext, ModelTiming]:
    """A model's answer to rows the server made (a study's scenarios) on `net`: the cached encoding, the pool."""
    encoded, hit, geometry = await rt.fits.prepared(loaded, ctx, net, queries)
    answer, placed, predict_s = await _direct_split(rt, loaded.method, encoded.value, geometry, queries, spec)
    statistics = _statistics(answer, spec.quantiles, f"model {loaded.name}")
    return statistics, placed, ModelTiming(encoded.seconds, predict_s, hit, queries.shape[0])

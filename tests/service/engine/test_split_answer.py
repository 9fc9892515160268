"""A big answer split over worker threads (service.engine.inference._direct_split) equals the unsplit one,
a guarded checkpoint's included: its far rows are widened once, after the blocks, as in one piece, or in each
block where every row is widened (physics-fit as served, a noisy context)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import numpy as np

import gridsim
from gridsim.api import VoltageModel
from models.off_context import OffContextGuard
from models.physics_fit import method_for
from service.engine.answers import AnswerSpec, placed_answer
from service.engine.caches import Fits
from service.engine.executor import Executor
from service.engine.inference import SPLIT_ROWS, _direct_split
from service.engine.sparse import geometry
from service.metrics import Metrics


def test_a_split_guarded_answer_equals_the_whole_one():
    net = gridsim.network("ieee33")
    context, queries = gridsim.simulate(300, 0.1, 11), gridsim.simulate(SPLIT_ROWS + 200, 0.1, 12).x
    queries[::97] *= 1.4  # some rows far beyond the context's reach: the guard widens them
    guard = OffContextGuard(method_for(net), VoltageModel(net))
    fitted = guard.fit(context.x, context.vm_pu)
    where = geometry(context.x, net.base_x)
    spec = AnswerSpec((0.05, 0.95), (0.95, 1.05))
    whole, placed = placed_answer(guard, fitted, where, queries, spec)
    assert placed.extrapolated.sum() >= 10

    async def split():
        executor = Executor(2, 8, 0.001, 64, Metrics())
        try:
            return await _direct_split(
                SimpleNamespace(settings=SimpleNamespace(workers=2), executor=executor),
                guard,
                fitted,
                where,
                queries,
                spec,
            )
        finally:
            executor.shutdown()

    answer, split_placed, _ = asyncio.run(split())
    # a block's rows may meet another BLAS kernel than the whole's: equal to the last bit or two
    np.testing.assert_allclose(split_placed.extrapolation, placed.extrapolation, rtol=1e-14, atol=0)
    np.testing.assert_array_equal(answer.mean, whole.mean)
    far = placed.extrapolated
    unwidened = guard.base.summarize(fitted.real, queries, spec.quantiles, spec.band)
    assert np.all(answer.std[far] > unwidened.std[far])  # widened where far out ...
    np.testing.assert_array_equal(
        answer.std[~far & (placed.extrapolation <= 1.0)], unwidened.std[~far & (placed.extrapolation <= 1.0)]
    )
    np.testing.assert_allclose(answer.std, whole.std, rtol=1e-6)  # ... as the whole answer is
    np.testing.assert_allclose(answer.quantiles, whole.quantiles, rtol=1e-9)
    assert answer.p_outside is not None and whole.p_outside is not None
    np.testing.assert_allclose(answer.p_outside, whole.p_outside, atol=1e-9)


def test_a_new_contexts_exact_probe_is_built_beside_its_fit_once(monkeypatch):
    """Fits.prepared told the queries: a guarded method's exact probe is built on the worker its fit leaves idle
    (service.engine.caches.Fits._fit), once, and the answer is the one built without it."""
    net = gridsim.network("ieee33")
    context, queries = gridsim.simulate(300, 0.1, 11), gridsim.simulate(300, 0.1, 12).x
    queries[::37] *= 1.4
    guard = OffContextGuard(method_for(net), VoltageModel(net))
    built = []
    for_means = guard.base.fit_for_means
    monkeypatch.setattr(guard.base, "fit_for_means", lambda x, y: built.append(1) or for_means(x, y))
    spec = AnswerSpec((0.05, 0.95), (0.95, 1.05))
    y = context.vm_pu + 1e-7  # readings a little off the network model: the exact probe is a fit of its own
    ctx = SimpleNamespace(id="c", network="ieee33", x=context.x, y=y, typical_loads=None)

    async def answered():
        executor = Executor(2, 8, 0.001, 64, Metrics())
        fits = Fits(executor.run, Metrics(), 4, executor.ahead)
        try:
            fitted, hit, where = await fits.prepared(
                SimpleNamespace(name="m", version="1", method=guard), ctx, net, queries
            )
            assert not hit
            answer = await executor.run(placed_answer, guard, fitted.value, where, queries, spec)
            assert len(built) == 1
            plain = await executor.run(guard.fit, context.x, y)  # in a worker too: its threads' settings
            return answer, await executor.run(placed_answer, guard, plain, where, queries, spec)
        finally:
            executor.shutdown()

    (answer, placed), (whole, _) = asyncio.run(answered())
    assert placed.extrapolated.any()
    for name in ("mean", "std", "quantiles", "p_outside"):  # a last bit apart at most: torch's MKL, called from
        # two threads at once (the fit beside the probe), may split a product another way than alone
        np.testing.assert_allclose(getattr(answer, name), getattr(whole, name), rtol=1e-13, atol=1e-15)


def test_work_ahead_takes_an_idle_worker_only_and_keeps_its_errors():
    async def scenario():
        executor = Executor(1, 8, 0.001, 64, Metrics())
        ran, done, gate = [], threading.Event(), threading.Event()
        try:
            executor.ahead(lambda: ran.append("idle") or done.set())
            assert await asyncio.to_thread(done.wait, 5)
            executor.ahead(lambda: 1 / 0)  # met again by its caller when it needs the work: nothing raised here
            busy = asyncio.create_task(executor.run(gate.wait, 5))
            await asyncio.sleep(0)
            executor.ahead(ran.append, "busy")
            await asyncio.sleep(0.05)
            gate.set()
            await busy
            await executor.run(lambda: None)  # one worker, first in first out: a queued job would have run by now
            assert ran == ["idle"]
        finally:
            gate.set()
            executor.shutdown()

    asyncio.run(asyncio.wait_for(scenario(), timeout=10))


def test_an_answer_widened_at_every_row_is_widened_in_its_blocks(monkeypatch):
    """A guarded method that widens every row (physics-fit as served; any method fitted to a noisy context) has each
    block widened in its own worker, beside the other's: the same answer as in one piece, and no widening after."""
    import service.engine.inference as inference
    from service.engine.answers import widens_every_row

    net = gridsim.network("ieee33")
    context, queries = gridsim.simulate(300, 0.1, 11), gridsim.simulate(SPLIT_ROWS + 200, 0.1, 12).x
    queries[::97] *= 1.4
    guard = OffContextGuard(method_for(net), VoltageModel(net), within_reach=True)
    fitted = guard.fit(context.x, context.vm_pu)
    assert widens_every_row(guard, fitted)
    where = geometry(context.x, net.base_x)
    spec = AnswerSpec((0.05, 0.95), (0.95, 1.05))
    whole, _ = placed_answer(guard, fitted, where, queries, spec)
    unwidened, _ = placed_answer(guard, fitted, where, queries, spec, widen=False)
    assert (whole.std > unwidened.std).mean() > 0.5  # most rows are widened, within the context's reach too

    def no_widening_after(*args):
        raise AssertionError("widened after the blocks")

    monkeypatch.setattr(inference, "widened", no_widening_after)

    async def split():
        executor = Executor(2, 8, 0.001, 64, Metrics())
        try:
            runtime = SimpleNamespace(settings=SimpleNamespace(workers=2), executor=executor)
            return await _direct_split(runtime, guard, fitted, where, queries, spec)
        finally:
            executor.shutdown()

    answer, _, _ = asyncio.run(split())
    np.testing.assert_array_equal(answer.mean, whole.mean)
    for name in ("std", "quantiles", "p_outside"):  # the blocks' power flows and fits may round a last bit apart
        np.testing.assert_allclose(getattr(answer, name), getattr(whole, name), rtol=1e-9, atol=1e-12)

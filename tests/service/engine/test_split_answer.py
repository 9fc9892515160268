"""A big answer split over worker threads (service.engine.inference._direct_split) equals the unsplit one,
a guarded checkpoint's included: its far rows are widened once, after the blocks, as in one piece."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np

import gridsim
from gridsim.api import VoltageModel
from models.off_context import OffContextGuard
from models.physics_fit import method_for
from service.engine.answers import AnswerSpec, placed_answer
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
    where = geometry(context.x)
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

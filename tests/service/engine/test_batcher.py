"""service.engine.executor.MicroBatcher on its own, with a real method (least squares) and a real pool."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from models.linear import LeastSquares
from models.off_context import ContextGeometry
from service.engine.answers import AnswerSpec, OffContext, answer
from service.engine.executor import Encoded, MicroBatcher, QueueFull, WorkerPool


class RecordingLeastSquares(LeastSquares):
    """Least squares that records the rows of every pass and can hold a pass until released."""

    def __init__(self) -> None:
        super().__init__()
        self.passes: list[int] = []
        self.hold = threading.Event()
        self.hold.set()

    def summarize(self, fitted, query_x, levels=(), band=None):
        self.hold.wait(5)
        self.passes.append(query_x.shape[0])
        return super().summarize(fitted, query_x, levels, band)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 64))
    y = 1.0 + 0.01 * (x @ rng.normal(size=(64, 32))) / 8
    return x, y, rng.normal(size=(80, 64))


@pytest.fixture(scope="module")
def geometry(data):
    return ContextGeometry.of(data[0])


def run(scenario):
    """Run an async scenario with a 2-worker pool, shut down after."""

    async def main():
        pool = WorkerPool(workers=2, queue_size=8)
        try:
            return await scenario(pool)
        finally:
            pool.shutdown()

    return asyncio.run(main())


def test_concurrent_requests_share_one_pass_and_each_gets_its_own_rows(data, geometry):
    x, y, q = data
    method = RecordingLeastSquares()
    fitted = method.fit(x, y)
    spec = AnswerSpec((0.1, 0.9), (0.95, 1.05))
    reported: list[tuple[int, int]] = []

    async def scenario(pool):
        batcher = MicroBatcher(pool, window_s=0.02, max_rows=64, on_batch=lambda r, n: reported.append((r, n)))
        sizes = [1, 2, 1, 3]
        starts = np.cumsum([0] + sizes[:-1])
        return (
            await asyncio.gather(
                *(
                    batcher.predict("key", Encoded(method, fitted, geometry), q[s : s + m], spec)
                    for s, m in zip(starts, sizes)
                )
            ),
            starts,
            sizes,
        )

    results, starts, sizes = run(scenario)
    assert method.passes == [7] and reported == [(7, 4)]
    expected = answer(LeastSquares(), fitted, q[:7], spec)
    for result, s, m in zip(results, starts, sizes):
        assert result.batch_rows == 7 and result.batch_requests == 4 and result.predict_s > 0
        np.testing.assert_allclose(result.answer.mean, expected.mean[s : s + m])
        np.testing.assert_allclose(result.answer.std, expected.std[s : s + m])
        np.testing.assert_allclose(result.answer.quantiles, expected.quantiles[:, s : s + m])
        np.testing.assert_allclose(result.answer.p_outside, expected.p_outside[s : s + m])
        placed = OffContext.of(geometry, q[s : s + m])  # each caller's rows of the batch's one measure
        # the same to the last few bits: a matrix product over 7 rows may round differently than over 1
        np.testing.assert_allclose(result.off_context.extrapolation, placed.extrapolation, rtol=1e-12, atol=0)
        np.testing.assert_array_equal(result.off_context.extrapolated, placed.extrapolated)


def test_the_row_limit_closes_a_batch_before_the_window(data, geometry):
    x, y, q = data
    method = RecordingLeastSquares()
    fitted = method.fit(x, y)

    async def scenario(pool):
        batcher = MicroBatcher(pool, window_s=30.0, max_rows=4, on_batch=None)  # the window would never pass
        return await asyncio.wait_for(
            asyncio.gather(
                *(
                    batcher.predict("key", Encoded(method, fitted, geometry), q[i : i + 2], AnswerSpec())
                    for i in range(0, 8, 2)
                )
            ),
            timeout=10,
        )

    results = run(scenario)
    assert method.passes == [4, 4]
    assert [r.batch_rows for r in results] == [4, 4, 4, 4]


def test_different_keys_and_specs_never_mix_rows(data, geometry):
    x, y, q = data
    method = RecordingLeastSquares()
    fitted_a, fitted_b = method.fit(x, y), method.fit(x, y + 0.5)

    async def scenario(pool):
        batcher = MicroBatcher(pool, window_s=0.01, max_rows=64)
        return await asyncio.gather(
            batcher.predict("a", Encoded(method, fitted_a, geometry), q[:1], AnswerSpec()),
            batcher.predict("b", Encoded(method, fitted_b, geometry), q[:1], AnswerSpec()),
            batcher.predict("a", Encoded(method, fitted_a, geometry), q[1:2], AnswerSpec((0.5,))),
        )

    a1, b1, a2 = run(scenario)
    np.testing.assert_allclose(b1.answer.mean - a1.answer.mean, 0.5, rtol=1e-6)
    assert a1.answer.quantiles.shape[0] == 0 and a2.answer.quantiles.shape[0] == 1
    assert sorted(method.passes) == [1, 1, 1]  # key b alone; key a: one pass per spec
    assert a1.batch_requests == a2.batch_requests == 2 and b1.batch_requests == 1


def test_while_a_pass_runs_the_next_batch_keeps_collecting(data, geometry):
    x, y, q = data
    method = RecordingLeastSquares()
    fitted = method.fit(x, y)

    async def scenario(pool):
        batcher = MicroBatcher(pool, window_s=0.001, max_rows=64)
        method.hold.clear()  # the first pass blocks in its worker
        first = asyncio.create_task(batcher.predict("key", Encoded(method, fitted, geometry), q[:1], AnswerSpec()))
        await asyncio.sleep(0.05)  # window passed: the first pass is running
        later = [
            asyncio.create_task(batcher.predict("key", Encoded(method, fitted, geometry), q[i : i + 1], AnswerSpec()))
            for i in range(1, 6)
        ]
        await asyncio.sleep(0.05)  # their window passed too, but the key's pass still runs
        method.hold.set()
        return await first, await asyncio.gather(*later)

    first, later = run(scenario)
    assert method.passes == [1, 5]
    assert first.batch_rows == 1 and all(r.batch_rows == 5 for r in later)


def test_a_full_pool_and_a_model_error_reach_every_caller_of_the_batch(data, geometry):
    x, y, q = data
    method = RecordingLeastSquares()
    fitted = method.fit(x, y)

    async def full():
        pool = WorkerPool(workers=1, queue_size=0)
        gate = threading.Event()
        try:
            blocker = asyncio.create_task(pool.run(gate.wait, 5))
            await asyncio.sleep(0.02)
            batcher = MicroBatcher(pool, window_s=0.001, max_rows=64)
            outcomes = await asyncio.gather(
                *(
                    batcher.predict("key", Encoded(method, fitted, geometry), q[i : i + 1], AnswerSpec())
                    for i in range(3)
                ),
                return_exceptions=True,
            )
            gate.set()
            await blocker
            return outcomes
        finally:
            gate.set()
            pool.shutdown()

    outcomes = asyncio.run(full())
    assert len(outcomes) == 3 and all(isinstance(o, QueueFull) for o in outcomes)

    async def wrong_width(pool):
        batcher = MicroBatcher(pool, window_s=0.001, max_rows=64)
        return await asyncio.gather(
            batcher.predict("key", Encoded(method, fitted, geometry), q[:1, :10], AnswerSpec()),
            batcher.predict("key", Encoded(method, fitted, geometry), q[:1, :10], AnswerSpec()),
            return_exceptions=True,
        )

    errors = run(wrong_width)  # refused in the shared pass, then each on its own: each caller its own refusal
    assert len(errors) == 2 and all(isinstance(e, Exception) and "query_x" in str(e) for e in errors)


def test_a_request_the_model_refuses_fails_alone_not_its_batch():
    """network-fit refuses loads its network cannot carry (models.errors.InputValidationError naming the
    rows): in a shared pass only that request is refused, with its own row numbers; the others answer."""
    import gridsim
    from gridsim.sampling import sample_loads
    from models.errors import InputValidationError
    from models.network_fit import method_for

    net = gridsim.network("ieee33")
    rng = np.random.default_rng(2)
    x = sample_loads(net, 60, 0.1, rng)
    method = method_for(net)
    fitted = method.fit(x, gridsim.solve(x, network=net).vm_pu)
    good = sample_loads(net, 3, 0.1, rng)
    bad = np.vstack([good[:1], 50.0 * net.base_x[None, :]])  # its row 1 is beyond what the feeder carries
    encoded = Encoded(method, fitted, ContextGeometry.of(x))

    async def scenario(pool):
        batcher = MicroBatcher(pool, window_s=0.05, max_rows=64, on_batch=None)
        asks = [good[:1], bad, good[1:]]
        return await asyncio.gather(
            *(batcher.predict("key", encoded, rows, AnswerSpec()) for rows in asks), return_exceptions=True
        )

    first, refused, last = run(scenario)
    # its own row 1 (in the shared pass of 4 rows it was row 2): refused on its own, as the others answered
    assert isinstance(refused, InputValidationError) and "rows [1]" in str(refused)
    assert first.answer.mean.shape == (1, net.n_outputs) and last.answer.mean.shape == (2, net.n_outputs)

"""service.engine.answers: a part of an answer's wire-dtype `Statistics` and its `OffContext` (`rows`) is the
answer of those rows alone, as a micro-batch's callers each get theirs (service.engine.executor._compute),
with a real method (least squares) on real context geometry."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from models.linear import LeastSquares
from models.off_context import ContextGeometry
from service.engine.answers import (
    SPREAD_DTYPE,
    VOLTAGE_DTYPE,
    AnswerSpec,
    OffContext,
    Statistics,
    answer,
)
from service.engine.executor import Encoded, _compute

LEVELS = (0.05, 0.5, 0.95)
Data = tuple[np.ndarray, np.ndarray, np.ndarray]  # context x, y and the queries
Fitted = tuple[LeastSquares, Any, ContextGeometry]  # the method, its fit, the context's geometry
BAND = (0.99, 1.01)


@pytest.fixture(scope="module")
def data() -> Data:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 64))
    y = 1.0 + 0.01 * (x @ rng.normal(size=(64, 32))) / 8
    queries = 0.3 * x[:23]  # within the context's reach ...
    queries[[4, 11]] = 6.0 * x[[4, 11]]  # ... but two far out: extrapolated
    return x, y, queries


@pytest.fixture(scope="module")
def fitted(data: Data) -> Fitted:
    x, y, _ = data
    method = LeastSquares()
    return method, method.fit(x, y), ContextGeometry.of(x)


def assert_same(got: Statistics, want: Statistics) -> None:
    """Equal values in equal dtypes and shapes, quantiles under the same labels in the same order."""
    for name in ("mean", "std"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_array_equal(a, b)
    assert [label for label, _ in got.quantiles] == [label for label, _ in want.quantiles]
    for (_, a), (_, b) in zip(got.quantiles, want.quantiles, strict=True):
        assert a.dtype == b.dtype == VOLTAGE_DTYPE and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert (got.p_outside_band is None) == (want.p_outside_band is None)
    if got.p_outside_band is not None and want.p_outside_band is not None:
        assert got.p_outside_band.dtype == want.p_outside_band.dtype == SPREAD_DTYPE
        np.testing.assert_array_equal(got.p_outside_band, want.p_outside_band)


SLICES = [(0, 23), (0, 0), (23, 23), (7, 7), (0, 1), (22, 23), (3, 17), (11, 12)]


@pytest.mark.parametrize("spec", [AnswerSpec(LEVELS, BAND), AnswerSpec(), AnswerSpec((0.9,), None)])
def test_rows_of_statistics_are_the_statistics_of_the_rows(data: Data, fitted: Fitted, spec: AnswerSpec) -> None:
    method, value, _ = fitted
    queries = data[2]
    whole = answer(method, value, queries, spec)
    stats = Statistics.of(whole, spec.quantiles)
    assert stats.mean.dtype == VOLTAGE_DTYPE and stats.std.dtype == SPREAD_DTYPE
    assert (stats.p_outside_band is None) == (spec.band is None)
    for start, stop in SLICES:
        part = stats.rows(start, stop)
        assert part.mean.shape == (stop - start, 32)
        assert_same(part, Statistics.of(whole.rows(start, stop), spec.quantiles))
        # views of the pass's arrays, not copies (the docstring's promise: converted once per pass)
        if stop > start:
            assert np.shares_memory(part.mean, stats.mean) and np.shares_memory(part.std, stats.std)
        # the columns a batch result or an Arrow answer writes from a part: the whole's rows start:stop
        outputs = [f"vm_pu_bus{i}" for i in range(2, 34)]
        for (name, column), (whole_name, whole_column) in zip(
            part.columns(outputs), stats.columns(outputs), strict=True
        ):
            assert name == whole_name and column.dtype == whole_column.dtype
            np.testing.assert_array_equal(column, whole_column[start:stop])
    # consecutive parts cover the whole, in order
    cuts = [0, 5, 6, 6, 19, 23]
    parts = [stats.rows(a, b) for a, b in zip(cuts, cuts[1:])]
    np.testing.assert_array_equal(np.concatenate([p.mean for p in parts]), stats.mean)
    for i, (label, values) in enumerate(stats.quantiles):
        assert all(p.quantiles[i][0] == label for p in parts)
        np.testing.assert_array_equal(np.concatenate([p.quantiles[i][1] for p in parts]), values)


def test_rows_keep_the_wire_dtypes_of_any_statistics() -> None:
    """A Statistics' part keeps each array's dtype, whatever it is (float32 or float64 where it was built so)."""
    mean = np.arange(12, dtype=np.float64).reshape(4, 3)
    std = np.arange(12, dtype=np.float32).reshape(4, 3)
    stats = Statistics(mean, std, (("0.5", mean + 0.5),), std / 100)
    part = stats.rows(1, 3)
    assert part.mean.dtype == np.float64 and part.std.dtype == np.float32
    assert part.quantiles[0][1].dtype == np.float64 and part.p_outside_band is not None
    assert part.p_outside_band.dtype == np.float32
    np.testing.assert_array_equal(part.quantiles[0][1], mean[1:3] + 0.5)
    np.testing.assert_array_equal(part.p_outside_band, std[1:3] / 100)
    assert stats.rows(4, 4).mean.shape == (0, 3) and stats.rows(0, 4).mean.shape == (4, 3)


def test_off_context_rows_are_the_off_context_of_the_rows_aligned_with_the_statistics(
    data: Data, fitted: Fitted
) -> None:
    method, value, geometry = fitted
    queries = data[2]
    placed = OffContext.of(geometry, queries)
    assert placed.extrapolation.dtype == np.float64 and placed.extrapolated.dtype == bool
    assert placed.extrapolated[[4, 11]].all() and placed.extrapolated.sum() == 2  # the data's far rows
    stats = Statistics.of(answer(method, value, queries, AnswerSpec(LEVELS, BAND)), LEVELS)
    for start, stop in SLICES:
        part = placed.rows(start, stop)
        alone = (
            OffContext.of(geometry, queries[start:stop]) if stop > start else OffContext(np.zeros(0), np.zeros(0, bool))
        )
        assert part.extrapolation.shape == part.extrapolated.shape == (stop - start,)
        assert part.extrapolation.dtype == np.float64 and part.extrapolated.dtype == bool
        np.testing.assert_allclose(part.extrapolation, alone.extrapolation, rtol=1e-12, atol=0)
        np.testing.assert_array_equal(part.extrapolated, alone.extrapolated)
        assert len(part.extrapolation) == len(stats.rows(start, stop).mean)  # one measure per statistics row
    cuts = [0, 4, 5, 12, 23]
    joined = OffContext.concat([placed.rows(a, b) for a, b in zip(cuts, cuts[1:])])
    np.testing.assert_array_equal(joined.extrapolation, placed.extrapolation)
    np.testing.assert_array_equal(joined.extrapolated, placed.extrapolated)


def test_a_shared_pass_hands_each_caller_its_own_rows(data: Data, fitted: Fitted) -> None:
    """executor._compute: callers of one pass (two specs, uneven sizes, one of a single row) each get the
    statistics and off-context measure of their own queries, as if answered alone."""
    method, value, geometry = fitted
    queries = data[2]
    with_band, plain = AnswerSpec(LEVELS, BAND), AnswerSpec()
    cuts = [0, 1, 9, 10, 23]
    specs = [with_band, plain, with_band, with_band]
    items = [(queries[a:b], spec, None) for (a, b), spec in zip(zip(cuts, cuts[1:]), specs)]
    results = _compute(Encoded(method, value, geometry), items)
    assert len(results) == len(items)
    for (own, spec, _), result in zip(items, results, strict=True):
        alone = answer(method, value, own, spec)
        assert result.statistics is not None and result.batch_rows == 23 and result.batch_requests == 4
        want = Statistics.of(alone, spec.quantiles)
        got = result.statistics
        assert got.mean.shape == (len(own), 32) and got.mean.dtype == VOLTAGE_DTYPE
        assert got.std.dtype == SPREAD_DTYPE
        np.testing.assert_allclose(got.mean, want.mean, rtol=1e-12, atol=0)
        np.testing.assert_allclose(got.std, want.std, rtol=1e-6, atol=0)
        assert [label for label, _ in got.quantiles] == [label for label, _ in want.quantiles]
        for (_, a), (_, b) in zip(got.quantiles, want.quantiles, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
        assert (got.p_outside_band is None) == (spec.band is None)
        if got.p_outside_band is not None and want.p_outside_band is not None:
            np.testing.assert_allclose(got.p_outside_band, want.p_outside_band, rtol=1e-5, atol=1e-7)
        placed = OffContext.of(geometry, own)
        np.testing.assert_allclose(result.off_context.extrapolation, placed.extrapolation, rtol=1e-12, atol=0)
        np.testing.assert_array_equal(result.off_context.extrapolated, placed.extrapolated)

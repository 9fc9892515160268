"""service.engine.sparse and the pieces a sparse context passes through: content ids that hash where values
are missing, the extrapolation measure over measured loads, per-bus metering, the capability check, and
table cells read with missing values allowed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest

import gridsim
from gridsim import departures
from gridsim.sampling import sample_loads
from models.linear import LeastSquares
from models.network_fit import method_for
from models.off_context import ContextGeometry, extrapolated
from models.registry import load_registry
from service.engine import sparse
from service.engine.answers import AnswerSpec, ModelTiming, PredictAnswer, Statistics, Timing, placed_answer
from service.engine.context_sets import ContextSet, context_id
from service.engine.errors import InvalidInput
from service.engine.load_table import InputError, as_float, as_load
from service.http import responses
from service.http.schemas import PredictResponse
from tests.service.conftest import MODEL


@pytest.fixture(scope="module")
def context():
    result = gridsim.simulate(120, 0.2, 2)
    return result.x, result.vm_pu


def test_a_full_context_keeps_the_id_it_always_had(context):
    x, y = context
    digest = hashlib.sha256(b"gridpfn-context-v2")
    digest.update(b"ieee33\0" + struct.pack("<4q", *x.shape, *y.shape))
    digest.update(np.ascontiguousarray(x, dtype="<f8").tobytes() + np.ascontiguousarray(y, dtype="<f8").tobytes())
    assert context_id(x, y) == digest.hexdigest()


def test_missing_values_are_hashed_and_never_collide_with_a_number(context):
    x, y = context
    sparse_y = y.copy()
    sparse_y[:, 4] = np.nan
    negative = sparse_y.copy()
    negative[:, 4] = -np.nan  # another NaN bit pattern: the same missing value
    ids = {context_id(x, sparse_y), context_id(x, negative)}
    assert len(ids) == 1
    filled = y.copy()
    filled[:, 4] = 0.0
    assert context_id(x, filled) not in ids and context_id(x, y) not in ids
    assert context_id(x, sparse_y, typical_loads=x[0]) not in ids
    ctx = ContextSet.build(x, negative, typical_loads=x[0])
    back = ContextSet.from_bytes(ctx.id, ctx.to_bytes())
    assert np.array_equal(back.y, ctx.y, equal_nan=True) and np.array_equal(back.typical_loads, x[0])
    assert back.missing == "y" and back.metering.readings[4] == 0 and back.metering.metered.sum() == y.shape[1] - 1


def test_extrapolation_is_measured_over_the_loads_the_context_measured(context):
    x, y = context
    typical = gridsim.network("ieee33").base_x
    partly = x.copy()
    partly[::5, 9] = np.nan  # partly metered: its mean and variance over the rows that read it
    geometry = sparse.geometry(partly, typical)
    assert geometry.mean[9] == pytest.approx(np.nanmean(partly[:, 9]))
    assert geometry.std[9] == pytest.approx(np.nanstd(partly[:, 9]))
    assert isinstance(sparse.geometry(x, typical), ContextGeometry)  # a full context: the plain geometry


@pytest.mark.parametrize(("share", "loads"), [(0.7, [3]), (0.9, [10]), (0.3, "all"), (0.6, "all")])
def test_loads_metered_in_some_rows_leave_queries_like_the_context_unflagged(share, loads):
    """Loads left unmetered in a share of rows at random: their missing values, filled with the load's mean, took
    its variance down and every row's leverage with it, so queries drawn like the context were flagged (30 % of the
    cells missing: 21-24 % of them; 60 %: 94-98 %). Each load's variance is now its read rows', and each row's
    leverage is taken as a fully read row's would be (models.off_context._full_row_leverage)."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(4)
    x, within = sample_loads(net, 500, 0.1, rng), sample_loads(net, 1000, 0.1, rng)
    columns = range(x.shape[1]) if loads == "all" else loads
    partly = x.copy()
    for column in columns:
        partly[rng.random(500) < share, column] = np.nan
    geometry = sparse.geometry(partly, net.base_x)
    assert extrapolated(geometry.extrapolation(within)).mean() <= 0.02
    assert extrapolated(geometry.extrapolation(within * 1.3)).all()
    doubled = within.copy()
    doubled[:, list(columns)[0]] *= 2.0
    assert extrapolated(geometry.extrapolation(doubled)).all()


def test_a_load_never_metered_counts_about_its_typical_value(context):
    """A user trial: a context with the loads of buses 18-33 never metered and queries putting exactly those at
    twice their base were not flagged (extrapolation 0.66-0.96; 10.3 with them metered). Such a load now counts as
    one that varied about its typical value as much as the metered ones did for its size."""
    x, _ = context
    net = gridsim.network("ieee33")
    never = [c for c in range(x.shape[1]) if net.load_buses[c % net.n_load] >= 18]
    partly = x.copy()
    partly[:, never] = np.nan
    geometry = sparse.geometry(partly, net.base_x)
    kept = np.setdiff1d(np.arange(x.shape[1]), never)
    like_context = x[:20].copy()
    like_context[:, never] = net.base_x[never]  # at their typical value: only the metered loads place the row
    metered = ContextGeometry.of(x[:, kept])
    np.testing.assert_allclose(geometry.leverage(like_context), metered.leverage(x[:20, kept]), rtol=1e-9)
    within = gridsim.simulate(50, 0.2, 3).x  # new rows, the never-metered loads varying as the metered ones did
    assert extrapolated(geometry.extrapolation(within)).mean() <= 0.1
    assert extrapolated(metered.extrapolation(within[:, kept])).mean() <= 0.1  # as with those loads left out
    doubled = x[20:40].copy()
    doubled[:, never] = 2.0 * net.base_x[never]
    assert extrapolated(geometry.extrapolation(doubled)).all()
    nothing = sparse.geometry(np.full_like(x, np.nan), net.base_x)  # no load metered: all about typical values
    assert not extrapolated(nothing.extrapolation(np.tile(net.base_x, (3, 1)))).any()
    assert extrapolated(nothing.extrapolation(np.tile(2.0 * net.base_x, (3, 1)))).all()


def test_loads_that_never_move_or_net_to_zero_do_not_set_the_unmetered_spread():
    """A user trial: reactive loads metered at exactly 0 put the metered loads' median relative spread at 0 (every
    in-range query extrapolated); P netted with PV to about 0 put it far up (those loads at 2x not flagged); a load
    metered in one row put in-range queries at 300-150,000. Only loads that vary about a mean that is no small share
    of the others' set the spread, and one metered in under MIN_METERED_ROWS (10) counts as never metered."""
    net = gridsim.network("ieee33")
    m = net.n_load
    context, queries = gridsim.simulate(300, 0.1, 2).x, gridsim.simulate(200, 0.1, 3).x
    p_never = [c for c in range(m) if net.load_buses[c] >= 18]
    cases = {}
    unity = context.copy()
    unity[:, m:] = 0.0
    unity[:, p_never] = np.nan
    cases["unity power factor"] = (unity, np.concatenate([net.base_x[:m], np.zeros(m)]), p_never, m)
    netted = context.copy()
    pv = [c for c in range(m) if net.load_buses[c] < 18]
    netted[:, pv] = np.random.default_rng(0).normal(0.0, 0.05, (300, len(pv)))
    never = p_never + [m + c for c in p_never]
    netted[:, never] = np.nan
    cases["PV netted"] = (netted, net.base_x, never, None)
    for name, (x, typical, unmetered, q_zero) in cases.items():
        geometry = sparse.geometry(x, typical)
        within = queries.copy()
        if q_zero is not None:
            within[:, q_zero:] = 0.0
        if name == "PV netted":
            within[:, pv] = np.random.default_rng(1).normal(0.0, 0.05, (200, len(pv)))
        assert extrapolated(geometry.extrapolation(within)).mean() <= 0.05, name
        doubled = within.copy()
        doubled[:, unmetered] *= 2.0
        assert extrapolated(geometry.extrapolation(doubled)).all(), name
    once = context.copy()
    once[1:, 5] = np.nan  # metered in one row: about its typical value, as a load never metered
    assert extrapolated(sparse.geometry(once, net.base_x).extrapolation(queries)).mean() <= 0.05


def test_unmetered_loads_that_move_together_count_as_the_metered_ones_do():
    """Loads that move with one daily profile (as a feeder's customers of a class do: SimBench) and half of them never
    metered, each about its true mean and std: counted as independent, their squared z's summed to several times what
    the metered loads' (which move together) add, and over 20 % of queries drawn like the context were flagged; counted
    as the metered loads count (their effective number over their count), none. The unmetered loads at 3x still are,
    but where the row's level was low (tripled, a third of the context's top level is within it)."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(4)

    def rows(n: int) -> np.ndarray:
        level = rng.uniform(0.3, 1.2, (n, 1))  # the day's profile
        return net.base_x * level * (1.0 + 0.01 * rng.standard_normal((n, net.n_features)))

    context, queries = rows(500), rows(400)
    never = np.r_[np.arange(0, net.n_load, 2), net.n_load + np.arange(0, net.n_load, 2)]
    partly = context.copy()
    partly[:, never] = np.nan
    geometry = sparse.geometry(partly, context.mean(axis=0), np.abs(net.base_x))
    assert isinstance(geometry, sparse.MeteredGeometry) and geometry.share < 0.6
    assert extrapolated(geometry.extrapolation(queries)).mean() <= 0.05
    independent = sparse.MeteredGeometry(**{**vars(geometry), "share": 1.0})
    assert extrapolated(independent.extrapolation(queries)).mean() >= 0.2
    tripled = queries.copy()
    tripled[:, never] *= 3.0
    assert extrapolated(geometry.extrapolation(tripled)).mean() >= 0.75


def test_only_methods_that_declare_it_get_missing_values(model_dir):
    registry = load_registry(model_dir, warmup=False, width_free=True)
    net = gridsim.network("ieee33")
    fit, physics = registry.get("network-fit", net), registry.get("physics-fit", net)
    checkpoint = registry.get(MODEL, net)
    assert fit.method.accepts_missing and not physics.method.accepts_missing
    assert not checkpoint.method.accepts_missing
    sparse.refuse_unless_accepted(fit.method, fit.name, "x and y", None)
    sparse.refuse_unless_accepted(physics.method, physics.name, None, None)  # a full context: anyone
    with pytest.raises(InvalidInput) as refused:
        sparse.refuse_unless_accepted(physics.method, physics.name, "y", "context_id")
    entry = refused.value.entries[0]
    assert entry["field"] == "context_id" and "network-fit" in entry["expected"] and "in y" in entry["message"]
    with pytest.raises(InvalidInput) as inline:
        sparse.refuse_unless_accepted(physics.method, physics.name, "x and y", None)
    assert inline.value.entries[0]["field"] == "context.x"
    with pytest.raises(InvalidInput, match=r"body.y\[2\]"):
        sparse.check_rows(np.array([[1.0, np.nan], [np.nan, 1.0], [np.nan, np.nan]]), "body.y")


def test_table_cells_may_be_missing_in_a_context_and_never_in_queries():
    column = pa.chunked_array([[0.1, None, float("nan"), 0.2]])
    with pytest.raises(InputError, match="missing value") as refused:
        as_load(column, "p_mw_bus2", 0)
    assert refused.value.row == 2
    values = as_load(column, "p_mw_bus2", 0, missing=True)
    assert np.isnan(values[1:3]).all() and values[0] == 0.1
    assert np.isnan(as_float(pa.array([None, None]), "vm_pu_bus2", 0, missing=True)).all()  # type null
    with pytest.raises(InputError, match="not finite") as infinite:
        as_float(pa.array([1.0, float("inf")]), "vm_pu_bus2", 10, missing=True)
    assert infinite.value.row == 12
    with pytest.raises(InputError, match="outside"):
        as_load(pa.array([None, 5000.0]), "p_mw_bus2", 0, missing=True)


def _sparse(y: np.ndarray) -> np.ndarray:
    """y with bus 5 never read, bus 9 read in every other row and bus 0 missing once."""
    out = y.copy()
    out[:, 5] = np.nan
    out[::2, 9] = np.nan
    out[3, 0] = np.nan
    return out


def _predict_answer(metering: sparse.Metering, x: np.ndarray, y: np.ndarray) -> PredictAnswer:
    """A real PredictAnswer around `metering`, as service.engine.inference builds one (least squares on the
    context; the metering is what is under test)."""
    method = LeastSquares()
    summary, placed = placed_answer(
        method, method.fit(x, y), ContextGeometry.of(x), x[:3], AnswerSpec((0.05, 0.95), (0.95, 1.05))
    )
    return PredictAnswer(
        model="least-squares",
        network="ieee33",
        context_id="c" * 64,
        outputs=tuple(gridsim.network("ieee33").output_names),
        statistics=Statistics.of(summary, (0.05, 0.95)),
        off_context=placed,
        timing=Timing(0.01, ModelTiming(0.001, 0.002, True, 3)),
        version="1",
        metering=metering,
    )


def test_metering_json_bytes_are_its_json_fields_written(context: tuple[np.ndarray, np.ndarray]) -> None:
    """`json_bytes` parses back (orjson and the standard library alike) to exactly `json()`: the same fields,
    values and types, for metered, partly metered and unmetered buses, and for a context missing nothing."""
    x, y = context
    for values in (_sparse(y), y):
        metering = sparse.Metering.of(values)
        written = metering.json_bytes
        assert set(written) == {"metered", "readings"}
        for name, raw in written.items():
            assert isinstance(raw, bytes)
            assert orjson.loads(raw) == json.loads(raw) == metering.json()[name]
        back = {name: orjson.loads(raw) for name, raw in written.items()}
        assert all(type(v) is bool for v in back["metered"]) and all(type(v) is int for v in back["readings"])
        assert len(back["metered"]) == len(back["readings"]) == y.shape[1]
        expected = (~np.isnan(values)).sum(axis=0)
        assert back["readings"] == expected.tolist() and back["metered"] == (expected > 0).tolist()
    missing = sparse.Metering.of(_sparse(y)).json()
    assert missing["metered"][5] is False and missing["readings"][5] == 0  # never read
    assert missing["readings"][9] == y.shape[0] // 2 and missing["readings"][0] == y.shape[0] - 1
    full = sparse.Metering.of(y).json()
    assert all(full["metered"]) and set(full["readings"]) == {y.shape[0]}  # a context missing nothing


def test_metering_json_bytes_with_a_fit_carry_its_determined_and_are_written_once(
    context: tuple[np.ndarray, np.ndarray], model_dir: Path
) -> None:
    """A network-fit fit adds `determined` (clipped to [0, 1], 6 decimals), its set point, taps and suspect readings'
    offsets to `json()` and
    `json_bytes` alike; the bytes are written once per Metering (a context set's, shared by its answers), and a fit
    without `determined` keeps that same Metering."""
    x, y = context
    ctx = ContextSet.build(x, _sparse(y))
    assert ctx.metering is ctx.metering and ctx.metering.json_bytes is ctx.metering.json_bytes
    assert ctx.metering.with_fit(object()) is ctx.metering  # a fit that says nothing: the set's own bytes
    registry = load_registry(model_dir, warmup=False, width_free=True)
    fit = registry.get("network-fit", gridsim.network("ieee33"))
    fitted = sparse.fit(fit.method, ctx.x, ctx.y, None, gridsim.network("ieee33"))
    metering = ctx.metering.with_fit(fitted)
    fields = {"metered", "readings", "determined", "substation_vm_pu", "tap_steps", "reading_offsets"}
    assert metering is not ctx.metering and set(metering.json_bytes) == fields
    assert set(ctx.metering.json_bytes) == {"metered", "readings"}  # the set's own, unchanged
    for name, raw in metering.json_bytes.items():
        assert orjson.loads(raw) == metering.json()[name]
    determined = orjson.loads(metering.json_bytes["determined"])
    assert len(determined) == y.shape[1] and all(0.0 <= v <= 1.0 for v in determined)
    np.testing.assert_allclose(determined, np.clip(fitted.determined, 0, 1), atol=5e-7, rtol=0)
    assert orjson.loads(metering.json_bytes["substation_vm_pu"]) == pytest.approx(fitted.substation_vm_pu, abs=1e-6)
    assert orjson.loads(metering.json_bytes["tap_steps"]) == pytest.approx(fitted.tap_steps.tolist(), abs=1e-6)
    offsets = orjson.loads(metering.json_bytes["reading_offsets"])
    assert offsets == pytest.approx(fitted.reading_offsets.tolist(), abs=1e-7)
    # rounding and clipping as json() does them, whatever the fit hands over
    odd = type("Fitted", (), {"determined": np.array([0.1234567891, -0.25, 1.5, 0.5])})()
    four = sparse.Metering.of(_sparse(y)[:, :4]).with_fit(odd)
    assert orjson.loads(four.json_bytes["determined"]) == [0.123457, 0.0, 1.0, 0.5]


@pytest.mark.parametrize("sparse_context", [True, False])
def test_the_json_answer_carries_the_metering_as_json_would_write_it(
    context: tuple[np.ndarray, np.ndarray], sparse_context: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """service.http.responses splices `json_bytes` into the JSON answer: parsed, the answer's `metered`,
    `readings` (and `determined`) are `json()`'s, the whole body is byte for byte the one written without the
    pre-written bytes, and it validates as a PredictResponse."""
    x, y = context
    values = _sparse(y) if sparse_context else y
    odd = type("Fitted", (), {"determined": np.linspace(-0.1, 1.1, y.shape[1])})()
    for metering in (sparse.Metering.of(values), sparse.Metering.of(values).with_fit(odd)):
        answer = _predict_answer(metering, x, y)
        written = orjson.dumps(responses.json_body(answer), option=orjson.OPT_SERIALIZE_NUMPY)
        spliced = orjson.loads(written)
        for name, values_written in metering.json().items():
            assert spliced[name] == values_written
        assert ("determined" in spliced) == (metering.determined is not None)
        with monkeypatch.context() as m:
            m.setattr(responses, "_FRAGMENT", None)  # an orjson without Fragment: plain lists
            plain = orjson.dumps(responses.json_body(answer), option=orjson.OPT_SERIALIZE_NUMPY)
        assert written == plain  # byte for byte (== on parsed values would take 1 for true)
        parsed = PredictResponse.model_validate(spliced)
        assert parsed.metered == metering.metered.tolist() and parsed.readings == metering.readings.tolist()


@pytest.mark.parametrize("factor", [1.3, 1.6, 3.0])
def test_one_row_reading_one_far_load_reaches_as_far_as_a_full_row_would(factor):
    """A user trial: 300 fully metered rows plus one row reading only one load at 1.3-1.6x its base turned the flag off
    for every query (loads at 3x included): that row's leverage, scaled to a full row's in proportion to the loads it
    missed, passed 1 and the reference went to 1e15. It now reaches about as far as the same row fully read, with
    every other load at its base."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(8)
    x, within = sample_loads(net, 300, 0.1, rng), sample_loads(net, 500, 0.1, rng)
    partial = np.full((1, x.shape[1]), np.nan)
    partial[0, 16] = net.base_x[16] * factor
    full = net.base_x[None, :].copy()
    full[0, 16] = net.base_x[16] * factor
    doubled = net.base_x[None, :] * 2.0
    read_alone = sparse.geometry(np.vstack([x, partial]), net.base_x).extrapolation(doubled)[0]
    read_whole = sparse.geometry(np.vstack([x, full]), net.base_x).extrapolation(doubled)[0]
    assert read_alone == pytest.approx(read_whole, rel=0.35)
    assert read_alone > 3.0  # every load at twice its base stays far beyond this context
    assert extrapolated(sparse.geometry(np.vstack([x, partial]), net.base_x).extrapolation(within)).mean() <= 0.02


@pytest.mark.parametrize("rows", [16, 50])
def test_no_more_rows_than_loads_takes_missing_loads_at_their_mean(rows):
    """With no more rows than loads every row's leverage is the ridge's, near 1: a missing load counts at its mean
    (models.off_context.ContextGeometry.of), and a few cells missing leave the measure as the full context's (they
    once turned one load at twice its base from flagged to not, 50 rows of IEEE 33 with 10 % of cells missing)."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(rows)
    x, within = sample_loads(net, rows, 0.1, rng), sample_loads(net, 200, 0.1, rng)
    one = within.copy()
    one[:, 16] *= 2.0
    partly = x.copy()
    partly[rng.random(x.shape) < 0.1] = np.nan
    full, missing = sparse.geometry(x, net.base_x), sparse.geometry(partly, net.base_x)
    assert extrapolated(full.extrapolation(one)).all() and extrapolated(missing.extrapolation(one)).all()
    np.testing.assert_allclose(missing.reference, full.reference, rtol=0.3)


@pytest.mark.parametrize("rows", [3, 4, 6])
def test_loads_read_in_a_few_rows_count_as_never_metered(rows):
    """A user trial (helper-66): ten loads of IEEE 33 read in exactly 3 of 300 rows flagged 58 % of queries drawn like
    the context (their spread rested on 3 readings); under MIN_METERED_ROWS they count as never metered, varying
    about their typical values, and one of them at twice its base is still flagged."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(rows)
    x, within = sample_loads(net, 300, 0.1, rng), sample_loads(net, 500, 0.1, rng)
    columns = rng.choice(x.shape[1], 10, replace=False)
    partly = x.copy()
    for column in columns:
        partly[np.setdiff1d(np.arange(300), rng.choice(300, rows, replace=False)), column] = np.nan
    geometry = sparse.geometry(partly, net.base_x)
    assert extrapolated(geometry.extrapolation(within)).mean() <= 0.02
    doubled = within.copy()
    doubled[:, columns[0]] *= 2.0
    assert extrapolated(geometry.extrapolation(doubled)).all()


def _flagged(seed: int, shops: tuple[float, float], unmetered: str) -> list[float]:
    """Queries drawn like a context of a classed feeder (households at 0.05-0.45 of their rating, shops in `shops`,
    PV at 0-1) whose `unmetered` load buses ("generators": PV outweighs consumption; "shops") are never metered: the
    share flagged by `context_geometry`, then by the geometry about the typical values alone."""
    from models.typical_loads import sizes_of
    from tests.models.test_typical_loads import _classed

    rng = np.random.default_rng(seed)
    net = _classed(rng, loads=60)
    parts = np.vstack([net.class_consumption, -net.class_generation])

    def draw(n: int) -> np.ndarray:
        use = np.column_stack([rng.uniform(0.05, 0.45, n), rng.uniform(*shops, n), rng.uniform(0.0, 1.0, n)])
        return use @ parts + rng.normal(0.0, 0.01, (n, parts.shape[1]))

    x, queries = draw(500), draw(1000)
    if unmetered == "generators":
        never = net.base_generation[:60] > net.base_consumption[:60]
    else:
        never = net.class_consumption[1, :60] > 0
    x[:, np.r_[never, never]] = np.nan
    return [
        float((geometry.leverage(queries) / geometry.reference > 1.0).mean())
        for geometry in (
            sparse.context_geometry(x, None, net),
            sparse.geometry(x, sparse.typical_loads(None, net, x), sizes_of(net)),
        )
    ]


@pytest.mark.parametrize("seed", [1, 2])
def test_unmetered_generators_vary_in_the_geometry_as_their_class_does(seed: int) -> None:
    """Buses whose PV outweighs their consumption never metered: their pseudo-measurements swing with the PV the
    metered customers' panels show, as the generators themselves did; taken to vary as the metered loads do per unit
    of size, queries drawn like the context were flagged 14-26 % (the issue asks <= 5 %), with the per-row spread
    at most 3 %."""
    flagged = _flagged(seed, (0.3, 0.9), "generators")
    assert flagged[0] <= 0.03 and flagged[1] >= 0.1, flagged


@pytest.mark.parametrize("seed", [1, 2])
def test_a_class_no_meter_shows_lies_about_its_guess_as_far_as_that_may_err(seed: int) -> None:
    """Every shop never metered, running at 0.8-1.0 of its rating where the metered households run at 0.05-0.45: the
    shops are guessed at the households' utilisation, 3-4x low, and that guess may err by the class's prior
    (models.typical_loads.class_errors). Queries drawn like the context lie within that, so they are not flagged
    (1-MV-rural with its generators unmetered: 20.5 % of such queries were); taken at the guess exactly, they were."""
    flagged = _flagged(seed, (0.8, 1.0), "shops")
    assert flagged[0] <= 0.05 and flagged[1] >= 0.5, flagged


def _ieee33_half_unmetered(
    truth: object,
    seed: int,
    level: float = 1.0,
    profile: bool = False,
    typical: np.ndarray | None = None,
    noise: float = 0.0,
) -> tuple[object, object, np.ndarray, np.ndarray]:
    """network-fit told plain IEEE 33, on 300 context rows of loads each within +-10 % of nominal solved on `truth`,
    half the load buses never metered (their loads at `level` times nominal, context and queries), exact readings:
    (the method, its fit, 300 queries at 1.3-1.5x load, truth). `profile`: the loads follow one profile instead (each
    row's level 0.3-1.2 of nominal, each load +-2 % about it; the queries drawn alike), the unmetered half at `level`
    times what the metered half shows. `typical`: the context's typical_loads (None: the service guesses them); `noise`:
    the readings' noise std (p.u.)."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(seed)

    def around(rows: int) -> np.ndarray:
        if profile:
            return (
                net.base_x
                * rng.uniform(0.3, 1.2, (rows, 1))
                * (1.0 + 0.02 * rng.standard_normal((rows, 2 * net.n_load)))
            )
        return net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, 2 * net.n_load)))

    cx = around(300)
    qx = around(300) if profile else around(300) * rng.uniform(1.3, 1.5, (300, 1))
    never = rng.random(net.n_load) < 0.5
    cx[:, np.r_[never, never]] *= level
    qx[:, np.r_[never, never]] *= level
    cy = gridsim.solve(cx, network=truth, solver="batched").vm_pu
    qy = gridsim.solve(qx, network=truth, solver="batched").vm_pu
    cy = cy + noise * rng.standard_normal(cy.shape)
    cx[:, np.r_[never, never]] = np.nan
    method = method_for(net)
    return method, sparse.fit(method, cx, cy, typical, net), qx, qy


@pytest.mark.parametrize("seed", [5, 7])
def test_loads_that_vary_each_on_their_own_leave_the_feeders_error_to_the_fit(seed: int) -> None:
    """IEEE 33 with every line 0.7-1.3 off its record, half its load buses never metered, loads drawn each on its own
    within +-10 %: the unmetered loads are taken at their typical values, not at the metered ones' chance level of
    the row (models.typical_loads.profile_shares), so network-fit reads the trunk's impedance error as one and holds
    every bus at 1.3-1.5x load. Taking each row's metered level (these seeds, before): a tap placed on branch 1, the
    worst bus held on 0.000 of those queries, 1e-3 p.u. off."""
    net = gridsim.network("ieee33")
    scale = np.random.default_rng([seed, 1]).uniform(0.7, 1.3, net.n_lines)
    truth = dataclasses.replace(net, r_ohm=net.r_ohm * scale, x_ohm=net.x_ohm * scale)
    method, fitted, qx, qy = _ieee33_half_unmetered(truth, seed)
    answer = method.predict(fitted, qx)
    error = np.abs(answer.mean - qy)
    assert not fitted.tap_steps.any(), np.flatnonzero(fitted.tap_steps)
    assert error.mean() < 3e-4, error.mean()
    assert (error <= 1.96 * answer.std).mean(axis=0).min() >= 0.9


@pytest.mark.parametrize("seed", [1, 5])
def test_a_regulator_is_told_from_an_impedance_error_with_loads_at_their_typical_values(seed: int) -> None:
    """IEEE 33 with a +1.25 % regulator between buses 6 and 7 it is not told of, half its load buses never metered,
    exact readings: the step is placed on that branch and every bus holds at 1.3-1.5x load. Where taps tried on every
    branch at once split the step along the chain below the least a device makes, one tap is tried alone
    (models.branch_correction._one_tap); before, these contexts fitted a 480 % impedance error instead, 2.3e-3 p.u.
    off, no bus held."""
    method, fitted, qx, qy = _ieee33_half_unmetered(
        departures.with_regulator(gridsim.network("ieee33"), 6, 7, 0.0125), seed
    )
    answer = method.predict(fitted, qx)
    error = np.abs(answer.mean - qy)
    assert fitted.tap_steps.any()
    assert error.mean() < 1e-5, error.mean()
    assert (error <= 1.96 * answer.std).mean(axis=0).min() >= 0.9


def test_guesses_that_barely_move_are_held_at_their_typical_value() -> None:
    """IEEE 33, the P and Q of every other load never metered, loads drawn each on its own, readings with noise 1e-3:
    the row fit's share came out 0.15 (P) and 0.0004 (Q), so the guesses moved by a sliver of their row's level, a
    query's real unmetered loads lay thousands of the context's stds out in the per-bus stage's inputs, and its spread
    reached 3-4 p.u. (a user trial). A share under models.typical_loads.PROFILE_SHARE_FLOOR is taken as none: every
    std within a few 1e-3 p.u., every bus held."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(1)
    x = net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (200, 64)))
    queries = net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (100, 64)))
    y = gridsim.solve(x, network=net, solver="batched").vm_pu
    truth = gridsim.solve(queries, network=net, solver="batched").vm_pu
    y = y + np.random.default_rng(1000).normal(0.0, 1e-3, y.shape)
    x[:, ::2] = np.nan
    method = method_for(net)
    fitted = sparse.fit(method, x, y, None, net)
    answer = method.predict(fitted, queries)
    assert answer.std.max() < 0.01, answer.std.max()
    assert (np.abs(answer.mean - truth) <= 1.96 * answer.std).mean(axis=0).min() >= 0.9


@pytest.mark.parametrize("level", [1.3, 0.5])
def test_unmetered_loads_at_a_level_their_class_does_not_show_are_fitted_as_that_level(level: float) -> None:
    """IEEE 33 as modelled, half its load buses never metered and running at 1.3x (0.5x) the level the metered half
    shows, loads varying each on their own (their guesses the typical values): the level is fitted beside the feeder's
    errors (service.engine.sparse._load_errors) and the guesses moved by it, so the answer at queries carrying the
    real loads is the model's (seeds 1-4: 9e-9-4.4e-5 p.u.). Before, the level was read as impedance errors: 1.0-1.9e-2
    p.u. off, no bus held (a user trial)."""
    method, fitted, qx, qy = _ieee33_half_unmetered(gridsim.network("ieee33"), 2, level)
    _assert_held(method, fitted, qx, qy, 1e-4)


def _answered(
    net: object,
    cx: np.ndarray,
    qx: np.ndarray,
    never: np.ndarray,
    typical: np.ndarray | None = None,
    noise: float = 0.0,
) -> tuple[float, float]:
    """network-fit's answer at queries qx on a context of loads cx solved exactly on `net` (readings with `noise`,
    p.u.), the load buses `never` never metered (`typical`: the context's typical_loads): its mean error (p.u.) and its
    worst bus's share of queries held in the 95 % interval."""
    cy = gridsim.solve(cx, network=net, solver="batched").vm_pu
    cy = cy + noise * np.random.default_rng(0).standard_normal(cy.shape)
    qy = gridsim.solve(qx, network=net, solver="batched").vm_pu
    unmetered = cx.copy()
    unmetered[:, np.r_[never, never]] = np.nan
    method = method_for(net)
    answer = method.predict(sparse.fit(method, unmetered, cy, typical, net), qx)
    error = np.abs(answer.mean - qy)
    return float(error.mean()), float((error <= 1.96 * answer.std).mean(axis=0).min())


@pytest.mark.parametrize("seed", [1, 2])
def test_a_generator_the_network_does_not_know_on_a_never_metered_bus_is_fitted_as_its_level(seed: int) -> None:
    """IEEE 33 as modelled, half its load buses never metered, one of them with 0.6 MW of PV the network does not know
    of (varying +-20 % by row): that load's own level is fitted beside the feeder's errors (a customer's level, its own
    prior beside the classes'), not the classes' nor the lines'. Before: 7.4-7.6e-3 p.u. off, no bus held; with the
    classes' levels alone 2.0-2.5e-3."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(seed)
    never = rng.random(net.n_load) < 0.5
    at = np.flatnonzero(never)[-1]
    cx, qx = (net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, 2 * net.n_load))) for rows in (300, 300))
    for x in (cx, qx):
        x[:, at] -= 0.6 * rng.uniform(0.8, 1.2, len(x))
    error, held = _answered(net, cx, qx, never)
    assert error < 2e-4 and held >= 0.9, (error, held)


def test_a_class_level_read_exactly_is_not_taken_up_by_its_customers_own_levels() -> None:
    """IEEE 33 as modelled, read exactly, the never-metered half at 0.5x (a user trial's context, 400 rows): each
    customer's own level counts only what its class's cannot move (models.branch_correction's levels apart from the
    first group). Taken up by 22 customers' levels at up to 7,000 of their stds, the guesses moved to 2.8 MW on
    average and the answer was 3.4e-2 p.u. off, no bus held (a 350-row context of the same draw had no power flow at
    the moved guesses: a 422 blaming the user's loads)."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng([12, 73])
    never = rng.random(net.n_load) < 0.5
    factor = np.where(np.r_[never, never], 0.5, 1.0)
    cx, qx = (net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, 2 * net.n_load))) * factor for rows in (400, 300))
    error, held = _answered(net, cx, qx, never)
    assert error < 1e-5 and held >= 0.9, (error, held)


@pytest.mark.parametrize("wrong", [1.3, 0.7])
def test_typical_loads_a_user_gives_wrong_are_corrected_by_the_level_the_readings_show(wrong: float) -> None:
    """IEEE 33 as modelled, half its load buses never metered, the user's `typical_loads` for them 30 % off: where
    loads vary each on their own, a user's values err as the service's guesses would and a level the readings show
    beside them is fitted (service.engine.sparse.fit). Before: 4.5-5.7e-3 p.u. off, no bus held (a user trial)."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng([11, 73])
    never = rng.random(net.n_load) < 0.5
    cx, qx = (net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, 2 * net.n_load))) for rows in (400, 300))
    error, held = _answered(net, cx, qx, never, net.base_x * wrong)
    assert error < 1e-5 and held >= 0.9, (error, held)


def test_a_level_under_readings_noise_is_taken_on_the_evidence_the_noise_leaves() -> None:
    """IEEE 33 as modelled, the never-metered half at 1.3x, readings noise 1e-3 p.u.: the level's evidence (10 over
    none) is below what exact readings need (models.branch_correction.LEVEL_EVIDENCE, their own misfit inflates it),
    but readings this noisy are taken at their word (LEVEL_EVIDENCE_NOISY). Before: 5e-3 p.u. off, no bus held (a user
    trial)."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng([12, 73])
    never = rng.random(net.n_load) < 0.5
    factor = np.where(np.r_[never, never], 1.3, 1.0)
    cx, qx = (net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, 2 * net.n_load))) * factor for rows in (400, 300))
    error, held = _answered(net, cx, qx, never, noise=1e-3)
    assert error < 5e-5 and held >= 0.9, (error, held)


def test_a_per_bus_correction_far_beyond_the_contexts_is_not_taken() -> None:
    """Metered loads sent 1e-6x too small (a units slip), half the load buses never metered: queries at the real
    loads lie 1e6x the context's scale out, where the per-bus stage's linear extrapolation said +-1e9 p.u. (a user
    trial: answered 200). A per-bus correction beyond models.network_fit.PER_BUS_REACH times the context's largest is
    not taken: the network model and branches answer, its spread as wide as the largest correction credible."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(31)
    never = rng.random(net.n_load) < 0.5
    cx, qx = (net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, 2 * net.n_load))) for rows in (300, 50))
    cy = gridsim.solve(cx, network=net, solver="batched").vm_pu
    qy = gridsim.solve(qx, network=net, solver="batched").vm_pu
    slipped = cx * 1e-6
    slipped[:, np.r_[never, never]] = np.nan
    method = method_for(net)
    answer = method.predict(sparse.fit(method, slipped, cy, None, net), qx)
    assert np.abs(answer.mean - qy).max() < 0.05, np.abs(answer.mean - qy).max()
    assert answer.std.max() < 1.0, answer.std.max()


def test_typical_loads_given_right_on_a_feeder_unlike_its_model_hold_under_load_growth() -> None:
    """IEEE 33 with its lines 0.7-1.3 off, half its load buses never metered, the user's `typical_loads` right (the
    nominal loads the rows vary about): each unmetered load's own row-by-row departure is weighed as the service's
    guesses' are, so the impedance fit does not take it for the lines'. Taken as given (no error), the answer at
    1.3-1.5x load was 7.4e-4 p.u. off and held no bus (a user trial, pre-existing)."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng([11, 73])
    never = rng.random(net.n_load) < 0.5
    scale = np.random.default_rng([11, 999]).uniform(0.7, 1.3, net.n_lines)
    truth = dataclasses.replace(net, r_ohm=net.r_ohm * scale, x_ohm=net.x_ohm * scale)
    cx, qx = (net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, 2 * net.n_load))) for rows in (400, 300))
    cy = gridsim.solve(cx, network=truth, solver="batched").vm_pu
    qx = qx * rng.uniform(1.3, 1.5, (300, 1))
    qy = gridsim.solve(qx, network=truth, solver="batched").vm_pu
    cx[:, np.r_[never, never]] = np.nan
    method = method_for(net)
    answer = method.predict(sparse.fit(method, cx, cy, net.base_x, net), qx)
    error = np.abs(answer.mean - qy)
    assert error.mean() < 2e-4, error.mean()
    assert (error <= 1.96 * answer.std).mean(axis=0).min() >= 0.9


def _assert_held(
    method: object, fitted: object, qx: np.ndarray, qy: np.ndarray, mae: float, width: float = np.inf
) -> None:
    """The answer at queries qx within `mae` p.u. of the truth qy on average, every bus held on >= 0.9 of them, its
    95 % intervals narrower than `width` p.u. on average."""
    answer = method.predict(fitted, qx)
    error = np.abs(answer.mean - qy)
    assert error.mean() < mae, error.mean()
    assert (error <= 1.96 * answer.std).mean(axis=0).min() >= 0.9
    assert 2.0 * 1.96 * answer.std.mean() < width, 2.0 * 1.96 * answer.std.mean()


@pytest.mark.parametrize("seed", [1, 2])
def test_a_level_of_unmetered_loads_that_follow_the_profile_is_hedged(seed: int) -> None:
    """Loads following one profile, the unmetered half at 1.3x the metered, readings noise 1e-4 p.u.: such a level and
    the feeder's impedance errors explain the readings alike (the three fits misfit alike, within RECORDED_ANSWERS), so
    the feeder as recorded answers (fewer unknowns) and its spread holds how far the fit of the feeder's errors answers
    (`hedged`): 1e-6 p.u. off, every bus held. The fit of the feeder's errors answered before, 4e-3-1e-2 p.u. off
    (held only by its hedge). That fit's evidence falls 1,400-3,200 short of the recorded feeder's, so its gap is no
    hedge (HEDGE_EVIDENCE): the intervals are under 5e-3 p.u. wide (2-3e-2 with it). With no level departing (1.0x)
    the answer is as near the truth."""
    method, fitted, qx, qy = _ieee33_half_unmetered(gridsim.network("ieee33"), seed, 1.3, profile=True, noise=1e-4)
    assert fitted.levels_found  # the recorded feeder's, with the level found
    _assert_held(method, fitted, qx, qy, 1e-5, width=5e-3)
    method, unmoved, qx, qy = _ieee33_half_unmetered(gridsim.network("ieee33"), seed, profile=True, noise=1e-4)
    _assert_held(method, unmoved, qx, qy, 1e-5)


def test_a_feeder_off_its_record_is_not_answered_as_recorded() -> None:
    """IEEE 33 with every line 0.7-1.3 off its record, loads on one profile, half never metered, noise 1e-4: the
    feeder held as recorded misfits the readings 5-9x more than the fit of its errors, which answers (1e-5 p.u. off,
    every bus held); the recorded feeder's answer is 3e-4-2.6e-3 p.u. off there."""
    net = gridsim.network("ieee33")
    scale = np.random.default_rng([1, 1]).uniform(0.7, 1.3, net.n_lines)
    truth = dataclasses.replace(net, r_ohm=net.r_ohm * scale, x_ohm=net.x_ohm * scale)
    method, fitted, qx, qy = _ieee33_half_unmetered(truth, 1, profile=True, noise=1e-4)
    assert not fitted.levels_found
    _assert_held(method, fitted, qx, qy, 1e-4)


@pytest.mark.parametrize("level", [1.5, 0.5])
def test_a_level_the_feeder_as_recorded_explains_better_answers(level: float) -> None:
    """Loads on one profile, the unmetered half at `level` times the metered, read exactly: the feeder held as recorded
    with the guesses' levels fitted (`NetworkFitMethod.as_recorded`) misfits the readings 5-17x less than the fit of
    the feeder's errors, and answers: 3e-8-1e-7 p.u. off, every bus held. The fit of the feeder's errors answered
    before, 4e-3-1.8e-2 p.u. off; its spread held by a fit with levels, that one 3e-2 off on some seeds (impedance
    errors beside the level), the worst bus at 1.5x held on 0.17-0.27 of queries on 4 of 8 seeds."""
    method, fitted, qx, qy = _ieee33_half_unmetered(gridsim.network("ieee33"), 1, level, profile=True)
    _assert_held(method, fitted, qx, qy, 1e-6)


@pytest.mark.parametrize("level", [1.3, 0.5])
def test_queries_at_the_level_the_fit_found_lie_in_the_context(level: float) -> None:
    """IEEE 33 as modelled, loads each within +-10 % of nominal, half the load buses never metered and at `level`
    times their guess: network-fit finds the level, and the geometry a query is placed in (`fitted_geometry`) puts
    those loads about it, so queries drawn like the context are not flagged `extrapolated` (all were, though the
    answer held every bus: 1.3x 0.04-0.09 of them now on seeds 1-3, 0.5x none); at 1.3-1.5x load they still are. A
    fit that found no level leaves the geometry as it is."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(2)
    never = rng.random(net.n_load) < 0.5
    factor = np.where(np.r_[never, never], level, 1.0)

    def drawn(rows: int) -> np.ndarray:
        return net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, 2 * net.n_load))) * factor

    cx, in_range = drawn(300), drawn(300)
    growth = drawn(300) * rng.uniform(1.3, 1.5, (300, 1))
    cy = gridsim.solve(cx, network=net, solver="batched").vm_pu
    cx[:, np.r_[never, never]] = np.nan
    fitted = sparse.fit(method_for(net), cx, cy, None, net)
    geometry = sparse.context_geometry(cx, None, net)
    placed = sparse.fitted_geometry(geometry, fitted)
    assert fitted.typical_shift is not None and placed is not geometry
    assert extrapolated(geometry.extrapolation(in_range)).mean() == 1.0
    assert extrapolated(placed.extrapolation(in_range)).mean() <= 0.1
    assert extrapolated(placed.extrapolation(growth)).mean() == 1.0
    unmoved = dataclasses.replace(fitted, typical_shift=None)
    assert sparse.fitted_geometry(geometry, unmoved) is geometry


@pytest.mark.parametrize("level", [1.5, 0.5])
def test_queries_at_a_level_that_follows_the_profile_lie_in_the_context(level: float) -> None:
    """Loads on one profile (each row 0.3-1.2 of nominal), half never metered and at `level` times what the metered
    half shows: the level moves each row as its profile runs, and the geometry puts the unmetered loads about where it
    moved them and as far as they ran (`typical_spread`): queries drawn like the context are not flagged (29-35 % were
    at 1.5x, though the answer held every bus); rows at 2-2.2 of nominal, far past the context's highest, all are, and
    at 1.5-1.7 most are, as far as the metered loads alone put them (`MeteredGeometry.extrapolation`: at 0.5x 0-18 %
    were, the unmetered loads moving less than the reference took them to)."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(3)
    never = rng.random(net.n_load) < 0.5
    factor = np.where(np.r_[never, never], level, 1.0)

    def drawn(rows: int, low: float = 0.3, high: float = 1.2) -> np.ndarray:
        profile = rng.uniform(low, high, (rows, 1))
        return net.base_x * profile * (1.0 + 0.02 * rng.standard_normal((rows, 2 * net.n_load))) * factor

    cx, in_range, beyond, far = drawn(300), drawn(300), drawn(300, 1.5, 1.7), drawn(300, 2.0, 2.2)
    cy = gridsim.solve(cx, network=net, solver="batched").vm_pu
    cx[:, np.r_[never, never]] = np.nan
    fitted = sparse.fit(method_for(net), cx, cy, None, net)
    placed = sparse.fitted_geometry(sparse.context_geometry(cx, None, net), fitted)
    assert fitted.levels_found and fitted.typical_spread is not None
    assert extrapolated(placed.extrapolation(in_range)).mean() <= 0.05
    assert extrapolated(placed.extrapolation(beyond)).mean() >= 0.6, extrapolated(placed.extrapolation(beyond)).mean()
    assert extrapolated(placed.extrapolation(far)).mean() == 1.0


@pytest.mark.parametrize("seed", [1, 2])
def test_typical_loads_a_user_gives_for_loads_that_follow_the_profile_err_as_guesses_do(seed: int) -> None:
    """Loads on one profile (each row 0.3-1.2 of nominal), half never metered, the user's typical_loads the nominal
    loads: each row's unmetered loads are 0.3-1.2x the values given. They are weighed and widened as the service's
    guesses are (no level fitted: its constant took the set point's place) and the answer hedged: every bus held,
    3-5e-4 p.u. off. Taken as given, the worst bus held on 0.01 of queries, 8-10e-3 p.u. off."""
    net = gridsim.network("ieee33")
    method, fitted, qx, qy = _ieee33_half_unmetered(net, seed, profile=True, typical=np.asarray(net.base_x))
    answer = method.predict(fitted, qx)
    error = np.abs(answer.mean - qy)
    assert error.mean() < 1e-3, error.mean()
    assert (error <= 1.96 * answer.std).mean(axis=0).min() >= 0.9


def test_guesses_alike_in_every_row_do_not_let_the_model_error_run_off() -> None:
    """1-LV-rural1's first 600 of 3,000 steps, half its load buses with no meter at all (loads and voltages), the
    unmetered loads' true means given as typical values, readings noise 1e-3, 400 rows: those columns are
    near-collinear in the context (guessed alike in every row), and the linear probe of the model's voltages
    extrapolated along them without bound at queries, whose loads vary on their own: a miss of 8,000 p.u. and
    intervals [-4049, 4051] p.u. on buses read in every row (a user trial). Its miss is now bounded by how far the
    model's voltages moved (`_bounded_miss`): every std under 0.05 p.u., every bus held at the next 200 steps and at
    1.3-1.5x them."""
    from gridsim.simbench_data import consumption_and_generation, simbench_network, step_indices

    code = "1-LV-rural1--0-sw"
    net = simbench_network(code)
    consumption, generation = consumption_and_generation(code, net, step_indices(3000)[:600])
    x = consumption - generation
    rng = np.random.default_rng(0)
    never = np.zeros(net.n_load, dtype=bool)
    never[rng.choice(net.n_load, net.n_load // 2, replace=False)] = True
    cx = x[:400].copy()
    cy = gridsim.solve(cx, network=net, solver="batched").vm_pu + rng.normal(0.0, 1e-3, (400, net.n_outputs))
    cy[:, net.load_positions[never]] = np.nan
    typical = cx.mean(axis=0)
    cx[:, np.r_[never, never]] = np.nan
    qx = np.concatenate([x[400:], x[400:] * rng.uniform(1.3, 1.5, (200, 1))])
    qy = gridsim.solve(qx, network=net, solver="batched").vm_pu
    method = method_for(net)
    answer = method.predict(sparse.fit(method, cx, cy, typical, net), qx)
    assert answer.std.max() < 0.05, answer.std.max()
    assert (np.abs(answer.mean - qy) <= 1.96 * answer.std).mean(axis=0).min() >= 0.9

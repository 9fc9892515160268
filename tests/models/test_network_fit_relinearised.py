"""network-fit's second pass (models.network_fit.NetworkFitMethod._relinearised): the fit taken again about the
network with the first fit's impedance errors, taps and set point applied, its prior centred on the recorded model.
Truth: the batched solver on the feeder as it really is; the method is told plain IEEE 33."""

from __future__ import annotations

import numpy as np
import pytest

import gridsim
from gridsim.departures import with_regulator
from models import network_fit
from models.linear import LeastSquares
from models.network_fit import method_for


@pytest.fixture(scope="module")
def ieee33():
    return gridsim.network("ieee33")


def _context(truth, seed, noise, n=500, m=600):
    """The brief's protocol: context and in-range queries within +-10 % of the base loads, growth queries at 1.3-1.5x
    (drawn in that order from one generator)."""
    base = gridsim.network("ieee33").base_x
    rng = np.random.default_rng(seed)

    def around(rows):
        return base * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, (rows, base.shape[0])))

    cx, inside = around(n), around(m)
    growth = around(m) * rng.uniform(1.3, 1.5, (m, 1))

    def solve(x):
        return gridsim.solve(x, network=truth, solver="batched").vm_pu

    cy = solve(cx) + noise * rng.standard_normal((n, truth.n_outputs))
    return cx, cy, {"in range": (inside, solve(inside)), "growth": (growth, solve(growth))}


def _scores(method, fitted, queries, truth):
    answer = method.predict(fitted, queries)
    low, high = answer.interval(0.95)
    return float(np.abs(answer.mean - truth).mean()), float(((truth >= low) & (truth <= high)).mean(axis=0).min())


@pytest.mark.parametrize("seed", [3, 5])
def test_a_regulator_under_noise_is_relinearised_more_accurate_and_still_held(ieee33, seed, monkeypatch):
    """A +1.25 % regulator at 6-7 the model lacks, readings noise 1e-5: the first order in the tap and the impedance
    errors misses its losses, so the fit is taken again about the feeder with the tap: in range 0.12-0.15x least
    squares -> 0.06-0.09x, at 1.3-1.5x load 0.012x -> 0.001x. Seed 5 is the context where the second fit with its
    prior centred on the first fit (not on the model) left a bus 3.3 of its stds off (worst bus covered 0.09): the
    readings counted twice. Every bus is still held, and the user sees the tap and set point in the model's terms."""
    cx, cy, queries = _context(with_regulator(ieee33, 6, 7, 0.0125), seed, 1e-5)
    method = method_for(ieee33)
    fitted = method.fit(cx, cy)
    assert fitted.relinearised is not None
    steps = fitted.tap_steps
    bus7 = ieee33.output_buses.index(7)
    assert steps[bus7] == pytest.approx(0.0125, rel=0.01)
    assert not np.delete(steps, bus7).any()
    assert fitted.substation_vm_pu == pytest.approx(ieee33.slack_vm_pu, abs=1e-5)
    monkeypatch.setattr(network_fit, "RELINEARISE_Z", np.inf)  # the first pass alone, as before
    first = method.fit(cx, cy)
    assert first.relinearised is None
    for name, (x, truth) in queries.items():
        least_squares = float(np.abs(LeastSquares()(cx, cy, x).mean - truth).mean())
        error, covered = _scores(method, fitted, x, truth)
        before, _ = _scores(method, first, x, truth)
        assert error <= {"in range": 0.1, "growth": 0.003}[name] * least_squares, name
        assert error <= {"in range": 0.8, "growth": 0.3}[name] * before, name
        assert covered >= 0.95, name
    method.refuse_unsolved(fitted, queries["growth"][0], np.zeros(len(queries["growth"][0])))  # solvable: no refusal


@pytest.mark.parametrize("noise", [0.0, 1e-5])
def test_the_model_itself_read_takes_no_second_pass(ieee33, noise):
    """The service's cold path: readings of the model itself, exact or noisy, whose fitted errors are the model's (the
    impedance probe misses nothing the readings pin): one pass."""
    cx, cy, _ = _context(ieee33, 1, noise, m=1)
    assert method_for(ieee33).fit(cx, cy).relinearised is None


def test_a_second_pass_answers_through_its_own_network(ieee33):
    """With a second pass, every answer reads the corrected network's voltage model and that fit's branch stage
    (`answering`): at_queries and predict agree, and a meter ranking (models.meter_placement) runs on that pair."""
    from models.meter_placement import rank_meters

    cx, cy, queries = _context(with_regulator(ieee33, 6, 7, 0.0125), 4, 1e-5, m=50)
    cy[:, 20:25] = np.nan  # five buses no meter reads
    method = method_for(ieee33)
    fitted = method.fit(cx, cy)
    assert fitted.relinearised is not None
    inner, second = method.answering(fitted)
    assert inner is fitted.relinearised.method and second is fitted.relinearised.fitted
    x = queries["growth"][0]
    np.testing.assert_array_equal(method.at_queries(fitted, x).mean, inner.at_queries(second, x).mean)
    np.testing.assert_array_equal(method.predict(fitted, x).mean, inner.predict(second, x).mean)
    np.testing.assert_array_equal(fitted.determined, second.determined)
    ranking = rank_meters(inner, second, cx, x)
    assert sorted(ranking.candidates.tolist()) == list(range(20, 25))
    outer = rank_meters(method, fitted, cx, x)  # as the service asks it: the outer pair answers through the inner
    assert outer.current == ranking.current
    np.testing.assert_array_equal(outer.largest_spread, ranking.largest_spread)


def test_a_relinearised_fit_keeps_the_guesses_errors_as_the_recorded_model_shows_them(ieee33):
    """Loads guessed (half the load buses never metered) beside a regulator the model lacks: the second fit's
    network took up part of the guesses' errors, so the readings depart less from it; the answer's spread keeps at
    least what the recorded model showed of them (1-LV-rural1, a quarter metered: a first fit far off had the
    relinearised spread hold the worst bus on 0.22 of queries)."""
    from models import typical_loads
    from service.engine import sparse

    cx, cy, _ = _context(with_regulator(ieee33, 6, 7, 0.0125), 3, 1e-5)
    never = np.random.default_rng(3).random(ieee33.n_load) >= 0.5
    partly = cx.copy()
    partly[:, np.r_[never, never]] = np.nan
    blocks = [typical_loads.class_errors(partly, ieee33), typical_loads.customer_errors(partly, ieee33)]
    fitted = method_for(ieee33).fit(partly, cy, sparse.pseudo_loads(None, ieee33, partly), blocks)
    assert fitted.relinearised is not None
    first = np.asarray(fitted.pseudo_var)
    assert (first > 0).all() and np.all(np.asarray(fitted.relinearised.fitted.pseudo_var) >= first)

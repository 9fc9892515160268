"""network-fit (models.network_fit): the network model's power flow plus a correction from the context.
Truth: the batched solver (agrees with pandapower to ~1e-9 p.u., tests/gridsim) on the feeder as it
really is, which may differ from the model the method is given."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import gridsim
from gridsim.api import VoltageModel
from gridsim.departures import with_regulator, with_set_point
from gridsim.sampling import sample_loads
from gridsim.tree import downstream
from models.calibration import simultaneous_factor
from models.errors import InputValidationError
from models.linear import LeastSquares
from models.network_fit import NetworkFitMethod, branch_impedance, method_for
from models.physics_base import PhysicsBaseMethod

LEVELS = (0.025, 0.975)


@pytest.fixture(scope="module")
def ieee33():
    return gridsim.network("ieee33")


def _coverage(summary, truth):
    inside = (truth >= summary.quantiles[0]) & (truth <= summary.quantiles[1])
    return float(inside.mean(axis=0).min())


def test_the_per_bus_stage_keeps_no_fit_of_noise_alone_but_keeps_a_mismatch(ieee33, monkeypatch):
    """Model right, noise 1e-3 p.u.: bus by bus a few of 32 per-bus fits of the noise stood 1.5-2.5 sigmas out and
    were kept, erring by it; taken only beyond noise's worst bus of 32, none is in any of 5 draws, the answer at
    1.3-1.5x load errs less than half as much as one taking them, and every bus holds the truth (a fit not taken
    stays in the spread: a real offset of 3 sigma / sqrt(n) on one bus is held, helper-54). Lines 0.7-1.3 off, read
    exactly or with noise 1e-5: taken (the buses together show more than noise)."""
    from models import network_fit

    rng = np.random.default_rng(5)
    x = sample_loads(ieee33, 500, 0.1, rng)
    queries = sample_loads(ieee33, 200, 0.1, rng) * rng.uniform(1.3, 1.5, (200, 1))
    method = method_for(ieee33)
    truth_of = VoltageModel(ieee33)
    errors = {}
    served = network_fit.PER_BUS_FALSE_KEEP
    for false_keep in (float(ieee33.n_outputs), served):  # k: each bus on its own (limit 0, as before)
        monkeypatch.setattr(network_fit, "PER_BUS_FALSE_KEEP", false_keep)
        errors[false_keep] = []
        for draw in range(5):
            y = truth_of(x) + np.random.default_rng([5, draw]).normal(0.0, 1e-3, (500, ieee33.n_outputs))
            fitted = method.fit(x, y)
            assert false_keep != served or not fitted.keep.any()
            summary = method.summarize(fitted, queries, LEVELS)
            assert _coverage(summary, truth_of(queries)) >= 0.9, "a fit not taken still widens as it did"
            errors[false_keep].append(np.abs(summary.mean - truth_of(queries)).mean())
    assert np.mean(errors[served]) <= 0.5 * np.mean(errors[float(ieee33.n_outputs)])
    scale = rng.uniform(0.7, 1.3, ieee33.n_lines)
    real = VoltageModel(dataclasses.replace(ieee33, r_ohm=ieee33.r_ohm * scale, x_ohm=ieee33.x_ohm * scale))
    assert np.all(method.fit(x, real(x)).keep > 0.9)
    # read with noise 1e-5 the mismatch shows on many buses at once: each bus's fit is taken as far as its odds say
    noisy = method.fit(x, real(x) + rng.normal(0.0, 1e-5, (500, ieee33.n_outputs)))
    assert noisy.keep.max() > 0.5 and np.array_equal(noisy.keep, noisy.signal_odds)


@pytest.mark.parametrize(
    ("bus", "bias", "noise"),
    [(18, 2e-3, 1e-3), (7, 5e-4, 1e-5), (31, 2e-4, 1e-5)],
    ids=["last-bus-as-a-tap", "mid-feeder", "small"],
)
def test_a_biased_meter_is_named_set_aside_and_its_bus_still_held(ieee33, bus, noise, bias):
    """One meter reads `bias` p.u. high (the feeder as modelled): the branch stage had absorbed it (on the last bus a
    0.22 % tap, mid-feeder impedance errors bent along its path) and answered that bus `bias` off at 1/27 of it as
    std, its neighbours covering 0.82. Now its offset is named (`reading_offsets`), its readings are set aside (its
    bus answered from the other meters: within 5 % of the bias of the truth) and the spread holds both cases."""
    rng = np.random.default_rng(8)
    x = sample_loads(ieee33, 500, 0.1, rng)
    queries = sample_loads(ieee33, 200, 0.1, rng) * rng.uniform(1.3, 1.5, (200, 1))
    truth_of = VoltageModel(ieee33)
    j = ieee33.output_buses.index(bus)
    y = truth_of(x) + rng.normal(0.0, noise, (500, ieee33.n_outputs))
    y[:, j] += bias
    method = method_for(ieee33)
    fitted = method.fit(x, y)
    assert np.flatnonzero(fitted.reading_offsets).tolist() == [j]
    assert fitted.reading_offsets[j] == pytest.approx(bias, rel=0.1)
    summary = method.summarize(fitted, queries, LEVELS)
    truth = truth_of(queries)
    assert np.abs(summary.mean[:, j] - truth[:, j]).mean() <= 0.05 * bias
    assert _coverage(summary, truth) >= 0.9


def test_a_biased_meter_on_a_real_grid_is_no_step_with_the_opposite_step_below_it():
    """SimBench 1-LV-semiurb4 (a development grid), a year's first 300 of 600 steps read with noise 1e-3 p.u., one
    meter 2e-3 high: the branch stage had fitted it as a step on that bus's branch and the opposite step on each of
    its children's (buses 1 and 24: taps at 1, 2 and 9; at 19 and 24), answering the bus 2e-3 off. Now it is named,
    no step is left, and the bus is answered within 5 % of the bias over the rest of the year."""
    from gridsim.simbench_data import add_meter_noise, simbench_network, simbench_year

    code = "1-LV-semiurb4--0-sw"
    x, y, _ = simbench_year(code, steps=600)
    method = method_for(simbench_network(code))
    for j in (1, 24):
        readings = add_meter_noise(y[:300], 1e-3, np.random.default_rng(j))
        readings[:, j] += 2e-3
        fitted = method.fit(x[:300], readings)
        assert np.flatnonzero(fitted.reading_offsets).tolist() == [j] and not fitted.tap_steps.any()
        summary = method.summarize(fitted, x[300:], LEVELS)
        assert np.abs(summary.mean[:, j] - y[300:, j]).mean() <= 0.05 * 2e-3
        assert _coverage(summary, y[300:]) >= 0.9


@pytest.mark.parametrize(("head", "bus", "step"), [(4, 5, 0.025), (8, 9, -0.0125), (6, 7, 0.00625)])
def test_a_regulator_the_fit_bends_around_names_no_meter(ieee33, head, bus, step):
    """A regulator the model lacks, on a branch with metered buses below it, loads +-30 %, readings noise 1e-3: where
    the fit takes it as impedance errors or as steps on the next branches, the bus just below it showed an offset
    of its own (named in 1-2 of 30 contexts, helper-56); the buses below it share that offset in its own test, so it
    is a step, not that bus's meter. (On a branch no other meter lies below, a step reads as a biased meter and is
    named as one or the other: `reading_offsets`' documentation.)"""
    real = VoltageModel(with_regulator(ieee33, head, bus, step))
    method = method_for(ieee33)
    for seed in range(4):
        rng = np.random.default_rng([head, seed])
        x = sample_loads(ieee33, 200, 0.3, rng)
        fitted = method.fit(x, real(x) + rng.normal(0.0, 1e-3, (200, ieee33.n_outputs)))
        assert not fitted.reading_offsets.any(), (seed, np.flatnonzero(fitted.reading_offsets))


@pytest.mark.parametrize("departure", ["none", "lines", "set point", "regulator"])
def test_honest_meters_are_not_named_whatever_the_feeder_departs_by(ieee33, departure):
    """No meter is named where every meter reads the feeder as it is, its model right or not (lines 0.7-1.3 off,
    the substation at 1.03 p.u., a +1.25 % regulator): read exactly, at 1e-5 and at 1e-3 p.u. (held-out predictions
    had named 2-4 buses whose branch the others pin only weakly, read exactly with lines off)."""
    rng = np.random.default_rng(9)
    real = ieee33
    if departure == "lines":
        scale = rng.uniform(0.7, 1.3, ieee33.n_lines)
        real = dataclasses.replace(ieee33, r_ohm=ieee33.r_ohm * scale, x_ohm=ieee33.x_ohm * scale)
    elif departure == "set point":
        real = with_set_point(ieee33, 1.03)
    elif departure == "regulator":
        real = with_regulator(ieee33, 6, 7, 0.0125)
    x = sample_loads(ieee33, 500, 0.1, rng)
    clean = VoltageModel(real)(x)
    method = method_for(ieee33)
    for noise in (0.0, 1e-5, 1e-3):
        fitted = method.fit(x, clean + rng.normal(0.0, noise, clean.shape))
        assert not fitted.reading_offsets.any(), (noise, np.flatnonzero(fitted.reading_offsets))


def test_the_tree_puts_every_bus_below_the_buses_on_its_path(ieee33):
    below = downstream(ieee33)
    names = list(ieee33.output_buses)
    assert below.diagonal().all()
    assert below[names.index(2)].all()  # bus 2 feeds the whole feeder
    path_18 = [names[c] for c in np.flatnonzero(below[:, names.index(18)])]
    assert path_18 == list(range(2, 19))
    path_22 = [names[c] for c in np.flatnonzero(below[:, names.index(22)])]
    assert path_22 == [2, 19, 20, 21, 22]


def test_under_meter_noise_it_beats_least_squares_per_bus(ieee33):
    rng = np.random.default_rng(3)
    truth_of = VoltageModel(ieee33)
    x = sample_loads(ieee33, 300, 0.3, rng)
    y = truth_of(x) + rng.normal(0.0, 1e-3, (300, ieee33.n_outputs))
    queries = sample_loads(ieee33, 300, 0.3, rng)
    truth = truth_of(queries)
    method = method_for(ieee33)
    ours = method.summarize(method.fit(x, y), queries, LEVELS)
    ls = LeastSquares()
    theirs = ls.predict(ls.fit(x, y), queries)
    ratio = np.abs(ours.mean - truth).mean() / np.abs(theirs.mean - truth).mean()
    assert ratio <= 0.5
    assert _coverage(ours, truth) >= 0.9


def test_a_feeder_unlike_its_model_is_corrected_and_honest_off_the_context(ieee33):
    rng = np.random.default_rng(5)
    scale = rng.uniform(0.7, 1.3, ieee33.n_lines)
    real = dataclasses.replace(ieee33, r_ohm=ieee33.r_ohm * scale, x_ohm=ieee33.x_ohm * scale)
    truth_of = VoltageModel(real)
    x = sample_loads(ieee33, 400, 0.1, rng)
    y = truth_of(x)
    below = downstream(ieee33)
    method = NetworkFitMethod(VoltageModel(ieee33), below, ieee33.load_positions, branch_impedance(ieee33, below))
    fitted = method.fit(x, y)
    physics = PhysicsBaseMethod(ieee33.load_positions)
    physics_fitted = physics.fit(x, y)
    for queries in (sample_loads(ieee33, 300, 0.1, rng), sample_loads(ieee33, 300, 0.1, rng) * 1.4):
        truth = truth_of(queries)
        ours = method.summarize(fitted, queries, LEVELS)
        model_alone = VoltageModel(ieee33)(queries)
        assert np.abs(ours.mean - truth).mean() < 0.05 * np.abs(model_alone - truth).mean()
        assert _coverage(ours, truth) >= 0.9
    # the context's own fit (physics-fit) is as accurate here but confidently wrong: no spread for growth
    plain = physics.predict(physics_fitted, queries)
    lo, hi = plain.interval(0.95)
    assert float(((truth >= lo) & (truth <= hi)).mean(axis=0).min()) < 0.5


@pytest.mark.parametrize(("lines_off", "noise", "widest"), [(True, 0.0, 5.0), (True, 1e-5, 5.0), (False, 1e-5, 30.0)])
def test_off_the_context_the_spread_is_what_the_impedance_probe_misses(ieee33, lines_off, noise, widest):
    """Queries at 1.3-1.5x load, on a feeder whose lines are 0.7-1.3 off (not told) or on the model itself with
    noisy readings: the model-error term is the method's own miss on the network with the fitted impedance errors
    (models.corrected_network), the per-bus stage counted as signal only as far as its positive-part factor says,
    so intervals hold every bus at a few times the width that just covers (40-350x before; on the model itself 26x
    since the answer takes no fit of the noise: its error fell, the spread still hedges the fit it did not take)."""
    rng = np.random.default_rng(5)
    scale = rng.uniform(0.7, 1.3, ieee33.n_lines) if lines_off else np.ones(ieee33.n_lines)
    truth_of = VoltageModel(dataclasses.replace(ieee33, r_ohm=ieee33.r_ohm * scale, x_ohm=ieee33.x_ohm * scale))
    x = sample_loads(ieee33, 500, 0.1, rng)
    y = truth_of(x) + rng.normal(0.0, noise, (500, ieee33.n_outputs))
    queries = sample_loads(ieee33, 400, 0.1, rng) * rng.uniform(1.3, 1.5, (400, 1))
    truth = truth_of(queries)
    method = method_for(ieee33)
    fitted = method.fit(x, y)
    assert fitted.impedance_probe is not None
    ours = method.summarize(fitted, queries, LEVELS)
    assert _coverage(ours, truth) >= 0.9
    just_cover = 2.0 * np.quantile(np.abs(ours.mean - truth), 0.95, axis=0).mean()
    assert (ours.quantiles[1] - ours.quantiles[0]).mean() <= widest * just_cover  # measured 2.3, 2.3, 26


def _off_context(truth_network, noise, seed=7):
    """network-fit told plain IEEE 33, its readings from `truth_network` (500 rows within +-10 %), queries at
    1.3-1.5x load: (fitted, summary, truth)."""
    rng = np.random.default_rng(seed)
    truth_of = VoltageModel(truth_network)
    x = sample_loads(truth_network, 500, 0.1, rng)
    y = truth_of(x) + rng.normal(0.0, noise, (500, truth_network.n_outputs))
    queries = sample_loads(truth_network, 400, 0.1, rng) * rng.uniform(1.3, 1.5, (400, 1))
    method = method_for(gridsim.network("ieee33"))
    fitted = method.fit(x, y)
    return fitted, method.summarize(fitted, queries, LEVELS), truth_of(queries)


def _taps(fitted):
    """(k,) the branch stage's fitted taps, (t^2 - 1) / 2 for a ratio t at each branch's head (0: no tap)."""
    return fitted.branches.tap_halves


@pytest.mark.parametrize("noise", [0.0, 1e-3])
def test_a_substation_set_point_the_model_does_not_know_is_fitted(ieee33, noise):
    """The real substation at 1.03 p.u., the model's at 1.0: the readings' common offset is the set point moved,
    and the model is solved there (AtSetPoint), so the losses it scales are right off the context too (at noise
    1e-3 the answer was 1.2e-4 p.u. off at a 5e-5 spread, no bus covered; at noise 0 one in two)."""
    fitted, ours, truth = _off_context(with_set_point(ieee33, 1.03), noise)
    _, right, right_truth = _off_context(ieee33, noise)
    assert fitted.set_point == pytest.approx(1.03, abs=1e-4)
    assert not np.any(_taps(fitted))
    assert np.abs(ours.mean - truth).mean() <= 1.2 * np.abs(right.mean - right_truth).mean() + 1e-8
    assert _coverage(ours, truth) >= 0.9


@pytest.mark.parametrize("noise", [0.0, 1e-5, 1e-3])
def test_a_regulator_the_model_does_not_know_is_fitted_as_a_tap(ieee33, noise):
    """A regulator raising buses 7-18 by 1.25 %, the model without it: a tap on branch 6-7 explains the readings
    with the model's impedances (before, an impedance error of ~300 % did, 2.4e-3 p.u. off at 1.3-1.5x load with
    no bus covered at noise 1e-3); the impedance probe solves the feeder with that regulator, so what the first-order
    tap misses off the context (the losses the step moves) is in the spread where the readings' noise hides it
    from the per-bus stage (noise 1e-5: no bus covered without)."""
    fitted, ours, truth = _off_context(with_regulator(ieee33, 6, 7, 0.0125), noise)
    taps = _taps(fitted)
    placed = [ieee33.output_buses[i] for i in np.flatnonzero(taps)]
    assert placed == [7]
    assert taps[ieee33.output_buses.index(7)] == pytest.approx((1.0125**2 - 1.0) / 2.0, rel=0.05)
    assert np.abs(ours.mean - truth).mean() <= {0.0: 2e-6, 1e-5: 3e-5, 1e-3: 1e-4}[noise]
    assert _coverage(ours, truth) >= 0.9
    if noise == 0.0:  # the step's penalty chosen by evidence (TAP_WEAKER_GRID): 39x the covering width before, 2.0x
        just_cover = 2.0 * np.quantile(np.abs(ours.mean - truth), 0.95, axis=0).mean()
        assert (ours.quantiles[1] - ours.quantiles[0]).mean() <= 3.0 * just_cover


@pytest.mark.parametrize("where", ["two regulators, 3-4 and 9-10", "a lateral's regulator, 26-27 +2.5 %"])
def test_regulators_anywhere_are_fitted_and_their_spread_holds(ieee33, where):
    """An attacker pass (helper-50), readings noise 1e-3: two regulators, or one on a lateral, were each fitted as a
    tap but the buses below them sat 2-3 spreads off at 1.3-1.5x load (worst-bus coverage 0.00 and 0.09): the
    impedance probe chose its own prior on exact readings and so missed little, where the answer's prior, chosen at
    the readings' noise, held the impedances still. The probe now keeps the answer's priors (`prior`)."""
    real = (
        with_regulator(with_regulator(ieee33, 3, 4, 0.0125), 9, 10, 0.0125)
        if where.startswith("two")
        else with_regulator(ieee33, 26, 27, 0.025)
    )
    fitted, ours, truth = _off_context(real, 1e-3, seed=0)
    placed = [ieee33.output_buses[i] for i in np.flatnonzero(_taps(fitted))]
    assert placed == ([4, 10] if where.startswith("two") else [27])
    assert _coverage(ours, truth) >= 0.9


def test_impedance_errors_alone_place_no_tap(ieee33):
    """Lines 0.7-1.3 off: the evidence may favour small steps somewhere, but none a tap makes (TAP_MIN_STEP), so no
    tap is fitted and the branch stage is the impedances' alone."""
    rng = np.random.default_rng(5)
    scale = rng.uniform(0.7, 1.3, ieee33.n_lines)
    for noise in (0.0, 1e-5, 1e-3):
        fitted, ours, truth = _off_context(
            dataclasses.replace(ieee33, r_ohm=ieee33.r_ohm * scale, x_ohm=ieee33.x_ohm * scale), noise
        )
        assert not np.any(_taps(fitted))
        assert _coverage(ours, truth) >= 0.9


def test_loads_the_feeder_cannot_carry_are_refused_by_row(ieee33):
    rng = np.random.default_rng(1)
    x = sample_loads(ieee33, 100, 0.1, rng)
    method = method_for(ieee33)
    fitted = method.fit(x, VoltageModel(ieee33)(x))
    queries = x[:3].copy()
    queries[1] *= 40.0
    with pytest.raises(InputValidationError, match=r"queries: .*rows \[1\]"):
        method.predict(fitted, queries)


def test_the_simultaneous_factor_is_one_for_one_bus_and_grows_with_buses():
    assert simultaneous_factor(1) == pytest.approx(1.0)
    assert 1.5 < simultaneous_factor(32) < 2.0


def test_the_simultaneous_factor_follows_the_errors_correlation_across_buses():
    """Independent errors: Bonferroni's factor (the cap: what every bus took before); one error shared by every bus:
    one output's at 99 % (a shared miss is a miss on every bus); two groups of buses each sharing one: two
    independent outputs' at 99 % together; and the same covariance, the same factor."""
    from scipy.stats import norm

    from models.calibration import correlated_simultaneous_factor

    assert correlated_simultaneous_factor(np.eye(32)) == pytest.approx(simultaneous_factor(32))
    shared = norm.ppf(0.995) / norm.ppf(0.975)
    assert correlated_simultaneous_factor(np.full((32, 32), 4e-12)) == pytest.approx(shared, rel=1e-6)
    groups = np.kron(np.eye(2), np.ones((16, 16))) * 1e-10
    assert correlated_simultaneous_factor(groups) == pytest.approx(norm.ppf(1 - 0.01 / 4) / norm.ppf(0.975), rel=0.03)
    rng = np.random.default_rng(0)
    a = rng.normal(size=(32, 2))
    assert correlated_simultaneous_factor(a @ a.T) == correlated_simultaneous_factor(a @ a.T)
    assert 1.0 < correlated_simultaneous_factor(a @ a.T) < simultaneous_factor(32)


def test_buses_that_err_apart_are_held_at_the_family_level_as_a_shared_error_is(ieee33):
    """Every bus read with noise 1e-3 p.u. (lines 0.7-1.3 off): each bus's level is its own readings' mean, so the buses
    err apart and the factor had been capped at Bonferroni's 95 %: 6-7 of 100 bench contexts left a bus under 0.90
    (bench seed 12: one meter's noise mean 3.4 standard errors out, its bus covered 0.10). Now at FAMILY_LEVEL (99 %)
    as a shared error is: Bonferroni's at 99 % at most, above its 95 %."""
    from scipy.stats import norm

    rng = np.random.default_rng(12)
    scale = rng.uniform(0.7, 1.3, ieee33.n_lines)
    real = VoltageModel(dataclasses.replace(ieee33, r_ohm=ieee33.r_ohm * scale, x_ohm=ieee33.x_ohm * scale))
    x = sample_loads(ieee33, 500, 0.1, rng)
    fitted = method_for(ieee33).fit(x, real(x) + rng.normal(0.0, 1e-3, (500, ieee33.n_outputs)))
    k = ieee33.n_outputs
    assert simultaneous_factor(k) * 1.05 < fitted.simultaneous <= norm.ppf(1 - 0.005 / k) / norm.ppf(0.975) + 1e-9


def test_a_year_of_real_profiles_with_meter_noise_context_from_winter_queries_all_year():
    """SimBench 1-LV-rural1 (a development grid): a year of 15-minute load and PV profiles, 600 steps
    evenly spaced; the context is the first 100 in time with readings noise 1e-3 p.u., the queries
    the rest of the year (spring, summer PV)."""
    from gridsim.simbench_data import add_meter_noise, simbench_network, simbench_year

    code = "1-LV-rural1--0-sw"
    x, y, stamps = simbench_year(code, steps=600)
    net = simbench_network(code)
    context, queries = np.arange(100), np.arange(100, 600)
    assert stamps[context].max() < stamps[queries].min()
    readings = add_meter_noise(y[context], 1e-3, np.random.default_rng(0))
    method = method_for(net)
    ours = method.summarize(method.fit(x[context], readings), x[queries], LEVELS)
    ls = LeastSquares()
    theirs = ls.predict(ls.fit(x[context], readings), x[queries])
    truth = y[queries]
    assert np.abs(ours.mean - truth).mean() <= 0.5 * np.abs(theirs.mean - truth).mean()
    assert _coverage(ours, truth) >= 0.9


def test_a_context_whose_loads_never_move_still_gets_a_finite_answer(ieee33):
    """A steady operating point read by noisy meters: every row the same loads. The correction is an
    offset; the spread stays finite (it was an overflow: the model's response over the context is 0)."""
    rng = np.random.default_rng(0)
    x = np.repeat(ieee33.base_x[None], 100, axis=0)
    truth_of = VoltageModel(ieee33)
    y = truth_of(x) + rng.normal(0.0, 1e-3, (100, ieee33.n_outputs))
    method = method_for(ieee33)
    queries = np.vstack([ieee33.base_x, 1.3 * ieee33.base_x])
    answer = method.predict(method.fit(x, y), queries)
    assert np.isfinite(answer.mean).all() and np.isfinite(answer.std).all()
    assert np.abs(answer.mean - truth_of(queries)).max() < 1e-3
    nothing = method.predict(method.fit(np.zeros_like(x), y), queries)  # no load at all: no information
    assert np.isfinite(nothing.std).all()


@pytest.mark.parametrize("load", [0.0, 1e-9, 1e-8])
def test_a_context_of_no_load_says_nothing_of_the_impedances_and_the_spread_says_so(ieee33, load):
    """With (next to) no load a feeder draws no current: its readings are 1.0 p.u. whatever its lines, so they pin
    no impedance. On a feeder whose lines are 0.7-1.3 off its model, queries at loads 0.5-1.5x nominal err by ~1e-3
    p.u.; the spread was 2e-9 there (no load: the readings fitted exactly made the noise, and every branch's prior,
    0) and 1e-6-1e-7 (1e-9 and 1e-8 MW: the evidence rose to its grid's end, certain of every impedance)."""
    rng = np.random.default_rng(3)
    scale = rng.uniform(0.7, 1.3, ieee33.n_lines)
    truth_of = VoltageModel(dataclasses.replace(ieee33, r_ohm=ieee33.r_ohm * scale, x_ohm=ieee33.x_ohm * scale))
    x = np.full((50, ieee33.base_x.shape[0]), load)
    queries = ieee33.base_x * rng.uniform(0.5, 1.5, (200, ieee33.base_x.shape[0]))
    truth = truth_of(queries)
    method = method_for(ieee33)
    fitted = method.fit(x, truth_of(x))
    assert fitted.branches is not None
    assert fitted.branches.prior_var >= 0.01  # relative errors of 10 % and more (MAX_RELATIVE_ERROR: 50 %)
    ours = method.summarize(fitted, queries, LEVELS)
    assert np.abs(ours.mean - truth).mean() > 1e-4  # the model alone, as wrong as its lines
    assert _coverage(ours, truth) >= 0.95


def _mismatched(ieee33, seed: int, rows: int = 400):
    """(truth's VoltageModel, context loads, their true voltages, queries, their truth): IEEE 33 whose every
    line is 0.7-1.3 off the model the method is given (issue 30's protocol), loads +-30 %."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.7, 1.3, ieee33.n_lines)
    truth_of = VoltageModel(dataclasses.replace(ieee33, r_ohm=ieee33.r_ohm * scale, x_ohm=ieee33.x_ohm * scale))
    x, queries = sample_loads(ieee33, rows, 0.3, rng), sample_loads(ieee33, 300, 0.3, rng)
    return x, truth_of(x), queries, truth_of(queries), rng


@pytest.mark.parametrize("seed", [0, 1])
def test_a_quarter_of_buses_metered_corrects_the_rest_with_honest_spreads(ieee33, seed):
    """Readings at 8 random buses of 32 (null elsewhere): the buses no meter reads are corrected well
    beyond the uncorrected power flow, every bus's 95 % interval covers, and the metered buses stay as
    exact as under full metering."""
    x, y, queries, truth, rng = _mismatched(ieee33, seed)
    metered = np.zeros(ieee33.n_outputs, dtype=bool)
    metered[rng.choice(ieee33.n_outputs, 8, replace=False)] = True
    method = method_for(ieee33)
    fitted = method.fit(x, np.where(metered, y, np.nan))
    ours = method.summarize(fitted, queries, LEVELS)
    error = np.abs(ours.mean - truth).mean(axis=0)
    model_alone = np.abs(VoltageModel(ieee33)(queries) - truth).mean(axis=0)
    assert error[~metered].mean() <= 0.3 * model_alone[~metered].mean()
    assert error[metered].mean() <= 1e-3 * model_alone[metered].mean()
    assert _coverage(ours, truth) >= 0.9
    assert np.array_equal(fitted.metered > 0, metered) and (fitted.determined[metered] > 0.9).all()


def test_a_lateral_no_meter_lies_on_keeps_the_prior_and_says_so(ieee33):
    """Buses 23-25 never read, every other bus read: their branches are seen by no meter, so the answer
    there is the uncorrected power flow's, with a spread as wide as the prior (covering), and they are
    marked undetermined; the trunk they hang from is still corrected."""
    x, y, queries, truth, _ = _mismatched(ieee33, 7)
    names = list(ieee33.output_buses)
    lateral = [names.index(b) for b in (23, 24, 25)]
    y = y.copy()
    y[:, lateral] = np.nan
    method = method_for(ieee33)
    fitted = method.fit(x, y)
    ours = method.summarize(fitted, queries, LEVELS)
    assert (fitted.determined[lateral[1:]] < 0.5).all() and np.delete(fitted.determined, lateral).min() > 0.9
    assert _coverage(ours, truth) >= 0.9
    assert ours.std[:, lateral].min() > 10 * np.delete(ours.std, lateral, axis=1).max()
    trunk = names.index(3)  # bus 23 hangs from bus 3: its correction is bus 3's plus its own branch's
    assert np.abs(ours.mean[:, trunk] - truth[:, trunk]).max() < 1e-5


def test_unmetered_loads_take_their_typical_values_and_still_beat_least_squares(ieee33):
    """30 % of load buses never metered (null; true loads +-30 % around base), every voltage read: every
    bus is predicted better than least squares on the metered loads alone, and covered."""
    x, y, queries, truth, rng = _mismatched(ieee33, 11)
    unmetered = rng.choice(ieee33.n_load, round(0.3 * ieee33.n_load), replace=False)
    columns = np.concatenate([unmetered, ieee33.n_load + unmetered])
    sparse_x = x.copy()
    sparse_x[:, columns] = np.nan
    method = method_for(ieee33)
    ours = method.summarize(method.fit(sparse_x, y), queries, LEVELS)
    kept = np.setdiff1d(np.arange(ieee33.n_features), columns)
    ls = LeastSquares()
    theirs = ls.predict(ls.fit(x[:, kept], y), queries[:, kept])
    ratio = np.abs(ours.mean - truth).mean(axis=0) / np.abs(theirs.mean - truth).mean(axis=0)
    assert ratio.mean() <= 0.3 and ratio.max() <= 0.5
    assert _coverage(ours, truth) >= 0.9


def test_pseudo_measurements_that_may_err_together_widen_every_bus_they_move(ieee33):
    """`load_errors`: a unit-std error moving two unmetered loads together adds its effect on each bus (the network
    model's sensitivity: on a radial feeder every bus, the trunk carries them; at most what the readings show) to the
    spread at every query, times the simultaneous factor; most where the loads are."""
    rng = np.random.default_rng(7)
    x = sample_loads(ieee33, 300, 0.1, rng)
    y = VoltageModel(ieee33)(x) + rng.normal(0.0, 1e-5, (300, ieee33.n_outputs))
    partly = x.copy()
    partly[:, [20, 21]] = np.nan  # two loads far down a lateral, never metered
    errors = np.zeros((ieee33.n_features, 1))
    errors[[20, 21], 0] = 0.3 * ieee33.base_x[[20, 21]]
    method = method_for(ieee33)
    plain = method.fit(partly, y, ieee33.base_x)
    widened = method.fit(partly, y, ieee33.base_x, errors)
    queries = sample_loads(ieee33, 20, 0.1, rng)
    before, after = method.predict(plain, queries).std, method.predict(widened, queries).std
    pseudo = np.asarray(widened.pseudo_var)
    at_loads = [list(ieee33.output_buses).index(ieee33.load_buses[j]) for j in (20, 21)]
    assert (pseudo > 0.0).all() and pseudo[at_loads].min() > 2.0 * np.median(pseudo)
    # the network model's move of each bus for the error (a finite difference at the completed loads' mean), at most
    # what the readings show: their mean square departure from the model at the completed loads
    completed = np.where(np.isnan(partly), ieee33.base_x, partly)
    mean = completed.mean(axis=0)
    moved = VoltageModel(ieee33)(np.vstack([mean, mean + 1e-3 * errors[:, 0]]))
    shown = np.mean(np.square(y - VoltageModel(ieee33)(completed)), axis=0)
    np.testing.assert_allclose(pseudo, np.minimum(np.square((moved[1] - moved[0]) / 1e-3), shown), rtol=0.02)
    # held in the spread at every query, times the simultaneous factor (the fit itself also weighs the readings by
    # that error's covariance: the rest of the spread moves a little too)
    assert np.all(np.square(after) >= 0.9 * np.square(widened.simultaneous) * pseudo)
    assert np.median(np.square(after) - np.square(before)) > 0.5 * np.median(np.square(widened.simultaneous) * pseudo)

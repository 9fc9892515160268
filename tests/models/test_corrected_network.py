"""The network with network-fit's fitted impedance errors (models.corrected_network): each branch's relative
error lands on the line or transformer feeding its bus, so the probe solves the feeder those errors describe."""

from __future__ import annotations

import dataclasses

import numpy as np

import gridsim
from gridsim.api import VoltageModel
from gridsim.sampling import sample_loads
from gridsim.tree import downstream
from models.corrected_network import CorrectedNetwork, incoming_branch


def test_errors_of_one_minus_the_true_scales_give_the_real_feeders_voltages():
    """IEEE 33 with every line's impedance scaled by its own factor: the model with relative errors 1 - factor
    on each line's branch is that feeder, to the solver's precision."""
    ieee33 = gridsim.network("ieee33")
    rng = np.random.default_rng(0)
    scale = rng.uniform(0.7, 1.3, ieee33.n_lines)
    real = dataclasses.replace(ieee33, r_ohm=ieee33.r_ohm * scale, x_ohm=ieee33.x_ohm * scale)
    below = downstream(ieee33)
    line_fed, _ = incoming_branch(ieee33, below)
    errors = np.zeros(2 * ieee33.n_outputs)
    errors[line_fed] = 1.0 - scale
    errors[ieee33.n_outputs + line_fed] = 1.0 - scale
    x = sample_loads(ieee33, 20, 0.3, rng)
    corrected = CorrectedNetwork(ieee33, below).at(errors)(x)
    np.testing.assert_allclose(corrected, VoltageModel(real)(x), rtol=0, atol=1e-10)
    assert np.abs(corrected - VoltageModel(ieee33)(x)).max() > 1e-3  # the errors matter


def test_a_transformers_error_moves_every_bus_below_it_and_zero_errors_change_nothing():
    net = gridsim.network("kerber_landnetz_kabel_1")
    below = downstream(net)
    _, trafo_fed = incoming_branch(net, below)
    assert below[trafo_fed[0]].all()  # the substation transformer feeds every output bus
    x = sample_loads(net, 5, 0.2, np.random.default_rng(1))
    model = VoltageModel(net)(x)
    np.testing.assert_allclose(CorrectedNetwork(net, below).at(np.zeros(2 * net.n_outputs))(x), model, atol=1e-12)
    errors = np.zeros(2 * net.n_outputs)
    errors[trafo_fed[0]] = errors[net.n_outputs + trafo_fed[0]] = -0.5  # the transformer 1.5x its recorded impedance
    lower = CorrectedNetwork(net, below).at(errors)(x)
    assert (lower < model - 1e-6).all()  # more drop through it at every bus


def test_an_error_past_what_a_feeder_can_be_is_clipped_to_a_solvable_one():
    ieee33 = gridsim.network("ieee33")
    below = downstream(ieee33)
    x = sample_loads(ieee33, 3, 0.1, np.random.default_rng(2))
    v = CorrectedNetwork(ieee33, below).at(np.full(2 * ieee33.n_outputs, 5.0))(x)  # impedances would be negative
    assert np.isfinite(v).all()


def test_a_fitted_tap_makes_the_line_a_regulator_of_that_step():
    """The branch stage's tap on the branch into bus 7, (t^2 - 1) / 2 for t = 1.0125: the probe solves IEEE 33 with
    a +1.25 % regulator on line 6-7 (gridsim.departures), the feeder such a tap describes."""
    from gridsim.departures import with_regulator

    ieee33 = gridsim.network("ieee33")
    below = downstream(ieee33)
    steps = np.zeros(ieee33.n_outputs)
    steps[ieee33.output_buses.index(7)] = (1.0125**2 - 1.0) / 2.0
    x = sample_loads(ieee33, 10, 0.3, np.random.default_rng(2))
    stepped = CorrectedNetwork(ieee33, below).at(np.zeros(2 * ieee33.n_outputs), steps)(x)
    np.testing.assert_allclose(stepped, VoltageModel(with_regulator(ieee33, 6, 7, 0.0125))(x), rtol=0, atol=1e-12)
    plain = CorrectedNetwork(ieee33, below).at(np.zeros(2 * ieee33.n_outputs), np.zeros(ieee33.n_outputs))(x)
    np.testing.assert_allclose(plain, VoltageModel(ieee33)(x), rtol=0, atol=1e-12)

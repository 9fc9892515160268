"""gridsim.departures: the feeder as built, for benches and tests of what network-fit finds."""

from __future__ import annotations

import numpy as np
import pytest

import gridsim
from gridsim.departures import with_regulator, with_set_point
from gridsim.errors import NetworkError


@pytest.fixture(scope="module")
def ieee33():
    return gridsim.network("ieee33")


def _solve(network, x):
    return gridsim.solve(x, network=network, solver="batched").vm_pu


def test_a_regulator_of_no_step_is_the_line_it_replaces(ieee33):
    x = ieee33.base_x[None] * np.array([[0.5], [1.0], [1.4]])
    assert np.abs(_solve(with_regulator(ieee33, 6, 7, 0.0), x) - _solve(ieee33, x)).max() < 1e-12


def test_a_regulator_raises_the_buses_below_it_by_its_step(ieee33):
    x = ieee33.base_x[None]
    plain, stepped = _solve(ieee33, x)[0], _solve(with_regulator(ieee33, 6, 7, 0.0125), x)[0]
    index = {bus: i for i, bus in enumerate(ieee33.output_buses)}
    below = [index[b] for b in range(7, 19)]
    above = [index[b] for b in (2, 3, 4, 5, 6, 19, 22)]
    # bus 7 sits at 1.0125 x bus 6 less the line's drop, which the lighter current shrinks
    assert stepped[below] - plain[below] == pytest.approx(0.0125 * plain[below], rel=0.1)
    assert np.abs(stepped[above] - plain[above]).max() < 2e-5  # less current upstream: a little higher


def test_the_set_point_moves_every_bus(ieee33):
    x = ieee33.base_x[None]
    moved = _solve(with_set_point(ieee33, 1.03), x)[0] - _solve(ieee33, x)[0]
    # by the set point's 0.03, and a little more the deeper the bus (the same loads draw less current)
    assert moved.min() > 0.03 and moved.max() < 0.034


def test_a_regulator_on_a_line_that_is_not_there_is_refused(ieee33):
    with pytest.raises(NetworkError, match="no line between buses 6 and 9"):
        with_regulator(ieee33, 6, 9, 0.0125)

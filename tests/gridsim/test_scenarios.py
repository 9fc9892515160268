"""Scenarios in a planner's terms (gridsim.scenarios): consumption and generation kept apart."""

from __future__ import annotations

import numpy as np
import pytest

import gridsim
from gridsim.errors import NetworkError
from gridsim.feeders import network_id, snapshot
from gridsim.scenarios import DER, Scenario, TimeSeries, expand
from tests.gridsim.feeder_cases import small_feeder


def test_a_net_with_an_sgen_keeps_consumption_and_generation_apart():
    net = snapshot(small_feeder(), name="small")
    bus = net.load_buses.index(net.bus_numbers[2])
    assert net.base_gen_p_mw[bus] == pytest.approx(0.15) and net.base_generation.sum() == pytest.approx(0.15)
    np.testing.assert_allclose(net.base_consumption - net.base_generation, net.base_x)
    assert net.base_consumption[bus] == pytest.approx(0.4)
    grown = expand(net, [Scenario("grown", load_scale=1.4)]).rows[0]
    np.testing.assert_allclose(grown, 1.4 * net.base_consumption - net.base_generation)  # the sgen kept
    assert grown[bus] == pytest.approx(1.4 * 0.4 - 0.15)
    # the content id of a net without generation is what it was before the generation fields existed
    # (ids given out before them stay valid); one with generation counts them
    plain = snapshot(_without_sgen(small_feeder()), name="small")
    assert not len(plain.base_gen_p_mw)
    assert network_id(plain) == "59e930b699bc3c91df0c45218a89ea8eddfb8e6f16ff0659b90e22f5b734f6fd"
    assert network_id(gridsim.network("ieee33")) == "df43e3906022472237bef3f9b0fd8896a9ec7c5ac5020fbb450fe4623116c167"


def _without_sgen(net):
    net.sgen.drop(net.sgen.index, inplace=True)
    return net


def test_der_per_bus_scaling_growth_years_and_a_time_series_expand_in_order():
    net = gridsim.network("ieee33")
    n = net.n_load
    scenario = Scenario(
        "plan",
        load_scale=1.2,
        bus_load_scale={18: 2.0},
        der=(DER(18, 250.0), DER(33, 100.0, 20.0)),
        growth_rate=0.1,
        years=(0, 2),
    )
    series = TimeSeries(("t0", "t1", "t2"), np.array([1.0, 0.5, 0.8]), np.array([0.0, 1.0, 0.5]), 0.25)
    out = expand(net, [scenario, Scenario("base")], series)
    assert out.rows.shape == (2 * 3 + 3, 2 * n)
    assert out.scenario == ("plan",) * 6 + ("base",) * 3 and out.year == (0, 0, 0, 2, 2, 2, 0, 0, 0)
    assert out.timestamp == ("t0", "t1", "t2") * 3
    at18, at33 = net.load_buses.index(18), net.load_buses.index(33)
    c = net.base_consumption
    # year 2, step t1: consumption x 1.2 x 1.1^2 x 0.5 (x2 at bus 18), PV at full output
    row = out.rows[4]
    assert row[at18] == pytest.approx(c[at18] * 1.2 * 1.21 * 0.5 * 2.0 - 0.25)
    assert row[n + at33] == pytest.approx(c[n + at33] * 1.2 * 1.21 * 0.5 - 0.02)
    assert out.rows[0][at18] == pytest.approx(c[at18] * 1.2 * 2.0)  # step t0: no PV
    np.testing.assert_allclose(out.rows[6], c * 1.0)  # "base" at t0
    # factors per step and load bus: bus 18's consumption and PV follow their own profiles
    per_bus = TimeSeries(("t0",), np.full((1, n), 0.5), np.zeros((1, n)))
    per_bus.load[0, at18], per_bus.pv[0, at18] = 2.0, 1.0
    row = expand(net, [scenario], per_bus).rows[0]
    assert row[at18] == pytest.approx(c[at18] * 1.2 * 2.0 * 2.0 - 0.25) and row[at33] == pytest.approx(c[at33] * 0.6)


def test_a_bus_that_is_not_a_load_bus_is_named_in_the_error():
    net = gridsim.network("ieee33")
    with pytest.raises(NetworkError, match="not a load bus") as info:
        expand(net, [Scenario("x"), Scenario("y", der=(DER(1, 5.0),))])
    assert info.value.field == "scenarios[1].der[0].bus"
    with pytest.raises(NetworkError) as shape:
        expand(net, [Scenario("x")], TimeSeries(("a",), np.ones(2), np.ones(1)))
    assert shape.value.field == "time_series.load"

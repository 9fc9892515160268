"""Scenarios in a planner's terms (gridsim.scenarios): consumption and generation kept apart."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import gridsim
from gridsim import scenarios
from gridsim.errors import NetworkError
from gridsim.feeders import network_id, snapshot
from gridsim.network import Network
from gridsim.scenarios import DER, Classes, Expansion, Scenario, TimeSeries, expand, expand_blocks, unused_profiles
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


def _classed_feeder() -> Network:
    """small_feeder with SimBench-style classes: its loads' `profile` H0-A, H0-A (scaled 0.5, fused onto the
    same bus) and G1-A, the sgen's PV5; uploaded as pandapower JSON, so the classes pass the reader."""
    import pandapower as pp

    from gridsim.feeders import from_pandapower_json

    net = small_feeder()
    net.load["profile"] = ["H0-A", "G1-A", "H0-A"]
    net.sgen["profile"] = ["PV5"]
    return from_pandapower_json(pp.to_json(net))


def test_an_uploads_classes_split_its_consumption_and_generation():
    net = _classed_feeder()
    assert net.class_names == ("G1-A", "H0-A", "PV5")
    np.testing.assert_allclose(net.class_consumption.sum(axis=0), net.base_consumption)
    np.testing.assert_allclose(net.class_generation.sum(axis=0), net.base_generation)
    two, three = net.load_buses.index(net.bus_numbers[2]), net.load_buses.index(net.bus_numbers[3])
    h0 = net.class_consumption[1]
    assert h0[two] == pytest.approx(0.4) and h0[three] == pytest.approx(0.1)  # 0.2 x scaling 0.5, fused onto bus 3
    assert net.class_generation[2][two] == pytest.approx(0.15)
    # a net whose loads have no class (ieee33; Kerber's pandapower connection type 'wye') keeps none, and its id
    assert gridsim.network("ieee33").class_names == () and gridsim.network("kerber_landnetz_kabel_1").class_names == ()


def test_class_scaling_and_simbench_profiles_move_their_class_alone():
    net = _classed_feeder()
    n, c = net.n_load, Classes.of(net)
    two, three = net.load_buses.index(net.bus_numbers[2]), net.load_buses.index(net.bus_numbers[3])
    base = expand(net, [Scenario("base")]).rows[0]
    np.testing.assert_allclose(base, net.base_x)
    doubled = expand(net, [Scenario("h0 x2", class_scaling={"H0-A": 2.0})]).rows[0]
    np.testing.assert_allclose(doubled - base, c.consumption[1])  # H0-A's consumption once more, nothing else
    series = TimeSeries(
        ("t0", "t1"),
        np.ones(2),
        np.ones(2),
        profiles={
            "H0-A_pload": np.array([0.5, 1.0]),
            "H0-A_qload": np.array([0.0, 2.0]),
            "PV5": np.array([0.0, 0.8]),
            "PV9": np.array([1.0, 0.3]),
            "WP4": np.array([1.0, 1.0]),
        },
    )
    der = DER(net.bus_numbers[3], 100.0, profile="PV9")
    out = expand(net, [Scenario("year", load_scale=1.1, der=(der,))], series)
    assert out.unused_profiles == ("WP4",)  # no class or DER takes it: reported
    g1, h0 = c.consumption[0], c.consumption[1]
    row = out.rows[1]  # t1: H0-A P x 1, Q x 2; PV5 at 0.8; the DER at PV9's 0.3
    assert row[two] == pytest.approx(1.1 * (h0[two] + g1[two]) - 0.8 * 0.15)
    assert row[n + two] == pytest.approx(1.1 * (2.0 * h0[n + two] + g1[n + two]))
    assert row[three] == pytest.approx(1.1 * (h0[three] + g1[three]) - 0.1 * 0.3)
    row = out.rows[0]  # t0: H0-A's P x 0.5 and Q x 0, no PV, the DER at full output
    assert row[three] == pytest.approx(1.1 * (0.5 * h0[three] + g1[three]) - 0.1)
    assert row[n + three] == pytest.approx(1.1 * g1[n + three])
    with pytest.raises(NetworkError, match="no customer class 'H0-B'") as info:
        expand(net, [Scenario("x", class_scaling={"H0-B": 2.0})])
    assert info.value.field == "scenarios[0].class_scaling"
    with pytest.raises(NetworkError, match="no profile 'PV7'") as info:
        expand(net, [Scenario("x", der=(DER(net.bus_numbers[3], 5.0, profile="PV7"),))], series)
    assert info.value.field == "scenarios[0].der[0].profile"
    with pytest.raises(NetworkError, match="no time series") as info:  # not dropped: the DER would run at full output
        expand(net, [Scenario("x", der=(DER(net.bus_numbers[3], 5.0, profile="PV9"),))])
    assert info.value.field == "scenarios[0].der[0].profile"


def test_classes_as_bus_lists_on_a_built_in():
    net = gridsim.network("ieee33")
    classes = Classes.of_buses(net, {"commercial": [18, 19, 20], "residential": [2, 3]})
    rows = expand(net, [Scenario("shops +50 %", class_scaling={"commercial": 1.5})], classes=classes).rows[0]
    changed = np.flatnonzero(~np.isclose(rows, net.base_x))
    assert sorted({net.load_buses[i % net.n_load] for i in changed}) == [18, 19, 20]
    series = TimeSeries(("t0",), np.ones(1), np.ones(1), profiles={"residential": np.array([0.5])})
    row = expand(net, [Scenario("night")], series, classes).rows[0]
    at2 = net.load_buses.index(2)
    assert row[at2] == pytest.approx(0.5 * net.base_x[at2]) and row[net.n_load + at2] == pytest.approx(
        0.5 * net.base_x[net.n_load + at2]
    )
    with pytest.raises(NetworkError, match="also in class 'commercial'") as info:
        Classes.of_buses(net, {"commercial": [18], "other": [18]})
    assert info.value.field == "classes.other"
    with pytest.raises(NetworkError, match="not a load bus"):
        Classes.of_buses(net, {"x": [1]})


def test_a_study_is_prepared_once_for_its_rows_and_its_unused_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """`expand` checks the time series and resolves the classes' profiles once (not once for the rows and
    again for the unused profiles); `Expansion`'s blocks, rows and unused profiles are the module functions'."""
    net = _classed_feeder()
    series = TimeSeries(
        ("t0", "t1"),
        np.array([1.0, 0.5]),
        np.array([0.0, 1.0]),
        profiles={"H0-A_pload": np.array([0.5, 1.0]), "PV9": np.array([1.0, 0.3]), "WP4": np.array([1.0, 1.0])},
    )
    der = DER(net.bus_numbers[3], 100.0, profile="PV9")
    plans = [Scenario("year", load_scale=1.1, der=(der,), years=(0, 3), growth_rate=0.02), Scenario("base")]
    calls = {"check": 0, "profiles": 0}
    check, profiles = scenarios._check_series, scenarios._class_profiles

    def counted_check(*args: Any) -> None:
        calls["check"] += 1
        return check(*args)

    def counted_profiles(*args: Any) -> Any:
        calls["profiles"] += 1
        return profiles(*args)

    monkeypatch.setattr(scenarios, "_check_series", counted_check)
    monkeypatch.setattr(scenarios, "_class_profiles", counted_profiles)
    out = expand(net, plans, series)
    assert calls == {"check": 1, "profiles": 1}
    assert out.unused_profiles == ("WP4",) and out.rows.shape == (3 * 2, 2 * net.n_load)

    prepared = Expansion.of(net, plans, series)
    assert calls == {"check": 2, "profiles": 2}
    blocks = list(prepared.blocks())
    again = prepared.expanded()
    assert prepared.unused_profiles() == unused_profiles(net, plans, series) == ("WP4",)
    assert calls == {"check": 3, "profiles": 3}  # only the module function prepared again
    assert [(b.scenario, b.year, b.timestamps) for b in blocks] == [
        ("year", 0, ("t0", "t1")),
        ("year", 3, ("t0", "t1")),
        ("base", 0, ("t0", "t1")),
    ]
    np.testing.assert_array_equal(np.concatenate([b.rows for b in blocks]), out.rows)
    np.testing.assert_array_equal(again.rows, out.rows)
    assert (again.scenario, again.year, again.timestamp, again.unused_profiles) == (
        out.scenario,
        out.year,
        out.timestamp,
        out.unused_profiles,
    )
    for made, block in zip(expand_blocks(net, plans, series), blocks, strict=True):
        np.testing.assert_array_equal(made.rows, block.rows)
    # without a time series: nothing is unused, one row per scenario-year
    plain = Expansion.of(net, [dataclasses.replace(plan, der=()) for plan in plans])  # a DER profile needs a series
    assert plain.unused_profiles() == () and plain.expanded().timestamp is None
    assert [b.timestamps for b in plain.blocks()] == [None, None, None]


def test_a_bad_time_series_is_refused_when_the_study_is_prepared_and_a_bad_scenario_with_its_rows() -> None:
    net = gridsim.network("ieee33")
    with pytest.raises(NetworkError) as shape:
        Expansion.of(net, [Scenario("x")], TimeSeries(("a", "b"), np.ones(2), np.ones(3)))
    assert shape.value.field == "time_series.pv"
    prepared = Expansion.of(net, [Scenario("x"), Scenario("y", bus_load_scale={1: 2.0})])  # checked lazily
    blocks = prepared.blocks()
    assert next(blocks).scenario == "x"
    with pytest.raises(NetworkError) as bus:
        next(blocks)
    assert bus.value.field == "scenarios[1].bus_load_scale"
    lazy = expand_blocks(net, [Scenario("x")], TimeSeries(("a",), np.ones(2), np.ones(1)))  # a generator, as before
    with pytest.raises(NetworkError, match="shape"):
        next(lazy)


def test_scaling_what_is_at_0_mw_is_refused_and_its_profile_reported_unused() -> None:
    """User trial: on mv_oberrhein_sub0 (pandapower gives its 60 PV sgens scaling 0) class_scaling {"PV": 50},
    generation_scale 50 and a PV profile answered as the base case, the profile not among the unused ones."""
    net = gridsim.network("mv_oberrhein_sub0")
    assert "PV" in net.class_names and not np.any(net.base_generation)
    with pytest.raises(NetworkError) as refused:
        expand(net, [Scenario("s", class_scaling={"PV": 50.0})])
    assert refused.value.field == "scenarios[0].class_scaling" and "'PV' has no consumption or generation" in str(
        refused.value
    )
    assert "MV Load" in refused.value.expected and "'PV'" not in refused.value.expected
    assert expand(net, [Scenario("s", class_scaling={"PV": 1.0, "MV Load": 1.2})]).rows.shape == (1, net.n_features)
    with pytest.raises(NetworkError) as refused:
        expand(net, [Scenario("s", generation_scale=50.0)])
    assert refused.value.field == "scenarios[0].generation_scale" and "no generation of its own" in str(refused.value)
    ieee33 = gridsim.network("ieee33")  # no generation at all: the same refusal; DER is what adds generation
    with pytest.raises(NetworkError, match="generation_scale"):
        expand(ieee33, [Scenario("s", generation_scale=2.0, der=(DER(18, 100.0),))])
    steps = ("a", "b")
    series = TimeSeries(steps, np.ones(2), np.ones(2), 0.25, {"PV": np.array([0.0, 1.0]), "MV Load": np.ones(2)})
    expanded = expand(net, [Scenario("s")], series)
    assert expanded.unused_profiles == ("PV",)  # moves nothing: reported, as a name matching no class is

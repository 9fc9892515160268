"""gridsim.simbench_data: a year of SimBench profiles as (load vector -> |V|) data."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("simbench")

from gridsim import simbench_data as sd  # noqa: E402

CODE = "1-LV-rural1--0-sw"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRIDPFN_CACHE", str(tmp_path))


@pytest.fixture(scope="module")
def year():
    return sd.simbench_year(CODE, steps=50, cache=False)


def test_grids_split():
    assert CODE in sd.DEV_GRIDS and len(sd.DEV_GRIDS) == 3
    assert not set(sd.DEV_GRIDS) & set(sd.HELDOUT_EXAMPLES)


def test_step_indices():
    index = sd.step_indices(3000)
    assert len(index) == 3000 and index[0] == 0 and np.all(np.diff(index) == sd.YEAR_STEPS // 3000)
    assert index[-1] < sd.YEAR_STEPS
    with pytest.raises(ValueError):
        sd.step_indices(0)


def test_shapes_and_time_order(year):
    x, vm, stamps = year
    network = sd.simbench_network(CODE)
    assert x.shape == (50, network.n_features) and vm.shape == (50, network.n_outputs)
    assert stamps.shape == (50,) and stamps.dtype == np.dtype("datetime64[m]")
    assert stamps[0] == np.datetime64("2016-01-01T00:00")
    step = np.timedelta64(15 * (sd.YEAR_STEPS // 50), "m")
    # the profiles' local wall-clock labels: one step apart but for the daylight-saving shifts
    gaps = np.diff(stamps)
    assert np.all(gaps > np.timedelta64(0, "m"))
    assert np.all(np.abs(gaps - step) <= np.timedelta64(60, "m")) and np.mean(gaps == step) > 0.9
    assert np.isfinite(vm).all() and 0.9 < vm.min() and vm.max() < 1.1


def test_pv_makes_net_load_negative(year):
    x, _, _ = year
    network = sd.simbench_network(CODE)
    p = x[:, : network.n_load]
    assert (p < 0).any(), "PV should export at some buses at some steps"
    assert (p > 0).any()
    # every bus with an sgen is a load bus (its injection is a feature)
    net = sd.simbench_net(CODE)
    assert set(net.sgen.bus.tolist()) <= {network.pandapower_bus(b) for b in network.load_buses}


def test_agrees_with_pandapower_on_the_simbench_net(year):
    """runpp on the SimBench net itself, its elements set to the profiles' absolute values."""
    import pandapower as pp

    x, vm, _ = year
    network = sd.simbench_network(CODE)
    index = sd.step_indices(50)
    prof = sd.simbench_profiles(CODE, index)
    net = sd.simbench_net(CODE)
    out = [network.pandapower_bus(b) for b in network.output_buses]
    worst = 0.0
    for i in range(len(index)):
        net.load["p_mw"] = prof[("load", "p_mw")][i]
        net.load["q_mvar"] = prof[("load", "q_mvar")][i]
        net.sgen["p_mw"] = prof[("sgen", "p_mw")][i]
        pp.runpp(net, tolerance_mva=1e-10, max_iteration=50, calculate_voltage_angles=True, numba=False)
        worst = max(worst, float(np.abs(net.res_bus.vm_pu.loc[out].to_numpy() - vm[i]).max()))
    assert worst < 1e-6, worst


def test_disk_cache_round_trip(tmp_path):
    x, vm, stamps = sd.simbench_year(CODE, steps=20)
    assert (tmp_path / "simbench" / f"{CODE}-20-batched.npz").exists()
    x2, vm2, stamps2 = sd.simbench_year(CODE, steps=20)
    assert np.array_equal(x, x2) and np.array_equal(vm, vm2) and np.array_equal(stamps, stamps2)


def test_noise_helpers():
    rng = np.random.default_rng(0)
    y = np.full((2000, 10), 1.0)
    noisy = sd.add_meter_noise(y, 1e-3, rng)
    assert noisy.shape == y.shape and abs((noisy - y).std() - 1e-3) < 5e-5 and abs((noisy - y).mean()) < 5e-5
    assert np.array_equal(sd.add_meter_noise(y, 0.0, rng), y)
    x = np.full((2000, 10), -0.5)
    noisy_x = sd.add_load_noise(x, 0.01, rng)
    assert abs((noisy_x / x - 1).std() - 0.01) < 5e-4
    assert np.array_equal(sd.add_load_noise(x, 0.0, rng), x)
    with pytest.raises(ValueError):
        sd.add_meter_noise(y, -1.0, rng)
    with pytest.raises(ValueError):
        sd.add_load_noise(x, -0.1, rng)


def test_pandapower_json_is_accepted_by_the_upload_reader():
    from gridsim.feeders import from_pandapower_json

    uploaded = from_pandapower_json(sd.simbench_pandapower_json(CODE))
    network = sd.simbench_network(CODE)
    assert uploaded.feature_names == network.feature_names and uploaded.output_names == network.output_names
    assert np.array_equal(uploaded.base_x, network.base_x)


def test_a_simbench_years_profile_table_expands_to_its_own_load_vectors():
    """Issue 31: a SimBench grid's classes (its loads' and sgens' `profile`) and its profile tables side by side
    (row for row: the labels repeat at the autumn clock change, so no join on `time`) as a study's time series
    give the load vectors SimBench's own absolute values give."""
    import pandas as pd

    from gridsim.scenarios import Scenario, TimeSeries, expand

    network = sd.simbench_network(CODE)
    assert {"H0-A", "L2-A", "PV5"} <= set(network.class_names)
    index = sd.step_indices(96)
    profiles = sd.simbench_net(CODE).profiles
    table = pd.concat([profiles["load"], profiles["renewables"].drop(columns="time")], axis=1).iloc[index]
    named = {name: table[name].to_numpy(dtype=np.float64) for name in table.columns if name != "time"}
    series = TimeSeries(tuple(table["time"]), np.ones(len(index)), np.ones(len(index)), 0.25, named)
    rows = expand(network, [Scenario("year")], series).rows
    consumption, generation = sd.consumption_and_generation(CODE, network, index)
    np.testing.assert_allclose(rows, consumption - generation, atol=1e-12)

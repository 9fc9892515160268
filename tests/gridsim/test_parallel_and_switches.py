"""Networks as they are built (issue 29, item 4): parallel lines and transformers merged into one equivalent
branch, radially operated grids (open switches), meshed-as-operated grids refused naming the loop.

pandapower's power flow on the net as given (switches and parallel branches as they are) is the truth: the
snapshot's batched solution must agree with it on a few load scenarios."""

from __future__ import annotations

import copy
import functools
import json

import httpx
import numpy as np
import pandapower as pp
import pytest
import torch

import gridsim
from gridsim import feeders
from gridsim.batched import solve_batched
from gridsim.feeders import NetworkError
from tests.service.conftest import assert_problem

AGREEMENT_PU = 1e-6
SIMBENCH = ("1-MV-rural--0-sw", "1-LV-rural1--0-sw", "1-LV-semiurb4--0-sw")
# what a SimBench net holds that an upload cannot: its year of profiles (megabytes, over the upload limit;
# they are data for contexts, not part of the grid). Its loadcases and substation tables, tap-controller
# columns and null flags are read as they are (ignored or false).
SIMBENCH_DROPPED_TABLES = ("profiles",)


@functools.cache
def _simbench(code: str):
    simbench = pytest.importorskip("simbench")
    return simbench.get_simbench_net(code)


def simbench_net(code: str):
    return copy.deepcopy(_simbench(code))


def _features(net, network: gridsim.Network) -> np.ndarray:
    """The net's loads and sgens as the network's feature vector (P then Q per load bus, after bus fusion)."""
    normal = feeders.normalise(net)
    p, q = {}, {}
    for table, sign in (("load", 1.0), ("sgen", -1.0)):
        rows = normal[table][normal[table].in_service.astype(bool)]
        for bus, p_mw, q_mvar, scaling in rows[["bus", "p_mw", "q_mvar", "scaling"]].itertuples(index=False):
            p[int(bus)] = p.get(int(bus), 0.0) + sign * p_mw * scaling
            q[int(bus)] = q.get(int(bus), 0.0) + sign * q_mvar * scaling
    buses = [network.pandapower_bus(b) for b in network.load_buses]
    return np.array([p.get(b, 0.0) for b in buses] + [q.get(b, 0.0) for b in buses])


def max_gap_to_pandapower(net, network: gridsim.Network, scenarios: int = 3, seed: int = 0) -> float:
    """Largest |V| difference (p.u.) between the network's batched solution and pandapower's runpp on the
    original net, over `scenarios` random rescalings of its loads and sgens (each element on its own)."""
    rng = np.random.default_rng(seed)
    gap = 0.0
    z, w = network.zbus()
    for level in np.linspace(0.4, 1.4, scenarios):
        case = copy.deepcopy(net)
        for table, spread in (("load", 0.5), ("sgen", 1.0)):
            factor = level * rng.uniform(1 - spread, 1 + spread, len(case[table]))
            case[table]["p_mw"] = case[table].p_mw * factor
            case[table]["q_mvar"] = case[table].q_mvar * factor
        pp.runpp(case, tolerance_mva=1e-11, max_iteration=50, calculate_voltage_angles=True, numba=False)
        x = _features(case, network)
        v, ok, _ = solve_batched(z, w, network.loads_to_pu(torch.as_tensor(x[None])), workers=1)
        assert bool(ok.all())
        truth = case.res_bus.vm_pu.loc[[network.pandapower_bus(b) for b in network.output_buses]].to_numpy()
        gap = max(gap, float(np.abs(v[0].abs().numpy() - truth).max()))
    return gap


# --- SimBench grids as they are built


@pytest.mark.parametrize("code", SIMBENCH)
def test_simbench_grids_snapshot_and_agree_with_pandapower(code):
    net = simbench_net(code)
    network = feeders.snapshot(net)
    assert len(network.from_bus) + len(network.trafo_hv_bus) == len(network.bus_numbers) - 1  # a tree
    assert len(network.trafo_r_pu) == 1  # MV: the two parallel HV/MV transformers are one
    assert max_gap_to_pandapower(net, network) <= AGREEMENT_PU


def test_simbench_mv_rural_details():
    net = simbench_net("1-MV-rural--0-sw")
    network = feeders.snapshot(net)
    # buses 1 and 3 fused into 0 and 2 by the closed circuit breakers; the two HV/MV transformers merged
    assert len(network.bus_numbers) == len(net.bus) - 2 and 1 not in network.bus_numbers
    assert (network.trafo_hv_bus.tolist(), network.trafo_lv_bus.tolist()) == ([0], [2])
    one = feeders.snapshot(_drop(net, "trafo", [1]))
    np.testing.assert_allclose(network.trafo_x_pu, one.trafo_x_pu / 2)  # two equal transformers: half
    np.testing.assert_allclose(network.trafo_b_pu, 2 * one.trafo_b_pu)  # twice the magnetising admittance
    # the six open load-break switches: six normally-open ties, each charged from its closed end while open
    assert len(network.tie_r_ohm) == (~net.switch.closed).sum() == 6
    assert np.count_nonzero(network.tie_from_y_pu) + np.count_nonzero(network.tie_to_y_pu) == 6
    assert network.tie_from_y_pu.imag.sum() + network.tie_to_y_pu.imag.sum() > 0  # capacitive


def _drop(net, table, index):
    net = copy.deepcopy(net)
    net[table] = net[table].drop(index)
    net.switch = net.switch[~((net.switch.et == table[0]) & net.switch.element.isin(index))]
    return net


# --- small synthetic nets


def mv_net(**trafo_kw):
    """110/20 kV substation (bus 0 -> bus 1) feeding a 20 kV ring 1-2-3-4-1 with loads; the ring is closed."""
    net = pp.create_empty_network(sn_mva=1.0)
    hv = pp.create_bus(net, vn_kv=110.0, name="hv")
    mv = [pp.create_bus(net, vn_kv=20.0, name=f"mv{i}") for i in range(1, 5)]
    pp.create_ext_grid(net, hv, vm_pu=1.02)
    pp.create_transformer(net, hv, mv[0], std_type="25 MVA 110/20 kV", **trafo_kw)
    kw = dict(r_ohm_per_km=0.16, x_ohm_per_km=0.12, c_nf_per_km=280.0, max_i_ka=0.3)
    for a, b, km in ((0, 1, 2.0), (1, 2, 1.5), (2, 3, 1.0), (3, 0, 2.5)):
        pp.create_line_from_parameters(net, mv[a], mv[b], km, name=f"ring {a + 1}-{b + 1}", **kw)
    for bus, p in zip(mv[1:], (1.2, 0.8, 1.5)):
        pp.create_load(net, bus, p_mw=p, q_mvar=0.3 * p)
    pp.create_sgen(net, mv[2], p_mw=0.5)
    return net


def test_closed_ring_is_refused_naming_the_loop():
    with pytest.raises(
        NetworkError, match=r"closed loop through buses \[1, 2, 3, 4\] \(line 0, line 1, line 2, line 3\)"
    ):
        feeders.snapshot(mv_net())


def test_an_open_line_switch_makes_the_ring_radial():
    net = mv_net()
    pp.create_switch(net, 4, 2, et="l", closed=False)  # line 2 (3-4) open at bus 4: it hangs from bus 3
    pp.create_switch(net, 3, 2, et="l", closed=True)
    network = feeders.snapshot(net)
    assert network.n_lines == 3 and (network.tie_from_bus.tolist(), network.tie_to_bus.tolist()) == ([3], [4])
    assert network.tie_from_y_pu[0] != 0 and network.tie_to_y_pu[0] == 0  # the hanging line charges bus 3
    assert max_gap_to_pandapower(net, network) <= AGREEMENT_PU
    # the switch closed: the meshed grid (pandapower) is what the switched Z-bus solves
    meshed = copy.deepcopy(net)
    meshed.switch["closed"] = True
    pp.runpp(meshed, tolerance_mva=1e-11, calculate_voltage_angles=True, numba=False)
    z, w = network.zbus_switched(torch.ones(network.n_lines + 1, dtype=torch.bool))
    v, ok, _ = solve_batched(z, w, network.loads_to_pu(torch.as_tensor(network.base_x[None])), workers=1)
    truth = meshed.res_bus.vm_pu.loc[list(network.output_buses)].to_numpy()
    assert bool(ok.all()) and np.abs(v[0].abs().numpy() - truth).max() <= AGREEMENT_PU
    # the line out of service instead: no charging from it
    out = mv_net()
    out.line.loc[2, "in_service"] = False
    assert len(feeders.snapshot(out).tie_from_y_pu) == 0


def test_open_switches_at_both_ends_and_bus_bus_switches():
    net = mv_net()
    for bus in (3, 4):
        pp.create_switch(net, bus, 2, et="l", closed=False)  # line 2 dead: no charging anywhere
    spare = pp.create_bus(net, vn_kv=20.0, name="spare")
    pp.create_switch(net, 2, spare, et="b", closed=True)  # fused into bus 2
    pp.create_load(net, spare, p_mw=0.2, q_mvar=0.05)
    cut = pp.create_bus(net, vn_kv=20.0, name="cut")
    pp.create_switch(net, 3, cut, et="b", closed=False)  # connects nothing
    network = feeders.snapshot(net)
    assert spare not in network.bus_numbers and cut not in network.bus_numbers
    assert len(network.tie_r_ohm) == 1 and len(network.tie_from_y_pu) == 0
    np.testing.assert_allclose(network.base_p_mw, [1.2 + 0.2, 0.8 - 0.5, 1.5])
    assert max_gap_to_pandapower(net, network) <= AGREEMENT_PU
    pp.create_load(net, cut, p_mw=0.1)
    with pytest.raises(NetworkError, match=r"buses \[6\] carry loads but no closed line or transformer"):
        feeders.snapshot(net)


def test_parallel_lines_are_one_equivalent_line():
    net = mv_net()
    net.line.loc[3, "in_service"] = False  # radial: 1-2-3-4
    pp.create_line_from_parameters(  # a second, different cable 2-3, drawn the other way round
        net, 3, 2, 1.2, r_ohm_per_km=0.32, x_ohm_per_km=0.1, c_nf_per_km=200.0, g_us_per_km=0.5, max_i_ka=0.2
    )
    pp.create_line(net, 3, 4, 1.0, std_type="NA2XS2Y 1x95 RM/25 12/20 kV", parallel=2)  # 3 cables 3-4
    network = feeders.snapshot(net)
    assert network.n_lines == 3 and list(zip(network.from_bus, network.to_bus)) == [(1, 2), (2, 3), (3, 4)]
    z = [0.16 * 1.5 + 0.12j * 1.5, 1.2 * (0.32 + 0.1j)]
    np.testing.assert_allclose(network.r_ohm[1] + 1j * network.x_ohm[1], 1 / (1 / z[0] + 1 / z[1]))
    assert network.line_g_pu[1] > 0 and network.line_b_pu[1] > network.line_b_pu[0]  # charging added
    assert max_gap_to_pandapower(net, network) <= AGREEMENT_PU
    assert feeders.describe(network)["lines"][1]["from_bus"] == 2


def test_parallel_transformers_are_one_equivalent_transformer():
    net = mv_net(tap_pos=2)
    net.line.loc[3, "in_service"] = False
    pp.create_transformer_from_parameters(  # another rating and impedance, same ratio and tap: merged
        net, 0, 1, sn_mva=40.0, vn_hv_kv=110.0, vn_lv_kv=20.0, vkr_percent=0.3, vk_percent=14.0,
        pfe_kw=20.0, i0_percent=0.05, shift_degree=150.0, tap_side="hv", tap_neutral=0, tap_min=-9, tap_max=9,
        tap_step_percent=1.5, tap_pos=2, tap_changer_type="Ratio",
    )  # fmt: skip
    network = feeders.snapshot(net)
    assert len(network.trafo_r_pu) == 1 and network.trafo_ratio[0] == pytest.approx(1.03)
    assert max_gap_to_pandapower(net, network) <= AGREEMENT_PU
    # a third transformer behind an open switch on its 110 kV side hangs from the 20 kV bus
    pp.create_transformer(net, 0, 1, std_type="25 MVA 110/20 kV", tap_pos=2)
    pp.create_switch(net, 0, 2, et="t", closed=False)
    hanging = feeders.snapshot(net)
    assert len(hanging.trafo_r_pu) == 1 and hanging.shunt_bus.tolist() == [1]  # its magnetising branch
    assert max_gap_to_pandapower(net, hanging) <= AGREEMENT_PU


def test_unequal_parallel_taps_are_refused_naming_the_transformers():
    net = mv_net(tap_pos=2)
    net.line.loc[3, "in_service"] = False
    pp.create_transformer(net, 0, 1, std_type="25 MVA 110/20 kV", tap_pos=0)
    with pytest.raises(
        NetworkError, match=r"trafo 0 and trafo 1 in parallel between buses 0 and 1 have unequal"
    ) as info:
        feeders.snapshot(net)
    assert info.value.field == "trafo" and "same ratio and phase shift" in info.value.expected
    pp.create_switch(net, 1, 1, et="t", closed=False)  # the odd one switched off: fine
    assert len(feeders.snapshot(net).trafo_r_pu) == 1


def test_a_line_in_parallel_with_a_transformer_is_refused():
    net = mv_net()
    net.line.loc[3, "in_service"] = False
    net.bus.loc[0, "vn_kv"] = 20.0
    pp.create_transformer_from_parameters(
        net, 0, 1, sn_mva=25.0, vn_hv_kv=20.0, vn_lv_kv=20.0, vkr_percent=0.4, vk_percent=12.0, pfe_kw=0, i0_percent=0
    )
    net.trafo = net.trafo.drop(0)
    pp.create_line_from_parameters(net, 0, 1, 0.5, r_ohm_per_km=0.1, x_ohm_per_km=0.1, c_nf_per_km=0, max_i_ka=1)
    with pytest.raises(NetworkError, match=r"line 4 and trafo 1 in parallel between buses 0 and 1"):
        feeders.snapshot(net)


def test_a_loop_through_parallel_branches_names_them():
    net = mv_net()
    pp.create_line_from_parameters(net, 2, 3, 1.0, r_ohm_per_km=0.2, x_ohm_per_km=0.1, c_nf_per_km=0, max_i_ka=1)
    with pytest.raises(NetworkError, match=r"\(line 0, line 1/line 4, line 2, line 3\)"):
        feeders.snapshot(net)


@pytest.mark.parametrize(
    "switch, field, words",
    [
        (dict(bus=1, element=9, et="l"), "switch.element", "switch 0 is on line 9, which the net does not have"),
        (dict(bus=4, element=0, et="l"), "switch.bus", "switch 0 is at bus 4, which is no end of line 0"),
        (dict(bus=1, element=99, et="b"), "switch.element", "bus-bus switch 0 joins bus 99"),
        (dict(bus=1, element=2, et="b", z_ohm=0.5), "switch.z_ohm", "closed bus-bus switch 0 has an impedance"),
    ],
)
def test_bad_switches_name_the_problem(switch, field, words):
    net = mv_net()
    pp.create_switch(net, 1, 0, et="l")
    for column, value in switch.items():
        net.switch.loc[0, column] = value
    with pytest.raises(NetworkError, match=words) as info:
        feeders.snapshot(net)
    assert info.value.field == field


# --- the upload path


def simbench_upload_json(code: str) -> str:
    """pandapower.to_json of a SimBench net as it comes, less its profiles (SIMBENCH_DROPPED_TABLES)."""
    net = simbench_net(code)
    for table in SIMBENCH_DROPPED_TABLES:
        del net[table]
    return pp.to_json(net)


def test_simbench_mv_rural_reads_as_pandapower_json():
    text = simbench_upload_json("1-MV-rural--0-sw")
    network = feeders.from_pandapower_json(text)
    direct = feeders.snapshot(simbench_net("1-MV-rural--0-sw"))
    assert network.bus_numbers == direct.bus_numbers and len(network.trafo_r_pu) == 1
    np.testing.assert_array_equal(network.r_ohm, direct.r_ohm)
    # the kept source (the normalised net, open switches included) rebuilds the same network
    again = feeders.from_pandapower_json(network.source_json)
    assert again.name == network.name
    assert max_gap_to_pandapower(simbench_net("1-MV-rural--0-sw"), network, scenarios=2) <= AGREEMENT_PU


def test_simbench_mv_rural_uploads_through_the_service(memory_server):
    """POST /v1/networks: the MV grid as pandapower JSON (two parallel transformers, six open switches) is
    accepted; the same grid with every switch closed is meshed as operated: 422 naming the loop. The session's
    embedded-store server in this process (tests/conftest.py), the uploads read in its sandbox."""
    meshed = json.loads(simbench_upload_json("1-MV-rural--0-sw"))
    switch = json.loads(meshed["_object"]["switch"]["_object"])
    closed = switch["columns"].index("closed")
    for row in switch["data"]:
        row[closed] = True
    meshed["_object"]["switch"]["_object"] = json.dumps(switch)
    with httpx.Client(base_url=memory_server.url, timeout=120) as client:
        made = client.post(
            "/v1/networks",
            content=simbench_upload_json("1-MV-rural--0-sw"),
            headers={"content-type": "application/json"},
        )
        assert made.status_code == 201, made.text
        read = client.get(f"/v1/networks/{made.json()['id']}").json()
        refused = client.post("/v1/networks", content=json.dumps(meshed), headers={"content-type": "application/json"})
    assert read["n_buses"] == 95 and len(read["transformers"]) == 1
    assert [line["closed"] for line in read["lines"]].count(False) == 6
    problem = assert_problem(refused, 422, "line")
    assert "not radial when operated: closed loop through buses" in problem["detail"], problem

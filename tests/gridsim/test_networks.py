"""Networks beyond IEEE 33: built-ins, user networks (pandapower JSON, MATPOWER), bad-network errors."""

import copy

import numpy as np
import pandapower as pp
import pytest
import torch

import gridsim
from gridsim import feeders
from gridsim.feeders import NetworkError
from gridsim.network import pandapower_net
from gridsim.sampling import sample_loads
from tests.gridsim.feeder_cases import CASE3_M, small_feeder

NEW_BUILT_INS = ("kerber_landnetz_kabel_1", "mv_oberrhein_sub0")


@pytest.fixture(scope="module")
def user_json():
    return pp.to_json(small_feeder())


@pytest.mark.parametrize("name", NEW_BUILT_INS)
def test_built_in_snapshot_shapes(name):
    net = gridsim.network(name)
    assert gridsim.network(name) is net and name in gridsim.KNOWN_NETWORKS
    assert net.n_features == 2 * net.n_load == len(net.feature_names) == len(net.base_x)
    assert net.n_outputs == len(net.bus_numbers) - 1 == len(net.output_names)
    assert net.slack_bus not in net.output_buses and set(net.load_buses) <= set(net.output_buses)
    assert len(net.from_bus) + len(net.trafo_hv_bus) == len(net.bus_numbers) - 1  # a tree
    assert net.feature_names[0] == f"p_mw_bus{net.load_buses[0]}"
    assert net.feature_names[net.n_load] == f"q_mvar_bus{net.load_buses[0]}"
    assert net.output_names[-1] == f"vm_pu_bus{net.output_buses[-1]}"
    z, w = net.zbus()
    assert z.shape == (net.n_outputs, net.n_outputs) and w.shape == (net.n_outputs,)
    assert len(net.trafo_r_pu) == 1 and len(net.line_b_pu) == net.n_lines  # transformer, cable charging


def test_built_in_details():
    kerber = gridsim.network("kerber_landnetz_kabel_1")
    assert (len(kerber.bus_numbers), kerber.n_load, kerber.n_outputs) == (18, 8, 17)
    assert kerber.load_buses == (3, 5, 7, 9, 11, 13, 15, 17) and kerber.slack_bus == 0
    assert kerber.trafo_shift_degree[0] == 150.0 and kerber.bus_vn_kv.tolist()[:2] == [10.0, 0.4]
    assert len(kerber.bus_xy) == 0  # no geodata: the description lays the tree out
    oberrhein = gridsim.network("mv_oberrhein_sub0")
    assert (len(oberrhein.bus_numbers), oberrhein.n_outputs) == (70, 69)
    assert len(oberrhein.tie_r_ohm) == 1  # the line behind the open switch
    assert oberrhein.bus_xy.shape == (70, 2)  # geodata (longitude, latitude)
    assert oberrhein.trafo_ratio[0] != 1.0  # tap position -2 on the HV side


@pytest.mark.parametrize("name", NEW_BUILT_INS)
def test_batched_agrees_with_pandapower_on_100_scenarios(name):
    net = gridsim.network(name)
    x = sample_loads(net, 100, 0.5, np.random.default_rng(15))
    batched = gridsim.solve(x, network=name)
    reference = gridsim.solve(x, network=name, solver="pandapower")
    assert batched.converged.all() and reference.converged.all()
    assert np.abs(batched.vm_pu - reference.vm_pu).max() <= 1e-8
    assert np.abs(batched.va_degree - reference.va_degree).max() <= 1e-6  # the transformer's 150 deg shift too
    assert np.ptp(batched.vm_pu[:, -1]) > 1e-4  # the loads really move the voltages


def test_simulate_other_built_ins_by_name():
    result = gridsim.simulate(20, 0.3, 0, network="kerber_landnetz_kabel_1", dg_buses=(3,), dg_mw=0.01)
    assert result.x.shape == (20, 16) and result.vm_pu.shape == (20, 17) and result.converged.all()
    frame = result.to_frame()
    assert list(frame.columns[:2]) == ["p_mw_bus3", "p_mw_bus5"] and "vm_pu_bus1" in frame
    with pytest.raises(ValueError, match=r"x: expected shape \(n, 16\)"):
        gridsim.solve(np.ones((2, 64)), network="kerber_landnetz_kabel_1")


def test_user_network_from_pandapower_json(user_json):
    net = feeders.from_pandapower_json(user_json)
    assert len(net.name) == 64 and feeders.from_pandapower_json(user_json.encode()).name == net.name  # content id
    assert net.bus_numbers == (0, 1, 2, 3, 6)  # bus 4 fused into 3, bus 5 dead and load-free
    assert net.load_buses == (2, 3) and net.output_buses == (1, 2, 3, 6)
    np.testing.assert_allclose(net.base_p_mw, [0.4 - 0.15, 0.3 + 0.1])  # sgen negative, loads summed (scaling)
    np.testing.assert_allclose(net.base_q_mvar, [0.1, 0.1 + 0.025])
    assert (net.tie_from_bus.tolist(), net.tie_to_bus.tolist()) == ([2], [3])
    assert net.shunt_bus.tolist() == [3] and net.bus_names[3] == "n3"
    assert net.feature_names == ("p_mw_bus2", "p_mw_bus3", "q_mvar_bus2", "q_mvar_bus3")
    x = sample_loads(net, 5, 0.5, np.random.default_rng(1))
    batched = gridsim.solve(x, network=net)
    reference = gridsim.solve(x, network=net, solver="pandapower")  # from the kept pandapower JSON
    assert reference.converged.all() and np.abs(batched.vm_pu - reference.vm_pu).max() <= 1e-8
    # the tie line can be closed: the switched Z-bus of the meshed feeder still solves
    z, w = net.zbus_switched(torch.ones(net.n_lines + 1, dtype=torch.bool))
    assert z.shape == (4, 4)
    changed = small_feeder()
    changed.load.loc[0, "p_mw"] = 0.41
    assert feeders.from_pandapower_json(pp.to_json(changed)).name != net.name


def test_user_network_from_matpower_text_and_mat(tmp_path):
    net = feeders.from_matpower(CASE3_M)
    assert net.bus_numbers == (1, 2, 3) and net.load_buses == (2, 3) and net.slack_bus == 1
    assert net.feature_names == ("p_mw_bus2", "p_mw_bus3", "q_mvar_bus2", "q_mvar_bus3")
    result = gridsim.solve(np.stack([net.base_x, 2 * net.base_x]), network=net)
    reference = gridsim.solve(result.x, network=net, solver="pandapower")
    assert np.abs(result.vm_pu - reference.vm_pu).max() <= 1e-8
    from pandapower.converter.matpower import to_mpc

    to_mpc(pandapower_net("ieee33"), str(tmp_path / "case33.mat"), init="flat")
    ieee = feeders.from_matpower((tmp_path / "case33.mat").read_bytes())
    np.testing.assert_allclose(ieee.base_p_mw, gridsim.network("ieee33").base_p_mw)
    with pytest.raises(NetworkError, match="mpc.bus: \\[ without its \\]"):
        feeders.from_matpower("mpc.bus = [1 2;")


def test_tree_layout_and_description():
    net = gridsim.network("ieee33")
    xy = feeders.tree_layout(net)
    assert xy.shape == (33, 2) and xy[0, 0] == 0 and xy[17, 0] == 17  # bus 18 ends the 17-line main feeder
    depth = dict(zip(net.bus_numbers, xy[:, 0]))
    assert all(depth[int(b)] == depth[int(a)] + 1 for a, b in zip(net.from_bus, net.to_bus))
    leaves_y = sorted(xy[[i for i, b in enumerate(net.bus_numbers) if b in (18, 22, 25, 33)], 1])
    assert leaves_y == [0, 1, 2, 3]  # the four feeder ends one apart
    info = feeders.describe(gridsim.network("kerber_landnetz_kabel_1"))
    assert info["layout"] == "tree" and len(info["buses"]) == 18 and len(info["loads"]) == 8
    assert info["buses"][3]["name"] == "loadbus_1_1" and info["transformers"][0]["hv_bus"] == 0
    assert feeders.describe(gridsim.network("mv_oberrhein_sub0"))["layout"] == "geodata"


def _bad(mutate):
    net = small_feeder()
    mutate(net)
    return net


@pytest.mark.parametrize(
    "mutate, field, message",
    [
        (
            lambda n: n.switch.drop(n.switch.index[n.switch.et == "l"], inplace=True),
            "line",
            r"not radial when operated: closed loop through buses",
        ),
        (lambda n: n.ext_grid.drop(n.ext_grid.index, inplace=True), "ext_grid", "no slack"),
        (lambda n: pp.create_ext_grid(n, 3), "ext_grid", r"2 slacks \(ext_grids at buses \[0, 3\]\)"),
        (
            lambda n: n.load.loc.__setitem__((0, "bus"), 99),
            "load.bus",
            "load 0 is on bus 99, which the net does not have",
        ),
        (lambda n: n.load.__setitem__("scaling", 400.0), "load", "does not converge at the net's base load"),
        (lambda n: pp.create_buses(n, 500, 20.0), "bus", "507 in-service buses is over the limit"),
        (lambda n: pp.create_load(n, 5, p_mw=0.1), "bus", r"buses \[5\] carry loads but no closed line"),
        (lambda n: pp.create_gen(n, 3, p_mw=0.1), "gen", "PV generators"),
    ],
)
def test_bad_networks_name_the_problem(mutate, field, message):
    with pytest.raises(NetworkError, match=message) as info:
        feeders.snapshot(_bad(mutate))
    assert info.value.field == field and info.value.expected


def test_bad_json_names_the_problem():
    with pytest.raises(NetworkError, match="body: not JSON") as info:
        feeders.from_pandapower_json("not JSON at all")
    assert info.value.field == "body"
    with pytest.raises(NetworkError, match="body: not a pandapower net"):
        feeders.from_pandapower_json("[1, 2]")
    # a table that is an object envelope, not a DataFrame: refused unread (tests/gridsim/test_pandapower_json.py
    # holds the hostile corpus)
    with pytest.raises(NetworkError, match="bus: not a DataFrame table"):
        feeders.from_pandapower_json(
            '{"_module": "pandapower.auxiliary", "_class": "pandapowerNet", "_object": '
            '{"bus": {"_module": "subprocess", "_class": "Popen", "_object": "id"}}}'
        )
    with pytest.raises(NetworkError, match="body: not a pandapower net"):
        feeders.from_pandapower_json('{"bus": [1, 2]}')


def test_snapshot_leaves_the_net_alone():
    net = small_feeder()
    before = copy.deepcopy(net)
    feeders.snapshot(net)
    assert len(net.switch) == len(before.switch) and len(net.bus) == len(before.bus) and net.res_bus.empty


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("length_km", -1.0, "not a positive number"),
        ("length_km", 0.0, "not a positive number"),
        ("r_ohm_per_km", -0.1, "a negative number"),
        ("x_ohm_per_km", -0.1, "a negative number"),
        ("parallel", 0, "not a count of at least 1"),
    ],
)
def test_an_uploaded_line_that_cannot_exist_is_refused_naming_its_column(column, value, message):
    net = small_feeder()
    net.line[column] = net.line[column].astype(type(value))
    net.line.loc[net.line.index[0], column] = value
    with pytest.raises(NetworkError, match=message) as info:
        feeders.from_pandapower_json(pp.to_json(net))
    assert info.value.field.startswith(f"line.{column}")

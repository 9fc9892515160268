"""The IEEE 33-bus description: numbering, base loads, names, Z-bus."""

import numpy as np
import pytest
import torch

import gridsim
from gridsim.network import Network


def test_ieee33_description():
    net = gridsim.network("ieee33")
    assert isinstance(net, Network)
    assert net.slack_bus == 1 and net.bus_numbers == tuple(range(1, 34))
    assert net.load_buses == tuple(range(2, 34))
    assert net.base_p_mw.shape == net.base_q_mvar.shape == (32,)
    assert net.base_p_mw.sum() == pytest.approx(3.715, abs=1e-9)
    assert net.base_q_mvar.sum() == pytest.approx(2.3, abs=1e-9)
    assert net.base_p_mw[0] == pytest.approx(0.1) and net.base_q_mvar[0] == pytest.approx(0.06)  # bus 2
    assert net.n_lines == 32  # the five normally-open tie lines are out of service
    assert (net.from_bus[0], net.to_bus[0]) == (1, 2)
    assert net.r_ohm[0] == pytest.approx(0.0922) and net.x_ohm[0] == pytest.approx(0.0470)
    assert net.vn_kv == pytest.approx(12.66)
    assert net.feature_names[:2] == ("p_mw_bus2", "p_mw_bus3")
    assert net.feature_names[31:33] == ("p_mw_bus33", "q_mvar_bus2")
    assert len(net.feature_names) == 64 and net.feature_names[-1] == "q_mvar_bus33"
    assert net.output_names == tuple(f"vm_pu_bus{b}" for b in range(2, 34))
    assert gridsim.network() is net  # cached


def test_network_arrays_are_read_only():
    net = gridsim.network()
    with pytest.raises(ValueError):
        net.base_p_mw[0] = 1.0


def test_unknown_network_names_field_and_choices():
    with pytest.raises(
        ValueError,
        match=r"network: expected one of \['ieee33', 'kerber_landnetz_kabel_1', "
        r"'mv_oberrhein_sub0'\] or random-<buses>-<seed>, got 'ieee34'",
    ):
        gridsim.network("ieee34")


def test_zbus_is_the_inverse_reduced_admittance():
    net = gridsim.network()
    z, w = net.zbus()
    assert z.shape == (32, 32) and w.shape == (32,) and z.dtype == w.dtype == torch.complex128
    assert torch.allclose(w, torch.ones(32, dtype=torch.complex128), atol=1e-12)  # no shunts: no-load V = slack
    # radial feeder: Z[i, j] = impedance shared by the paths from the slack to i and to j
    z_line = (net.r_ohm[0] + 1j * net.x_ohm[0]) / net.z_base_ohm
    assert complex(z[0, 0]) == pytest.approx(z_line, rel=1e-12)
    assert complex(z[0, 17]) == pytest.approx(z_line, rel=1e-12)  # buses 2 and 19 share only line 1-2
    assert torch.allclose(z, z.T)


def test_zbus_line_scale_batches_and_scales():
    net = gridsim.network()
    z, _ = net.zbus()
    scale = torch.ones(4, 3, net.n_lines, dtype=torch.float64)
    scale[1, 2] = 2.0
    zs, ws = net.zbus(scale)
    assert zs.shape == (4, 3, 32, 32) and ws.shape == (4, 3, 32)
    assert torch.allclose(zs[0, 0], z, atol=1e-14) and torch.allclose(zs[1, 2], 2 * z, atol=1e-14)
    with pytest.raises(ValueError, match="line_scale"):
        net.zbus(np.ones(5))
    with pytest.raises(ValueError, match="line_scale"):
        net.zbus(-np.ones(net.n_lines))


def test_loads_to_pu():
    net = gridsim.network()
    s = net.loads_to_pu(np.stack([net.base_x, 2 * net.base_x]))
    assert s.shape == (2, 32) and s.dtype == torch.complex128
    assert complex(s[0, 0]) == pytest.approx(complex(0.1, 0.06) / net.sn_mva)
    assert torch.allclose(s[1], 2 * s[0])
    with pytest.raises(ValueError, match=r"x: expected shape \(\.\.\., 64\)"):
        net.loads_to_pu(np.ones((3, 63)))


def test_tie_lines_and_switched_zbus():
    net = gridsim.network("ieee33")
    assert len(net.tie_r_ohm) == 5  # case33bw's five normally-open tie lines
    normal = np.arange(net.n_lines + 5) < net.n_lines
    z, w = net.zbus()
    z_sw, w_sw = net.zbus_switched(torch.as_tensor(normal))
    torch.testing.assert_close(z_sw, z)
    torch.testing.assert_close(w_sw, w)
    with pytest.raises(ValueError, match="closed"):
        net.zbus_switched(torch.ones(3, dtype=torch.bool))


def test_radial_configurations_are_spanning_trees_other_than_the_normal_one():
    net = gridsim.network("ieee33")
    closed = net.radial_configurations(20, 2, np.random.default_rng(0))
    ends = np.c_[np.r_[net.from_bus, net.tie_from_bus], np.r_[net.to_bus, net.tie_to_bus]]
    n_bus = len(net.bus_numbers)
    for mask in closed:
        assert mask.sum() == n_bus - 1  # a tree on n buses has n - 1 branches
        reached, todo = {net.slack_bus}, [net.slack_bus]
        while todo:
            bus = todo.pop()
            for a, b in ends[mask]:
                for here, there in ((a, b), (b, a)):
                    if here == bus and there not in reached:
                        reached.add(there)
                        todo.append(there)
        assert len(reached) == n_bus  # connected, so radial
    normal = np.arange(closed.shape[1]) < net.n_lines
    assert (closed != normal).any(axis=1).mean() > 0.5  # most are other feeders (a later exchange may undo one)

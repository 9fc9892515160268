"""Batched solver against pandapower, broadcasting, and non-convergence flagged not dropped."""

import numpy as np
import pandapower as pp
import pytest
import torch

import gridsim
from gridsim.network import pandapower_net
from gridsim.reference import solve_pandapower
from gridsim.sampling import sample_loads


def test_batched_agrees_with_pandapower_on_1000_scenarios():
    """Issue 2's acceptance test: <= 1e-9 p.u. on every |V|, 1000 scenarios at delta = 0.5."""
    x = sample_loads(gridsim.network(), 1000, 0.5, np.random.default_rng(2024))
    batched = gridsim.solve(x, solver="batched")
    reference = gridsim.solve(x, solver="pandapower")
    assert batched.converged.all() and reference.converged.all()
    assert np.abs(batched.vm_pu - reference.vm_pu).max() <= 1e-9
    assert np.abs(batched.va_degree - reference.va_degree).max() <= 1e-7
    assert batched.vm_pu.min() < 0.9  # delta = 0.5 really loads the feeder


def test_reference_recycle_matches_plain_runpp():
    x = sample_loads(gridsim.network(), 5, 0.5, np.random.default_rng(1))
    fast, _, ok_fast = solve_pandapower(gridsim.network(), x, recycle=True)
    plain, _, ok_plain = solve_pandapower(gridsim.network(), x, recycle=False)
    assert ok_fast.all() and ok_plain.all()
    assert np.abs(fast - plain).max() <= 1e-10


def test_line_scale_zbus_matches_pandapower_with_scaled_lines():
    net = gridsim.network()
    scale = np.random.default_rng(3).uniform(0.5, 1.5, net.n_lines)
    x = sample_loads(net, 3, 0.3, np.random.default_rng(4))
    z, w = net.zbus(scale)
    v, ok, _ = gridsim.solve_batched(z, w, net.loads_to_pu(x))
    assert ok.all()
    ppnet = pandapower_net("ieee33")
    in_service = ppnet.line.index[ppnet.line.in_service]
    ppnet.line.loc[in_service, "r_ohm_per_km"] *= scale
    ppnet.line.loc[in_service, "x_ohm_per_km"] *= scale
    for i in range(3):
        ppnet.load["p_mw"], ppnet.load["q_mvar"] = x[i, :32], x[i, 32:]  # one load per bus 2..33, in order
        pp.runpp(ppnet, tolerance_mva=1e-11, numba=False)
        assert np.abs(v[i].abs().numpy() - ppnet.res_bus.vm_pu.to_numpy()[1:]).max() <= 1e-9


def test_solve_batched_broadcasts_leading_dims():
    net = gridsim.network()
    z, w = net.zbus()
    x = sample_loads(net, 30, 0.2, np.random.default_rng(5))
    s = net.loads_to_pu(x)
    flat, ok_flat, it_flat = gridsim.solve_batched(z, w, s)
    v, ok, it = gridsim.solve_batched(z, w, s.reshape(2, 3, 5, 32))
    assert v.shape == (2, 3, 5, 32) and ok.shape == it.shape == (2, 3, 5) and ok.dtype == torch.bool
    assert torch.allclose(v.reshape(30, 32), flat, atol=1e-13) and ok.all()
    assert (it_flat >= 2).all() and (it_flat < 100).all()
    # one network per group (batched z from line_scale), several scenarios each, tiny chunks
    zs, ws = net.zbus(np.ones((3, net.n_lines)))
    vb, okb, _ = gridsim.solve_batched(zs, ws, s.reshape(3, 10, 32), chunk_rows=4)
    assert vb.shape == (3, 10, 32) and okb.all()
    assert torch.allclose(vb.reshape(30, 32), flat, atol=1e-13)


def test_solve_batched_rejects_bad_shapes():
    z, w = gridsim.network().zbus()
    with pytest.raises(ValueError, match="s_load"):
        gridsim.solve_batched(z, w, torch.ones(4, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"z: expected shape \(\.\.\., 31, 31\)"):
        gridsim.solve_batched(z, w[:31], torch.ones(4, 31, dtype=torch.complex128))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_solve_batched_on_cuda_matches_cpu():
    net = gridsim.network()
    z, w = net.zbus()
    s = net.loads_to_pu(sample_loads(net, 100, 0.5, np.random.default_rng(6)))
    v_cpu, _, _ = gridsim.solve_batched(z, w, s)
    v_gpu, ok, _ = gridsim.solve_batched(z, w, s.cuda())
    assert v_gpu.device.type == "cuda" and ok.all()
    assert torch.allclose(v_gpu.cpu(), v_cpu, atol=1e-12)


@pytest.mark.parametrize("solver", ["batched", "pandapower"])
def test_non_convergence_is_flagged_and_masked_not_dropped(solver):
    net = gridsim.network()
    normal = sample_loads(net, 3, 0.1, np.random.default_rng(7))
    x = np.concatenate([normal[:2], 8.0 * normal[2:]])  # 8x load: voltage collapse, no solution
    result = gridsim.solve(x, solver=solver)
    assert result.converged.tolist() == [True, True, False]
    assert result.n_failed == 1
    assert np.isnan(result.vm_pu[2]).all() and np.isnan(result.va_degree[2]).all()
    assert np.isfinite(result.vm_pu[:2]).all()
    alone = gridsim.solve(normal[:2], solver=solver)
    assert np.abs(result.vm_pu[:2] - alone.vm_pu).max() <= 1e-10  # the solver tolerance
    frame = result.to_frame()
    assert len(frame) == 3 and frame["converged"].tolist() == [True, True, False]
    assert np.array_equal(frame[list(net.feature_names)].to_numpy(), x)  # the load vector is kept
    assert frame.loc[2, list(net.output_names)].isna().all()


def test_absurd_load_level_fails_every_scenario():
    result = gridsim.simulate(20, 0.1, 0, load_level=6.0)
    assert result.n_failed == 20 and not result.converged.any()
    assert np.isnan(result.vm_pu).all() and result.x.shape == (20, 64)

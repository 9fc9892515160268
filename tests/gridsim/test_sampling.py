"""Scenario sampling: the paper's protocol, the documented options, seeds, and bad input."""

import numpy as np
import pytest

import gridsim
from gridsim.sampling import ScenarioOptions, sample_loads

NET = gridsim.network()


def rng(seed=0):
    return np.random.default_rng(seed)


def test_paper_protocol_bounds_and_independence():
    x = sample_loads(NET, 4000, 0.3, rng())
    base = NET.base_x
    assert x.shape == (4000, 64)
    assert (x >= base * 0.7 - 1e-15).all() and (x <= base * 1.3 + 1e-15).all()
    u = (x / base - 1) / 0.3  # relative perturbations, should be U(-1, 1) and independent
    assert u.min() < -0.99 and u.max() > 0.99 and abs(u.mean()) < 0.02
    assert np.abs(np.corrcoef(u.T) - np.eye(64)).max() < 0.1


def test_delta_zero_gives_base_load():
    assert np.array_equal(sample_loads(NET, 3, 0.0, rng()), np.tile(NET.base_x, (3, 1)))


def test_same_seed_same_scenarios_different_seed_different():
    a = gridsim.simulate(50, 0.5, 7)
    b = gridsim.simulate(50, 0.5, 7)
    c = gridsim.simulate(50, 0.5, 8)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.vm_pu, b.vm_pu)
    assert not np.allclose(a.x, c.x)
    d = gridsim.simulate(50, 0.5, np.random.default_rng(7))  # a Generator works too
    assert np.array_equal(a.x, d.x)


def test_load_level_scales_everything():
    x1 = sample_loads(NET, 10, 0.2, rng(1))
    x2 = sample_loads(NET, 10, 0.2, rng(1), ScenarioOptions(load_level=1.7))
    assert np.allclose(x2, 1.7 * x1, rtol=1e-15)
    low, high = gridsim.simulate(10, 0.2, 1), gridsim.simulate(10, 0.2, 1, load_level=1.7)
    assert (high.vm_pu < low.vm_pu).all()  # heavier load, lower voltage at every bus


def test_correlation_one_moves_all_loads_together():
    x = sample_loads(NET, 100, 0.4, rng(2), ScenarioOptions(correlation=1.0))
    u = x / NET.base_x - 1
    assert np.allclose(u, u[:, :1], atol=1e-12)
    assert u.std() > 0.1


def test_correlation_keeps_bounds_and_raises_correlation():
    x = sample_loads(NET, 4000, 0.4, rng(3), ScenarioOptions(correlation=0.5))
    u = (x / NET.base_x - 1) / 0.4
    assert u.min() >= -1 - 1e-12 and u.max() <= 1 + 1e-12
    off_diagonal = np.corrcoef(u.T)[~np.eye(64, dtype=bool)]
    assert abs(off_diagonal.mean() - 0.5) < 0.03  # documented: c^2 / (c^2 + (1-c)^2) = 0.5 at c = 0.5


def test_pf_spread_varies_q_beyond_protocol_within_documented_bounds():
    s = 0.5
    x = sample_loads(NET, 4000, 0.2, rng(4), ScenarioOptions(pf_spread=s))
    p, q = x[:, :32], x[:, 32:]
    assert (p >= NET.base_p_mw * 0.8 - 1e-15).all() and (p <= NET.base_p_mw * 1.2 + 1e-15).all()
    ratio = q / NET.base_q_mvar
    assert ratio.min() >= 0.8 * 0.5 - 1e-12 and ratio.max() <= 1.2 * 1.5 + 1e-12
    assert ratio.min() < 0.8 * 0.9 and ratio.max() > 1.2 * 1.1  # really beyond the protocol's [0.8, 1.2]


def test_distributed_generation_gives_negative_net_load():
    x = sample_loads(NET, 200, 0.1, rng(5), ScenarioOptions(dg_buses=(18, 33), dg_mw=(0.5, 1.0)))
    ref = sample_loads(NET, 200, 0.1, rng(5))
    col18, col33 = NET.load_buses.index(18), NET.load_buses.index(33)
    assert np.allclose(x[:, col18], ref[:, col18] - 0.5) and np.allclose(x[:, col33], ref[:, col33] - 1.0)
    assert (x[:, col18] < 0).all() and (x[:, col33] < 0).all()
    others = [i for i in range(64) if i not in (col18, col33)]
    assert np.array_equal(x[:, others], ref[:, others])
    result = gridsim.simulate(20, 0.1, 5, dg_buses=(18,), dg_mw=0.5)
    base = gridsim.simulate(20, 0.1, 5)
    assert result.converged.all()
    assert (result.vm_pu[:, col18] > base.vm_pu[:, col18]).all()  # generation lifts the local voltage


@pytest.mark.parametrize(
    "options, field",
    [
        (dict(load_level=0.0), "load_level"),
        (dict(load_level=float("nan")), "load_level"),
        (dict(pf_spread=1.0), "pf_spread"),
        (dict(correlation=1.5), "correlation"),
        (dict(dg_buses=(5,), dg_mw=-1.0), "dg_mw"),
        (dict(dg_buses=(5, 6), dg_mw=(1.0, 2.0, 3.0)), "dg_mw"),
        (dict(dg_buses=(5, 5), dg_mw=1.0), "dg_buses"),
        (dict(dg_buses=(1,), dg_mw=1.0), "dg_buses"),  # the slack bus has no load
        (dict(dg_buses=(34,), dg_mw=1.0), "dg_buses"),
        (dict(voltage=1.0), "options: unknown"),
    ],
)
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ValueError, match=field):
        gridsim.simulate(5, 0.1, 0, **options)

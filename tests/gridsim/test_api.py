"""simulate/solve validation (ValueError naming the field) and the result object."""

import numpy as np
import pytest

import gridsim

NET = gridsim.network()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n=0), r"n: expected an integer >= 1, got 0"),
        (dict(n=2.5), r"n: expected an integer >= 1"),
        (dict(delta=-0.1), r"delta: expected a number with 0 <= delta < 1, got -0.1"),
        (dict(delta=1.0), r"delta: expected a number with 0 <= delta < 1, got 1.0"),
        (dict(delta=float("nan")), r"delta: expected"),
        (dict(delta=float("inf")), r"delta: expected"),
        (dict(seed=-1), r"seed: expected an integer >= 0"),
        (dict(seed="abc"), r"seed: expected"),
        (dict(network="ieee34"), r"network: expected one of \['ieee33', .*\] or random-<buses>-<seed>, got 'ieee34'"),
        (dict(solver="newton"), r"solver: expected one of \['batched', 'pandapower'\], got 'newton'"),
    ],
)
def test_simulate_bad_input(kwargs, message):
    args = dict(n=5, delta=0.1, seed=0) | kwargs
    with pytest.raises(ValueError, match=message):
        gridsim.simulate(**args)


@pytest.mark.parametrize(
    "x, message",
    [
        (np.ones((3, 63)), r"x: expected shape \(n, 64\)"),
        (np.ones((3, 65)), r"x: expected shape \(n, 64\)"),
        (np.ones((0, 64)), r"x: expected shape \(n, 64\) with n >= 1"),
        (np.ones((2, 3, 64)), r"x: expected shape \(n, 64\)"),
        ([["a"] * 64], r"x: expected numbers"),
    ],
)
def test_solve_bad_shape(x, message):
    with pytest.raises(ValueError, match=message):
        gridsim.solve(x)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_solve_rejects_non_finite_and_names_the_column(bad):
    x = np.tile(NET.base_x, (3, 1))
    x[1, 40] = bad
    with pytest.raises(ValueError, match=r"x: expected finite values, got .* at row 1 \(q_mvar_bus10\)"):
        gridsim.solve(x)


def test_solve_unknown_network_and_solver():
    with pytest.raises(ValueError, match="network: expected one of"):
        gridsim.solve(NET.base_x, network="case9")
    with pytest.raises(ValueError, match="solver: expected one of"):
        gridsim.solve(NET.base_x, solver="fast")


def test_result_shapes_frame_and_single_vector():
    result = gridsim.simulate(25, 0.1, 3)
    assert result.x.shape == (25, 64) and result.vm_pu.shape == result.va_degree.shape == (25, 32)
    assert result.converged.shape == (25,) and result.converged.dtype == bool and result.n_failed == 0
    assert (result.vm_pu < 1).all() and (result.vm_pu > 0.85).all() and np.isfinite(result.va_degree).all()
    frame = result.to_frame()
    assert list(frame.columns) == [*NET.feature_names, *NET.output_names, "converged"]
    assert np.array_equal(frame[list(NET.output_names)].to_numpy(), result.vm_pu)
    assert "va_degree_bus33" in result.to_frame(angles=True).columns
    single = gridsim.solve(NET.base_x)  # one load vector of 64 is one scenario
    assert single.vm_pu.shape == (1, 32)
    assert single.vm_pu.min() == pytest.approx(0.9131, abs=1e-4)  # the well-known IEEE 33 base case, bus 18
    assert int(np.argmin(single.vm_pu)) == NET.load_buses.index(18)

"""The ridge / leave-one-out kernel every base fit shares: exact LOO residuals, the guard, the leverage."""

from __future__ import annotations

import pytest
import torch

from models.ridge_loo import LEVERAGE_LAMBDA, LOO_MIN_SLACK, PHYSICS_GRID, RIDGE_GRID, FixedLeverage, ridge_loo


def _centred(n: int, p: int, k: int, noise: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    design = torch.randn(1, n, p, generator=gen, dtype=torch.float64)
    design = design - design.mean(dim=1, keepdim=True)
    y = design @ torch.randn(1, p, k, generator=gen, dtype=torch.float64)
    y = y + noise * torch.randn(1, n, k, generator=gen, dtype=torch.float64)
    return design, y - y.mean(dim=1, keepdim=True)


@pytest.mark.parametrize("grid", [PHYSICS_GRID, RIDGE_GRID])
def test_leave_one_out_residuals_match_refits_without_the_point(grid):
    """The closed-form LOO residual at each output's chosen penalty is the error of a refit without the point."""
    design, yc = _centred(40, 6, 2, 0.1, seed=3)
    fit = ridge_loo(design, yc, grid)
    s2 = fit.s.square()[:, None, :]
    lam = (s2 / fit.shrink - s2)[0, :, 0]  # each output's chosen penalty
    for i in (0, 17, 39):
        keep = torch.arange(40) != i
        for out in range(2):
            x, y = design[0, keep], yc[0, keep, out]
            x_mean, y_mean = x.mean(0), y.mean()  # the fit centres on its own rows, as the 1/n leverage term assumes
            b = torch.linalg.solve(
                (x - x_mean).T @ (x - x_mean) + lam[out] * torch.eye(6, dtype=x.dtype), (x - x_mean).T @ (y - y_mean)
            )
            held = yc[0, i, out] - (y_mean + (design[0, i] - x_mean) @ b)
            assert torch.isclose(fit.loo[0, i, out], held, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("grid", [PHYSICS_GRID, RIDGE_GRID])
def test_no_penalty_that_interpolates_a_point_is_chosen(grid):
    """Fewer points than features: the smallest penalties interpolate every point (1 - h -> 0), whose
    LOO residual is then 0 / 0. The guard leaves each output a penalty with slack at every point."""
    design, yc = _centred(20, 64, 3, 1e-3, seed=5)
    fit = ridge_loo(design, yc, grid)
    leverage = fit.u.square() @ fit.shrink.transpose(-1, -2) + 1.0 / 20  # (1, n, k) at each output's penalty
    assert float((1.0 - leverage).min()) > LOO_MIN_SLACK
    assert bool(torch.isfinite(fit.loo_mse).all()) and bool(torch.isfinite(fit.loo).all())


def test_beta_is_the_ridge_solution_at_the_chosen_penalty():
    design, yc = _centred(50, 8, 2, 0.05, seed=7)
    fit = ridge_loo(design, yc, RIDGE_GRID)
    s2 = fit.s.square()[:, None, :]
    lam = (s2 / fit.shrink - s2)[0, :, 0]
    for out in range(2):
        x = design[0]
        b = torch.linalg.solve(x.T @ x + lam[out] * torch.eye(8, dtype=x.dtype), x.T @ yc[0, :, out])
        torch.testing.assert_close(fit.beta[0, :, out], b, rtol=1e-8, atol=1e-12)


def test_fixed_leverage_is_the_hat_diagonal_at_the_fixed_penalty():
    """In-sample: x_i' (X'X + LEVERAGE_LAMBDA n I)^-1 x_i + 1/n. A query gets h / (1 + h) of the same h:
    a context row asked as a query gets exactly that of its own in-sample leverage."""
    n = 30
    design, _ = _centred(n, 5, 1, 0.0, seed=9)
    state, in_sample = FixedLeverage.of(*torch.linalg.svd(design, full_matrices=False))
    x = design[0]
    gram = x.T @ x + LEVERAGE_LAMBDA * n * torch.eye(5, dtype=x.dtype)
    torch.testing.assert_close(in_sample[0], torch.einsum("nd,de,ne->n", x, torch.linalg.inv(gram), x) + 1.0 / n)
    torch.testing.assert_close(state.at(design), in_sample / (1.0 + in_sample))

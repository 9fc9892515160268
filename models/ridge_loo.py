"""Ridge regression whose penalty each output picks by exact leave-one-out error, from one SVD.

The one kernel behind every closed-form base fit (models/base_fit.py's ridge base, and both fits
of models/physics_base.py), like a GP choosing its hyperparameters on the context itself: no refit
per held-out point, since a linear smoother's LOO residual is e_i / (1 - h_i). Also the leverage
at a fixed penalty, the input-only feature the attention sees. Float64 throughout. The design's
share of the work (`RidgeBasis`) is kept where one design is fitted to several target sets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Penalty grids, relative to n (inputs are standardised, so s_j^2 ~ n). Each base kind keeps the grid
# its checkpoints were trained and calibrated with (models/base_fit.py picks by ModelConfig.base): the
# ridge-base checkpoints answer differently on the physics grid (tests/models/test_shipped_reference.py).
PHYSICS_GRID = (1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1.0, 10.0)
RIDGE_GRID = (1e-9, 1e-7, 1e-5, 1e-3, 1e-1, 10.0)
# Smallest 1 - leverage a penalty may leave at any context point and still be a candidate; also the
# divisor's floor where a point's LOO residual would be 0 / 0.
LOO_MIN_SLACK = 1e-6
# The penalty of the leverage feature: fixed, so that feature depends on inputs only.
LEVERAGE_LAMBDA = 1e-4


@dataclass(frozen=True)
class RidgeLOO:
    """One ridge fit per output at its chosen penalty, and what a second fit on the same SVD reuses."""

    beta: torch.Tensor  # (B, p, k) coefficients
    loo: torch.Tensor  # (B, n, k) leave-one-out residuals
    loo_mse: torch.Tensor  # (B, k) their mean square (inf where no penalty was a candidate)
    u: torch.Tensor  # (B, n, r) the design's SVD
    s: torch.Tensor  # (B, r)
    vh: torch.Tensor  # (B, r, p)
    shrink: torch.Tensor  # (B, k, r) each output's s^2 / (s^2 + lambda)
    coef: torch.Tensor  # (B, k, r) each output's s / (s^2 + lambda)


def fitted_per_penalty(u: torch.Tensor, shrink: torch.Tensor, uy: torch.Tensor) -> torch.Tensor:
    """In-sample fits (B, L, n, k) at every penalty: U diag(shrink_l) U^T y, as one matmul over all
    penalties and outputs (measured faster than the equivalent three-operand einsum)."""
    b, n, r = u.shape
    coef = (shrink[..., None] * uy[:, None]).transpose(1, 2).reshape(b, r, -1)  # (B, r, L*k)
    return (u @ coef).view(b, n, shrink.shape[1], -1).transpose(1, 2)


def ridge_loo(design: torch.Tensor, yc: torch.Tensor, grid: tuple[float, ...]) -> RidgeLOO:
    """Ridge on a centred design (B, n, p) for centred targets (B, n, k), each output's penalty the
    one of `grid` (times n) with the smallest LOO mean squared error."""
    return RidgeBasis.of(design, grid).fit(yc)


@dataclass(frozen=True)
class RidgeBasis:
    """A design's SVD and what each penalty of a grid takes from it whatever the targets (shrinkage, leverage):
    the part of `ridge_loo` that depends on the design alone, built once where one design is fitted to several
    target sets (models.physics_base.ContextLoads: the loads of the guard's noisy probes, models.off_context)."""

    u: torch.Tensor  # (B, n, r)
    s: torch.Tensor  # (B, r)
    vh: torch.Tensor  # (B, r, p)
    shrink: torch.Tensor  # (B, L, r) s^2 / (s^2 + lambda) per penalty
    coef: torch.Tensor  # (B, L, r) s / (s^2 + lambda)
    slack: torch.Tensor  # (B, L, n) 1 - each point's leverage, floored at LOO_MIN_SLACK
    usable: torch.Tensor  # (B, L) bool: the penalty leaves every point more than LOO_MIN_SLACK

    @classmethod
    def of(cls, design: torch.Tensor, grid: tuple[float, ...]) -> RidgeBasis:
        n = design.shape[-2]
        u, s, vh = torch.linalg.svd(design, full_matrices=False)
        s2 = s.square()
        lam = torch.tensor(grid, dtype=s.dtype, device=s.device) * n
        shrink = s2[:, None, :] / (s2[:, None, :] + lam[None, :, None])  # (B, L, r)
        leverage = torch.einsum("bnr,blr->bln", u.square(), shrink) + 1.0 / n
        # A penalty that (nearly) interpolates a point (leverage -> 1, as with fewer points than
        # features) has no usable LOO residual there: 0 / 0. It is not a candidate.
        usable = (1.0 - leverage).amin(dim=-1) > LOO_MIN_SLACK  # (B, L)
        coef = s[:, None, :] / (s2[:, None, :] + lam[None, :, None])  # (B, L, r)
        return cls(u, s, vh, shrink, coef, (1.0 - leverage).clamp_min(LOO_MIN_SLACK), usable)

    def fit(self, yc: torch.Tensor) -> RidgeLOO:
        """`ridge_loo` of this design for centred targets (B, n, k)."""
        u, n = self.u, self.u.shape[-2]
        uy = u.transpose(-1, -2) @ yc  # (B, r, k)
        fitted = fitted_per_penalty(u, self.shrink, uy)
        loo = (yc[:, None] - fitted) / self.slack[..., None]  # (B, L, n, k)
        err = loo.square().mean(dim=-2)  # (B, L, k)
        err = torch.where(self.usable[..., None], err, torch.full_like(err, torch.inf))
        best_err, best = err.min(dim=1)  # (B, k)
        loo = torch.gather(loo, 1, best[:, None, None, :].expand(-1, 1, n, -1))[:, 0]
        coef = torch.gather(self.coef, 1, best[..., None].expand(-1, -1, self.coef.shape[-1]))  # (B, k, r)
        beta = self.vh.transpose(-1, -2) @ (coef.transpose(-1, -2) * uy)  # (B, p, k)
        chosen = torch.gather(self.shrink, 1, best[..., None].expand(-1, -1, self.shrink.shape[-1]))  # (B, k, r)
        return RidgeLOO(beta, loo, best_err, u, self.s, self.vh, chosen, coef)


@dataclass(frozen=True)
class FixedLeverage:
    """Leverage of ridge at the fixed penalty LEVERAGE_LAMBDA: a point's pull on its own fit, from
    inputs only. `at` gives a query the leverage it would have had in the context."""

    right_vectors: torch.Tensor  # (B, r, p) of the design
    weights: torch.Tensor  # (B, r): 1 / (s^2 + lambda)
    n_context: int

    @staticmethod
    def of(u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor) -> tuple[FixedLeverage, torch.Tensor]:
        """From the design's SVD: the state for queries and the context points' own leverage (B, n)."""
        n = u.shape[-2]
        s2 = s.square()
        weights = 1.0 / (s2 + LEVERAGE_LAMBDA * n)
        in_sample = (u.square() * (s2 * weights)[:, None, :]).sum(-1) + 1.0 / n
        return FixedLeverage(vh, weights, n), in_sample

    def at(self, design: torch.Tensor) -> torch.Tensor:
        """(B, m) for query rows of the same design (B, m, p)."""
        proj = design @ self.right_vectors.transpose(-1, -2)
        h = (proj.square() * self.weights[:, None, :]).sum(-1) + 1.0 / self.n_context
        return h / (1.0 + h)  # what the leverage would be had the query been in the context

"""The in-context base fit under the attention: one protocol, one implementation per kind.

Why: the network learns the distribution of what a closed-form fit on the context leaves over. The
fit's leave-one-out residuals are the attention's values, its query prediction the location the bar
distribution is placed around (the role a mean function plays in a GP), and its leverage an
input-only feature. `ModelConfig.base` picks the kind: "physics" (models/physics_base.py:
DistFlow-structured), "ridge" (`RidgeBase`: linear in the loads) or "none" (`MeanBase`: the plain
PFN of the paper). All work in float64 on standardised loads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Generic, Protocol, TypeVar

import torch

from models.ridge_loo import RIDGE_GRID, FixedLeverage, ridge_loo

# Added to the residuals' rms, relative to |y_mean| + 1, so that an output the context never moves
# keeps a positive scale. Each kind keeps the floor its checkpoints were trained with (the physics
# base's is in models/physics_base.py).
RIDGE_SCALE_FLOOR = 1e-9


class FittedBase(Protocol):
    """A base fit's state on one context: what its queries need."""

    @property
    def y_mean(self) -> torch.Tensor:
        """(B, k) the context's mean of each output."""
        ...

    @property
    def n_context(self) -> int: ...

    def select(self, pick: torch.Tensor) -> FittedBase:
        """Keep outputs `pick` (B, k'): training fits the base on every bus, then trains on a few."""
        ...


F = TypeVar("F", bound=FittedBase)


@dataclass(frozen=True)
class ContextFit(Generic[F]):
    """What fitting a context gives: the state, and what the attention's context tokens carry."""

    fitted: F
    residuals: torch.Tensor  # (B, n, k) each point's held-out (leave-one-out) residual; "none": y - mean
    leverage: torch.Tensor | None  # (B, n) each point's in-sample leverage at the fixed penalty; None: no such feature


@dataclass(frozen=True)
class BasePrediction:
    loc: torch.Tensor  # (B, m, k) the base fit's prediction
    leverage: torch.Tensor | None  # (B, m) the leverage each query would have had in the context; None: no such feature


class BaseFit(Protocol[F]):
    """A closed-form fit on the context: `fit` once per context, `predict` per query chunk."""

    scale_floor: float  # see RIDGE_SCALE_FLOOR

    def fit(self, xs: torch.Tensor, y: torch.Tensor, x_std: torch.Tensor) -> ContextFit[F]:
        """Standardised loads xs (B, n, d), targets y (B, n, k) float64, the loads' std x_std (B, d)."""
        ...

    def predict(self, fitted: F, xs: torch.Tensor) -> BasePrediction:
        """At standardised query loads xs (B, m, d)."""
        ...


@dataclass(frozen=True)
class MeanFit:
    y_mean: torch.Tensor  # (B, k)
    n_context: int

    def select(self, pick: torch.Tensor) -> MeanFit:
        return replace(self, y_mean=torch.gather(self.y_mean, 1, pick))


class MeanBase:
    """No base fit: every output's context mean, the residuals its deviations (the paper's PFN)."""

    scale_floor = RIDGE_SCALE_FLOOR

    def fit(self, xs: torch.Tensor, y: torch.Tensor, x_std: torch.Tensor) -> ContextFit[MeanFit]:
        y_mean = y.mean(dim=-2)
        return ContextFit(MeanFit(y_mean, xs.shape[-2]), y - y_mean[..., None, :], None)

    def predict(self, fitted: MeanFit, xs: torch.Tensor) -> BasePrediction:
        return BasePrediction(fitted.y_mean[:, None, :].expand(-1, xs.shape[-2], -1), None)


@dataclass(frozen=True)
class RidgeFit:
    y_mean: torch.Tensor  # (B, k)
    beta: torch.Tensor  # (B, d, k) on standardised loads
    leverage: FixedLeverage

    @property
    def n_context(self) -> int:
        return self.leverage.n_context

    def select(self, pick: torch.Tensor) -> RidgeFit:
        return replace(
            self,
            y_mean=torch.gather(self.y_mean, 1, pick),
            beta=torch.gather(self.beta, 2, pick[:, None, :].expand(-1, self.beta.shape[1], -1)),
        )


class RidgeBase:
    """Ridge regression on the standardised loads, each output's penalty from `grid` by LOO error."""

    scale_floor = RIDGE_SCALE_FLOOR

    def __init__(self, grid: tuple[float, ...] = RIDGE_GRID):
        self.grid = grid

    def fit(self, xs: torch.Tensor, y: torch.Tensor, x_std: torch.Tensor) -> ContextFit[RidgeFit]:
        x64 = xs.double()
        y_mean = y.mean(dim=-2)
        ridge = ridge_loo(x64, y - y_mean[..., None, :], self.grid)
        leverage, in_sample = FixedLeverage.of(ridge.u, ridge.s, ridge.vh)
        return ContextFit(RidgeFit(y_mean, ridge.beta, leverage), ridge.loo, in_sample)

    def predict(self, fitted: RidgeFit, xs: torch.Tensor) -> BasePrediction:
        x64 = xs.double()
        return BasePrediction(x64 @ fitted.beta + fitted.y_mean[:, None, :], fitted.leverage.at(x64))

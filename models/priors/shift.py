"""Queries beyond the context's regime: what planners and operators ask of a model.

A context is measured in one regime (this winter, today's load, no PV export yet); the questions
come from another: load growth to 1.6x, PV exporting at some buses, a wider spread of loads, or
another season. In a shifted dataset the points after the first `n_context` (the ones the trainer
holds out as queries) are moved out of the context's regime by one or more of these; the model
then learns how far its errors grow off the context. Unshifted datasets and the context points
are left as drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.config import PowerFlowPriorConfig
from models.priors.profiles import uniform

# Given a shifted dataset: how often each shift of its queries appears (at least one is drawn).
P_GROWTH, P_EXPORT, P_WIDER = 0.6, 0.4, 0.3


def _bernoulli(p: float, shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return torch.rand(shape, generator=g, dtype=torch.float64, device=g.device) < p


@dataclass(frozen=True)
class Shift:
    """Per dataset and point how its queries leave the context's regime (identity where they do not)."""

    shifted: torch.Tensor  # (B,) bool: the dataset's queries are shifted
    growth: torch.Tensor  # (B, N, 1) load multiplier (1 on the context and unshifted datasets)
    wider: torch.Tensor  # (B, N, 1) multiplier of a point's deviation from the nominal loads
    export: torch.Tensor  # (B, N, n_bus) bool: this bus exports PV at this point
    export_share: torch.Tensor  # (B, N, n_bus) its net export, x the bus's base P at the dataset's level
    season_start: torch.Tensor  # (B, 1) where a shifted profile context's stretch of the year begins
    season_width: torch.Tensor  # (B, 1) its length (share of the year); 1 = the whole year (unshifted)

    @classmethod
    def draw(
        cls, cfg: PowerFlowPriorConfig, batch: int, n_points: int, n_context: int, n_bus: int, g: torch.Generator
    ) -> Shift:
        device = g.device
        shifted = _bernoulli(cfg.p_shifted, (batch,), g)
        growth_on, export_on, wider_on = (_bernoulli(p, (batch,), g) for p in (P_GROWTH, P_EXPORT, P_WIDER))
        growth_on = growth_on | ~(export_on | wider_on)  # at least one shift per shifted dataset
        query = (torch.arange(n_points, device=device) >= n_context)[None, :, None]  # (1, N, 1)

        top = uniform(cfg.shift_growth, (batch, 1, 1), g)
        factor = 1.0 + (top - 1.0) * torch.rand(batch, n_points, 1, generator=g, dtype=torch.float64, device=device)
        on = query & (shifted & growth_on)[:, None, None]
        growth = torch.where(on, factor, torch.ones((), dtype=torch.float64, device=device))

        spread = uniform(cfg.shift_wider, (batch, 1, 1), g).expand(batch, n_points, 1)
        on = query & (shifted & wider_on)[:, None, None]
        wider = torch.where(on, spread, torch.ones((), dtype=torch.float64, device=device))

        count = torch.randint(
            cfg.shift_pv_buses[0], cfg.shift_pv_buses[1] + 1, (batch, 1, 1), generator=g, device=device
        )
        rank = torch.rand(batch, 1, n_bus, generator=g, device=device).argsort(dim=-1).argsort(dim=-1)
        export = (rank < count) & query & (shifted & export_on)[:, None, None]
        export_share = uniform(cfg.shift_pv_export, (batch, n_points, n_bus), g)

        width = uniform(cfg.season_window, (batch, 1), g)
        start = torch.rand(batch, 1, generator=g, dtype=torch.float64, device=device)
        width = torch.where(shifted[:, None], width, torch.ones((), dtype=torch.float64, device=device))
        return cls(shifted, growth, wider, export, export_share, start, width)

    def consumption(self, demand: torch.Tensor, nominal: torch.Tensor) -> torch.Tensor:
        """Demand (B, N, n) moved off the context's regime: deviations from `nominal` widened, then grown."""
        return (nominal + self.wider * (demand - nominal)) * self.growth

    def net_p(self, p: torch.Tensor, base_p: torch.Tensor) -> torch.Tensor:
        """Net P (B, N, n_bus) with the exporting buses' replaced by -share x `base_p` (B, 1, n_bus)."""
        return torch.where(self.export, -self.export_share * base_p, p)

    def seasons(self, n_points: int, n_context: int, g: torch.Generator) -> torch.Tensor:
        """(B, N) time of year of every point: a shifted dataset's context within its stretch of the
        year, its queries anywhere in the year; unshifted datasets anywhere."""
        batch = self.shifted.shape[0]
        u = torch.rand(batch, n_points, generator=g, dtype=torch.float64, device=g.device)
        context = (torch.arange(n_points, device=g.device) < n_context)[None, :]
        within = (self.season_start + self.season_width * u) % 1.0
        return torch.where(context & self.shifted[:, None], within, u)

"""The bars' unit of a target_scale="probe" model: how far the base fit can miss at a query.

At query q the unit is sqrt(s^2 (1 + h) + e^2): s the context's residual scale, h the query's leverage, and e
the network model's miss there. e is measured by refitting the base on the network model's own voltages at the
context loads (the "probe") and comparing with the network model's voltage at q: what the context could not
teach the fit (load growth, reversed flows). With noisy readings the fit also goes astray off the context by
how far the noise carries it, and s^2 h understates that by 10-100x far out (the physics base picks its penalty
and its feeder tree from the readings, so noise moves both): the probe is refitted `refits` times on the network
voltages plus noise at the readings' level, and their scatter around the exact probe is added to e in
quadrature (as the service's OffContextGuard does for its answers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from models.base_fit import BaseFit, ContextFit, FittedBase

# The noisy refits' draws come from this seed, so that one context always gets one unit (answers repeat).
REFIT_SEED = 0


def probe_voltages(probe_y: torch.Tensor | None, shape: Sequence[int]) -> torch.Tensor:
    """The network model's voltages a target_scale="probe" model needs, checked: (B, N, k) float64."""
    if probe_y is None:
        raise ValueError("probe_y: target_scale='probe' needs the network model's voltages at every point")
    if probe_y.shape[:-1] != tuple(shape[:-1]) or (shape[-1] != -1 and probe_y.shape[-1] != shape[-1]):
        raise ValueError(f"probe_y: expected shape {tuple(shape)}, got {tuple(probe_y.shape)}")
    return probe_y.double()


def probe_unit(y_scale: torch.Tensor, leverage: torch.Tensor | None, miss: torch.Tensor) -> torch.Tensor:
    """sqrt(s^2 (1 + h) + e^2) (B, k, m): the context's scale s (B, k), leverage h and probe miss e (B, m)."""
    spread = 1.0 if leverage is None else 1.0 + leverage.double()[:, None, :]
    return (y_scale[..., None].square() * spread + miss[:, None, :].square()).sqrt()


def excess_noise(fit: ContextFit[Any], exact: ContextFit[Any]) -> torch.Tensor:
    """(B, k) the readings' noise std per bus: the variance of the fit's leave-one-out residuals on the
    readings beyond that of the same fit on the network model's exact voltages (its own misfit). Not
    models.off_context.reading_noise (a numpy Bayesian fit of the service's guard): this one is batched in
    torch from the two fits the model has anyway, for every training step."""
    return (fit.residuals.square().mean(dim=-2) - exact.residuals.square().mean(dim=-2)).clamp_min(0.0).sqrt()


@dataclass(frozen=True)
class Probe:
    """The base fitted on the network model's voltages at the context loads, and on them plus noise."""

    exact: FittedBase
    noisy: tuple[FittedBase, ...] = ()

    @staticmethod
    def fit(
        base: BaseFit[Any],
        xs: torch.Tensor,
        voltages: torch.Tensor,
        x_std: torch.Tensor,
        fit: ContextFit[Any],
        refits: int,
    ) -> tuple[Probe, torch.Tensor]:
        """The probe of a context (standardised loads xs (B, n, d), the network model's voltages (B, n, k)
        there, the fit on the readings `fit`) and its miss (B, n) at each context point held out."""
        exact = base.fit(xs, voltages, x_std)
        held = exact.residuals.abs().amax(dim=-1).square()  # (B, n)
        noisy = []
        if refits:
            sigma = excess_noise(fit, exact)[:, None, :]
            g = torch.Generator(device=voltages.device).manual_seed(REFIT_SEED)
            scatter = torch.zeros_like(held)
            for _ in range(refits):
                noise = torch.randn(voltages.shape, generator=g, device=voltages.device, dtype=voltages.dtype) * sigma
                refit = base.fit(xs, voltages + noise, x_std)
                noisy.append(refit.fitted)
                # held out, the refit predicts v + noise - its residual, the probe v - its residual
                scatter += (noise - refit.residuals + exact.residuals).abs().amax(dim=-1).square()
            held = held + scatter / refits
        return Probe(exact.fitted, tuple(noisy)), held.sqrt()

    def miss(self, base: BaseFit[Any], xs: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
        """(B, m): at standardised query loads xs, the exact probe's largest miss over the buses of the network
        model's voltages `truth` (B, m, k), and the noisy refits' rms scatter around it, in quadrature."""
        at = base.predict(self.exact, xs).loc
        miss = (at - truth).abs().amax(dim=-1).square()
        if self.noisy:
            scatter = sum((base.predict(f, xs).loc - at).abs().amax(dim=-1).square() for f in self.noisy)
            miss = miss + scatter / len(self.noisy)
        return miss.sqrt()

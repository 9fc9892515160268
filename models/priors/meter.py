"""Meter noise on the readings a context is made of (issue 29, item 2).

Voltage readings carry noise up to a few 1e-3 p.u. and load readings a relative error of up to a
few %; the power flow is solved on the true loads, and the model sees the readings. Which points
are readings: the context's (the first `n_context`) when the caller says where it ends, else all.
"""

from __future__ import annotations

import math

import torch

from models.config import PowerFlowPriorConfig
from models.priors.profiles import uniform


def voltage_noise_std(cfg: PowerFlowPriorConfig, batch: int, g: torch.Generator) -> torch.Tensor:
    """Per-dataset std (B,) of the voltage readings' noise: `noise`, plus log-uniform for the noisy ones."""
    lo, hi = (math.log(v) for v in cfg.noise_range)
    noisy = torch.rand(batch, generator=g, dtype=torch.float64, device=g.device) < cfg.p_noisy
    extra = torch.where(noisy, uniform((lo, hi), (batch,), g).exp(), torch.zeros((), device=g.device))
    return cfg.noise + extra


def read_voltages(
    cfg: PowerFlowPriorConfig, vm: torch.Tensor, n_context: int | None, g: torch.Generator
) -> torch.Tensor:
    """Voltage readings of true magnitudes vm (B, N, k); the queries keep the truth unless `noisy_queries`."""
    noise = voltage_noise_std(cfg, vm.shape[0], g)[:, None, None] * torch.randn(
        vm.shape, generator=g, dtype=torch.float64, device=g.device
    )
    if n_context is not None and not cfg.noisy_queries:
        noise[:, n_context:] = 0.0
    return vm + noise


def read_loads(cfg: PowerFlowPriorConfig, x: torch.Tensor, n_context: int | None, g: torch.Generator) -> torch.Tensor:
    """Load readings of true loads x (B, N, d): each off by a relative error, std uniform in `load_noise`
    for a `p_load_noise` share of the datasets; queries (what is asked) are exact."""
    batch = x.shape[0]
    on = torch.rand(batch, 1, 1, generator=g, dtype=torch.float64, device=g.device) < cfg.p_load_noise
    std = torch.where(on, uniform(cfg.load_noise, (batch, 1, 1), g), torch.zeros((), device=g.device))
    error = std * torch.randn(x.shape, generator=g, dtype=torch.float64, device=g.device)
    if n_context is not None:
        error[:, n_context:] = 0.0
    return x * (1.0 + error)

"""The paper's GP prior (Table 11): x ~ U[0,1]^d, y ~ GP(shift, RBF) + noise."""

from __future__ import annotations

import torch

from models.config import GPPriorConfig
from models.priors.base import PriorBatch

# Table 11 of the DVA paper, by input dimension.
PAPER_GP_PRIORS = {
    1: GPPriorConfig(dim=1, lengthscale=0.6, variance=0.01, noise=1e-2, shift_low=1.0, shift_high=1.0),
    2: GPPriorConfig(dim=2, lengthscale=0.6, variance=0.01, noise=1e-2, shift_low=1.0, shift_high=1.0),
    5: GPPriorConfig(dim=5, lengthscale=0.6, variance=0.001, noise=1e-4, shift_low=1.0, shift_high=1.0),
    10: GPPriorConfig(dim=10, lengthscale=0.6, variance=0.01, noise=1e-4, shift_low=1.0, shift_high=1.0),
    64: GPPriorConfig(dim=64, lengthscale=215.0, variance=1e-4, noise=1e-4, shift_low=0.9, shift_high=1.1),
}


class GPPrior:
    """Batched draws of single-output GP datasets."""

    n_outputs = 1

    def __init__(self, config: GPPriorConfig, device: str | None = None):
        self.config = config
        self.d_in = config.dim
        self.device = torch.device(device or "cpu")

    def sample(
        self, batch_size: int, n_points: int, generator: torch.Generator, n_context: int | None = None
    ) -> PriorBatch:
        """`n_context` is ignored: every point is drawn alike."""
        cfg = self.config
        x = torch.rand(batch_size, n_points, cfg.dim, generator=generator, dtype=torch.float64)
        sq = torch.cdist(x, x).pow(2)
        eye = torch.eye(n_points, dtype=torch.float64)
        cov = cfg.variance * torch.exp(-0.5 * sq / cfg.lengthscale**2) + (cfg.noise + 1e-9) * eye
        chol = torch.linalg.cholesky(cov)
        z = torch.randn(batch_size, n_points, 1, generator=generator, dtype=torch.float64)
        shift = cfg.shift_low + (cfg.shift_high - cfg.shift_low) * torch.rand(
            batch_size, 1, 1, generator=generator, dtype=torch.float64
        )
        y = chol @ z + shift
        return PriorBatch(x.to(self.device), y.to(self.device))

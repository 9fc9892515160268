"""Priors: batched, seedable generators of synthetic datasets (x, y) a PFN is trained on."""

from __future__ import annotations

from models.config import GPPriorConfig, PowerFlowPriorConfig
from models.priors.base import Prior, PriorBatch


def make_prior(config: GPPriorConfig | PowerFlowPriorConfig, device: str | None = None) -> Prior:
    """The prior a training config names."""
    if isinstance(config, GPPriorConfig):
        from models.priors.gp import GPPrior

        return GPPrior(config, device=device)
    if config.random_feeders is not None:
        from models.priors.feeders import FeederPrior

        return FeederPrior(config, device=device)
    from models.priors.powerflow import PowerFlowPrior

    return PowerFlowPrior(config, device=device)


__all__ = ["Prior", "PriorBatch", "make_prior"]

"""What every prior returns: a batch of datasets sharing one size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class PriorBatch:
    """B datasets of N points: inputs (B, N, d) and targets (B, N, k)."""

    x: torch.Tensor
    y: torch.Tensor
    # where each load bus sits among the outputs when the batch's feeder is not the model's own (a prior
    # over feeders); None: the prior's one network, whose positions the model's config holds
    load_positions: tuple[int, ...] | None = None
    # (B, N, k) the network model's voltages at each point's load readings (PowerFlowPriorConfig.probe); None: not asked
    probe_y: torch.Tensor | None = None


class Prior(Protocol):
    d_in: int
    n_outputs: int

    def sample(
        self, batch_size: int, n_points: int, generator: torch.Generator, n_context: int | None = None
    ) -> PriorBatch:
        """`n_context`: where the caller's context ends and its queries begin (priors that shift
        queries off the context's regime need it; None: unknown)."""
        ...

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


class Prior(Protocol):
    d_in: int
    n_outputs: int

    def sample(
        self, batch_size: int, n_points: int, generator: torch.Generator, n_context: int | None = None
    ) -> PriorBatch:
        """`n_context`: where the caller's context ends and its queries begin (priors that shift
        queries off the context's regime need it; None: unknown)."""
        ...

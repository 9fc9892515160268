"""A prior over feeders: every batch on another random radial feeder (gridsim.random_feeder).

Why: a model trained on variations of one feeder learns that feeder's width and layout; one that is
to serve any feeder (an upload, a built-in it never saw) has to see many, of many sizes. Each batch
is one feeder (the tensors of a batch share one width), drawn by size and seed from the caller's
generator, then the usual power-flow prior (load regimes, DG, profiles, noise, impedance variations)
on it. Feeders are built once and kept: the pool's few hundred recur over a run.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
import torch

from models.config import PowerFlowPriorConfig
from models.priors.base import PriorBatch
from models.priors.powerflow import PowerFlowPrior

# Feeders kept built (a pandapower build, its scaling power flows and a snapshot: 1-2 s each on one
# CPU core): a pool is a few hundred; more would be memory for nothing, fewer would rebuild.
KEPT_FEEDERS = 512


class FeederPrior:
    """`PowerFlowPrior` on a random feeder per batch; batches carry their feeder's load positions."""

    def __init__(self, config: PowerFlowPriorConfig, device: str | None = None):
        if config.random_feeders is None:
            raise ValueError("random_feeders: a prior over feeders needs a range of bus counts")
        self.config, self.device = config, device
        self._built: OrderedDict[str, PowerFlowPrior] = OrderedDict()
        self.d_in = 0  # per batch: its feeder's
        self.n_outputs = 0

    def feeder_name(self, generator: torch.Generator) -> str:
        """The next batch's feeder, `random-<buses>-<seed>`: a seed of the pool drawn from `generator`,
        its bus count fixed by the seed (so the pool is `feeder_seeds`' size, not sizes x seeds)."""
        assert self.config.random_feeders is not None  # checked in __init__
        lo, hi = self.config.random_feeders
        seed = int(torch.randint(*self.config.feeder_seeds, (1,), generator=generator))
        buses = int(np.random.default_rng(seed).integers(lo, hi + 1))
        return f"random-{buses}-{seed}"

    def on(self, name: str) -> PowerFlowPrior:
        """The power-flow prior on feeder `name`, built once."""
        prior = self._built.get(name)
        if prior is None:
            prior = PowerFlowPrior(dataclasses.replace(self.config, network=name), device=self.device)
            self._built[name] = prior
            while len(self._built) > KEPT_FEEDERS:
                self._built.popitem(last=False)
        self._built.move_to_end(name)
        return prior

    def sample(
        self, batch_size: int, n_points: int, generator: torch.Generator, n_context: int | None = None
    ) -> PriorBatch:
        prior = self.on(self.feeder_name(generator))
        batch = prior.sample(batch_size, n_points, generator, n_context=n_context)
        positions = tuple(int(p) for p in prior.net.load_positions)
        return dataclasses.replace(batch, load_positions=positions)

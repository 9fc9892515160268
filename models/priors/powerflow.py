"""A power-flow prior: each dataset is a feeder variation and a load regime, solved exactly.

Wide on purpose, so a model trained on it stays accurate on feeders it has not seen: global
load level, perturbation size from a few % to 60 %, power-factor spread, correlated and
uncorrelated perturbations, distributed generation, line-impedance variations, reconfigured
feeders (tie switches closed, loop lines opened) and noisy voltage readings. Targets are
left in p.u.; the model scales them per dataset (a fixed output scale would make real voltage
variation look like noise).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from gridsim.batched import solve_batched
from gridsim.network import network
from models.config import PowerFlowPriorConfig
from models.priors.base import PriorBatch

log = logging.getLogger(__name__)


def _uniform(lo_hi: tuple[float, float], shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    lo, hi = lo_hi
    return lo + (hi - lo) * torch.rand(shape, generator=generator, dtype=torch.float64)


class PowerFlowPrior:
    """Batched draws of (loads -> bus voltage magnitudes) datasets on varied feeders."""

    def __init__(self, config: PowerFlowPriorConfig, device: str | None = None):
        self.config = config
        self.net = network(config.network)
        self.d_in = self.net.n_features
        self.n_outputs = self.net.n_load
        self.device = torch.device(device or "cpu")
        self.base_p = torch.tensor(self.net.base_p_mw, dtype=torch.float64)
        self.base_q = torch.tensor(self.net.base_q_mvar, dtype=torch.float64)

    def _feeders(self, batch: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-dataset line impedances and switching -> reduced Z-bus (B, n, n) and no-load voltages (B, n)."""
        cfg = self.config
        switching = cfg.p_reconfigured > 0 and len(self.net.tie_r_ohm) > 0
        n_all = self.net.n_lines + (len(self.net.tie_r_ohm) if switching else 0)
        scale = _uniform(cfg.line_scale, (batch, 1), g) * torch.exp(
            cfg.line_jitter * torch.randn(batch, n_all, generator=g, dtype=torch.float64)
        )
        if not switching:
            return self.net.zbus(scale)
        switched = torch.rand(batch, generator=g, dtype=torch.float64) < cfg.p_reconfigured
        exchanges = int(torch.randint(cfg.exchanges[0], cfg.exchanges[1] + 1, (1,), generator=g))
        rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
        closed = torch.as_tensor(self.net.radial_configurations(batch, exchanges, rng))
        normal = torch.arange(n_all) < self.net.n_lines
        return self.net.zbus_switched(torch.where(switched[:, None], closed, normal), scale)

    def _loads(self, batch: int, n_points: int, g: torch.Generator) -> torch.Tensor:
        """Load vectors (B, N, 64) in MW / MVAr, P then Q."""
        cfg, n_bus = self.config, self.net.n_load
        level = _uniform(cfg.load_level, (batch, 1, 1), g)
        log_delta = _uniform((math.log(cfg.delta[0]), math.log(cfg.delta[1])), (batch, 1, 1), g)
        delta = log_delta.exp()
        pf = 1.0 + cfg.pf_spread[1] * _uniform((-1.0, 1.0), (batch, 1, n_bus), g) * _uniform(
            (cfg.pf_spread[0] / max(cfg.pf_spread[1], 1e-12), 1.0), (batch, 1, 1), g
        )
        correlated = torch.rand(batch, 1, 1, generator=g, dtype=torch.float64) < cfg.p_correlated
        share = torch.where(correlated, _uniform(cfg.correlation, (batch, 1, 1), g), torch.zeros(()))
        common = _uniform((-1.0, 1.0), (batch, n_points, 1), g)
        own_p = _uniform((-1.0, 1.0), (batch, n_points, n_bus), g)
        own_q = _uniform((-1.0, 1.0), (batch, n_points, n_bus), g)
        p = self.base_p * level * (1.0 + delta * (share * common + (1 - share) * own_p))
        q = self.base_q * pf * level * (1.0 + delta * (share * common + (1 - share) * own_q))
        p = p - self._generation(batch, n_points, delta, level, g)
        return torch.cat([p, q], dim=-1)

    def _generation(
        self, batch: int, n_points: int, delta: torch.Tensor, level: torch.Tensor, g: torch.Generator
    ) -> torch.Tensor:
        """Distributed generation (B, N, n_bus) MW at a few random buses of some datasets."""
        cfg, n_bus = self.config, self.net.n_load
        has_dg = torch.rand(batch, 1, 1, generator=g, dtype=torch.float64) < cfg.p_dg
        count = torch.randint(cfg.dg_buses[0], cfg.dg_buses[1] + 1, (batch, 1, 1), generator=g)
        rank = torch.rand(batch, 1, n_bus, generator=g).argsort(dim=-1).argsort(dim=-1)
        at_bus = (rank < count) & has_dg
        size = _uniform(cfg.dg_level, (batch, 1, n_bus), g) * self.base_p * level
        output = 1.0 + delta * _uniform((-1.0, 1.0), (batch, n_points, n_bus), g)
        return torch.where(at_bus, size * output, torch.zeros(()))

    def _noise_std(self, batch: int, g: torch.Generator) -> torch.Tensor:
        """Per-dataset std of the voltage readings' noise (B,): `noise`, plus log-uniform for noisy ones."""
        cfg = self.config
        lo, hi = (math.log(v) for v in cfg.noise_range)
        noisy = torch.rand(batch, generator=g, dtype=torch.float64) < cfg.p_noisy
        extra = torch.where(noisy, _uniform((lo, hi), (batch,), g).exp(), torch.zeros(()))
        return cfg.noise + extra

    def sample(self, batch_size: int, n_points: int, generator: torch.Generator) -> PriorBatch:
        xs, ys, missing, attempts = [], [], batch_size, 0
        while missing > 0:
            attempts += 1
            if attempts > 20:
                raise RuntimeError("power-flow prior: too many non-converged datasets; narrow the load levels")
            z, w = self._feeders(missing, generator)
            x = self._loads(missing, n_points, generator)
            v, converged, _ = solve_batched(z, w, self.net.loads_to_pu(x))
            ok = converged.all(dim=-1)
            if not bool(ok.all()):
                log.debug("power-flow prior: %d of %d datasets did not converge; redrawn", int((~ok).sum()), missing)
            vm = v[ok].abs()
            if self.config.noise > 0 or self.config.p_noisy > 0:
                vm = vm + self._noise_std(vm.shape[0], generator)[:, None, None] * torch.randn(
                    vm.shape, generator=generator, dtype=torch.float64
                )
            xs.append(x[ok])
            ys.append(vm)
            missing -= int(ok.sum())
        x = torch.cat(xs)[:batch_size]
        y = torch.cat(ys)[:batch_size]
        return PriorBatch(x.to(self.device), y.to(self.device))

"""A power-flow prior: each dataset is a feeder variation and a load regime, solved exactly.

Wide on purpose, so a model trained on it stays accurate on feeders it has not seen: global
load level, perturbation size from a few % to 60 %, power-factor spread, correlated and
uncorrelated perturbations, distributed generation, line-impedance variations, reconfigured
feeders (tie switches closed, loop lines opened) and noisy voltage readings. Targets are
left in p.u.; the model scales them per dataset (a fixed output scale would make real voltage
variation look like noise).

Operating data (issue 29), each a share of the datasets: loads that follow correlated daily
profiles with PV under a daylight bell (profiles.py), queries beyond the context's regime
(shift.py), meter noise on the context's voltage and load readings (meter.py). With `probe`, every
point is also solved on the network model (the feeder as built) at its readings, as the service solves
a user's network model: what a model with `target_scale="probe"` scales its targets by. Random draws
happen on the prior's device (a GPU generator seeded from the caller's), so the whole prior
runs on a GPU; on the CPU the caller's generator draws everything, as before.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from gridsim.batched import solve_batched
from gridsim.network import network
from models.config import PowerFlowPriorConfig
from models.priors import meter
from models.priors.base import PriorBatch
from models.priors.profiles import clouds, profile_loads, pv_bell
from models.priors.profiles import uniform as _uniform
from models.priors.shift import Shift

log = logging.getLogger(__name__)


class PowerFlowPrior:
    """Batched draws of (loads -> bus voltage magnitudes) datasets on varied feeders."""

    def __init__(self, config: PowerFlowPriorConfig, device: str | None = None):
        self.config = config
        self.net = network(config.network)
        self.d_in = self.net.n_features
        self.n_outputs = self.net.n_load
        self.device = torch.device(device or "cpu")
        self.base_p = torch.tensor(self.net.base_p_mw, dtype=torch.float64, device=self.device)
        self.base_q = torch.tensor(self.net.base_q_mvar, dtype=torch.float64, device=self.device)
        self._zbus: tuple[torch.Tensor, torch.Tensor] | None = None

    def _draws(self, g: torch.Generator) -> torch.Generator:
        """The generator of the bulk draws: the caller's on the CPU; on a GPU one on the GPU seeded
        from the caller's, so a (seed, step) still fixes the data and no draw crosses devices."""
        if self.device.type == "cpu":
            return g
        seed = int(torch.randint(0, 2**62, (1,), generator=g))
        return torch.Generator(device=self.device).manual_seed(seed)

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

    def _loads(self, batch: int, n_points: int, n_context: int | None, g: torch.Generator) -> torch.Tensor:
        """True load vectors (B, N, 2 n_bus) in MW / MVAr, P then Q."""
        cfg, n_bus = self.config, self.net.n_load
        level = _uniform(cfg.load_level, (batch, 1, 1), g)
        log_delta = _uniform((math.log(cfg.delta[0]), math.log(cfg.delta[1])), (batch, 1, 1), g)
        delta = log_delta.exp()
        pf = 1.0 + cfg.pf_spread[1] * _uniform((-1.0, 1.0), (batch, 1, n_bus), g) * _uniform(
            (cfg.pf_spread[0] / max(cfg.pf_spread[1], 1e-12), 1.0), (batch, 1, 1), g
        )
        zero = torch.zeros((), dtype=torch.float64, device=g.device)
        correlated = torch.rand(batch, 1, 1, generator=g, dtype=torch.float64, device=g.device) < cfg.p_correlated
        share = torch.where(correlated, _uniform(cfg.correlation, (batch, 1, 1), g), zero)
        common = _uniform((-1.0, 1.0), (batch, n_points, 1), g)
        own_p = _uniform((-1.0, 1.0), (batch, n_points, n_bus), g)
        own_q = _uniform((-1.0, 1.0), (batch, n_points, n_bus), g)
        rel_p = 1.0 + delta * (share * common + (1 - share) * own_p)
        rel_q = 1.0 + delta * (share * common + (1 - share) * own_q)
        shift = (
            None if n_context is None or cfg.p_shifted == 0 else Shift.draw(cfg, batch, n_points, n_context, n_bus, g)
        )
        t = season = None
        if cfg.p_profiles > 0:
            profiled = torch.rand(batch, 1, 1, generator=g, dtype=torch.float64, device=g.device) < cfg.p_profiles
            t = torch.rand(batch, n_points, generator=g, dtype=torch.float64, device=g.device)
            if shift is not None:
                season = shift.seasons(n_points, n_context or 0, g)
            else:
                season = torch.rand(batch, n_points, generator=g, dtype=torch.float64, device=g.device)
            daily = profile_loads(t, season, cfg.profile_amplitude, cfg.profile_jitter, cfg.season_amplitude, n_bus, g)
            # Q follows the same daily shape as P (one appliance mix), with its own small noise
            rel_p = torch.where(profiled, daily + delta.clamp(max=0.05) * own_p, rel_p)
            rel_q = torch.where(profiled, daily + delta.clamp(max=0.05) * own_q, rel_q)
        nominal_p = self.base_p * level
        nominal_q = self.base_q * pf * level
        p = nominal_p * rel_p
        q = nominal_q * rel_q
        if shift is not None:
            p, q = shift.consumption(p, nominal_p), shift.consumption(q, nominal_q)
        daylight = None
        if t is not None and season is not None:
            sun = pv_bell(t, season)[..., None] * clouds(batch, n_points, n_bus, cfg.pv_cloud, g)
            daylight = torch.where(profiled, sun, torch.full((), math.nan, dtype=torch.float64, device=g.device))
        p = p - self._generation(batch, n_points, delta, level, g, daylight)
        if shift is not None:
            p = shift.net_p(p, nominal_p)
        return torch.cat([p, q], dim=-1)

    def _generation(
        self,
        batch: int,
        n_points: int,
        delta: torch.Tensor,
        level: torch.Tensor,
        g: torch.Generator,
        daylight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Distributed generation (B, N, n_bus) MW at a few random buses of some datasets: output
        within +-delta of its size, or its size x `daylight` (B, N, n_bus) where that is not NaN (PV)."""
        cfg, n_bus = self.config, self.net.n_load
        has_dg = torch.rand(batch, 1, 1, generator=g, dtype=torch.float64, device=g.device) < cfg.p_dg
        count = torch.randint(cfg.dg_buses[0], cfg.dg_buses[1] + 1, (batch, 1, 1), generator=g, device=g.device)
        rank = torch.rand(batch, 1, n_bus, generator=g, device=g.device).argsort(dim=-1).argsort(dim=-1)
        at_bus = (rank < count) & has_dg
        size = _uniform(cfg.dg_level, (batch, 1, n_bus), g) * self.base_p * level
        output = 1.0 + delta * _uniform((-1.0, 1.0), (batch, n_points, n_bus), g)
        if daylight is not None:
            output = torch.where(daylight.isnan(), output, daylight)
        return torch.where(at_bus, size * output, torch.zeros((), dtype=torch.float64, device=g.device))

    def sample(
        self, batch_size: int, n_points: int, generator: torch.Generator, n_context: int | None = None
    ) -> PriorBatch:
        """`batch_size` datasets of `n_points` (loads, voltages). `n_context`: the caller takes the first
        n_context points as the context and the rest as queries; shifted datasets (p_shifted) move
        those queries off the context's regime, and meter noise stays on the context's readings
        (with noisy_queries False). None: no shift, readings noise on every point."""
        cfg = self.config
        if n_context is not None and not 0 <= n_context <= n_points:
            raise ValueError(f"n_context: expected 0..n_points={n_points}, got {n_context}")
        xs, ys, probes, missing, attempts = [], [], [], batch_size, 0
        while missing > 0:
            attempts += 1
            if attempts > 20:
                raise RuntimeError("power-flow prior: too many non-converged datasets; narrow the load levels")
            z, w = self._feeders(missing, generator)
            g = self._draws(generator)
            x = self._loads(missing, n_points, n_context, g)
            v, converged, _ = solve_batched(z.to(self.device), w.to(self.device), self.net.loads_to_pu(x))
            ok = converged.all(dim=-1)
            if not bool(ok.all()):
                log.debug("power-flow prior: %d of %d datasets did not converge; redrawn", int((~ok).sum()), missing)
            vm = v[ok].abs()
            x = x[ok]
            if cfg.noise > 0 or cfg.p_noisy > 0:
                vm = meter.read_voltages(cfg, vm, n_context, g)
            if cfg.p_load_noise > 0:
                x = meter.read_loads(cfg, x, n_context, g)
            if cfg.probe:  # the network model at the readings; a dataset it cannot carry is redrawn too
                v, converged, _ = solve_batched(*self._model_zbus, self.net.loads_to_pu(x))
                carried = converged.all(dim=-1)
                x, vm = x[carried], vm[carried]
                probes.append(v[carried].abs())
                ok = carried
            xs.append(x)
            ys.append(vm)
            missing -= int(ok.sum())
        x = torch.cat(xs)[:batch_size]
        y = torch.cat(ys)[:batch_size]
        probe = torch.cat(probes)[:batch_size].to(self.device) if cfg.probe else None
        return PriorBatch(x.to(self.device), y.to(self.device), probe_y=probe)

    @property
    def _model_zbus(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The network model's reduced Z-bus and no-load voltages (the feeder as built), computed once."""
        if self._zbus is None:
            z, w = self.net.zbus()
            self._zbus = (z.to(self.device), w.to(self.device))
        return self._zbus

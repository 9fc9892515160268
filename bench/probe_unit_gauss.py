"""How far the probe's unit alone is from calibrated answers (issue 29, items 5-6): a Gaussian in the unit.

A probed checkpoint's bars are in the unit sqrt(s^2 (1 + h) + e^2) (models/probe_unit.py). Before any training,
the simplest model in that unit is the base fit's mean plus a normal error of std f * unit, f set so that 95 %
of the context's leave-one-out residuals fall within f units (held-out calibration, as the service does). This
prints its worst-bus 95 % coverage and its width over the width that would just cover (median over buses), in
range (+-10 %) and at 1.3-1.5x growth, on a feeder whose lines are 1.2x the network model's, readings with noise
0, 1e-4, 1e-3 p.u.; for the unit as trained (e the largest miss over the buses) and per bus. Whatever it misses,
a checkpoint's training must learn.

    .venv/bin/python bench/probe_unit_gauss.py [--network random-30-5]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gridsim.api import VoltageModel  # noqa: E402
from gridsim.batched import solve_batched  # noqa: E402
from gridsim.network import network  # noqa: E402
from models import physics_base  # noqa: E402
from models.testing import TINY_ANY_CONFIG, tiny_model  # noqa: E402

CONTEXT, QUERIES, REFITS = 300, 200, 2


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(a, dtype=torch.float64)[None]


def _units(model, cache, xs: torch.Tensor, v: torch.Tensor, per_bus: bool) -> torch.Tensor:
    """(1, k, m) the unit at standardised loads xs, the network model's voltages there v (1, m, k)."""
    base, probe = model.base, cache.stats.probe
    at = base.predict(probe.exact, xs).loc
    exact = (at - v).abs()
    scatter = sum((base.predict(f, xs).loc - at).square() for f in probe.noisy) / len(probe.noisy)
    if per_bus:
        miss = exact.square() + scatter
    else:
        miss = (exact.amax(-1).square() + scatter.amax(-1))[..., None].expand_as(exact)
    leverage = base.predict(cache.stats.base, xs).leverage[..., None]
    return (cache.stats.y_scale[:, None, :].square() * (1 + leverage) + miss).sqrt().transpose(-1, -2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="random-30-5")
    net = network(parser.parse_args().network)
    config = dataclasses.replace(TINY_ANY_CONFIG, target_scale="probe", probe_refits=REFITS)
    model = tiny_model(config).eval().on_network(net.load_positions)
    voltages = VoltageModel(net)
    lines = net.zbus(torch.full((net.n_lines,), 1.2, dtype=torch.float64))

    def truth(x: np.ndarray) -> np.ndarray:
        return solve_batched(*lines, net.loads_to_pu(torch.as_tensor(x)))[0].abs().numpy()

    def loads(rows: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return net.base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, size=(rows, net.n_features)))

    print(f"{net.name}: lines 1.2x the network model's; worst-bus coverage, width / covering width (median over buses)")
    for noise in (0.0, 1e-4, 1e-3):
        for seed in range(2):
            cx = loads(CONTEXT, 10 + seed)
            growth = np.random.default_rng(seed).uniform(1.3, 1.5, (QUERIES, 1)) * loads(QUERIES, 30 + seed)
            cy = truth(cx) + np.random.default_rng(40 + seed).normal(0.0, noise, (CONTEXT, net.n_outputs))
            x_mean, x_std = physics_base.load_scaling(_tensor(cx))
            line = []
            with torch.no_grad():
                cache = model.encode_context(_tensor(cx), _tensor(cy), probe_y=_tensor(voltages(cx)))
                loo = cache.targets * cache.stats.y_scale[..., None]
                for per_bus in (False, True):
                    xs = model._standardise_x(_tensor(cx), x_mean, x_std)
                    factor = float(
                        np.quantile((loo / _units(model, cache, xs, _tensor(voltages(cx)), per_bus)).abs(), 0.95)
                    )
                    cells = []
                    for name, q in (("in range", loads(QUERIES, 20 + seed)), ("growth", growth)):
                        xs = model._standardise_x(_tensor(q), x_mean, x_std)
                        unit = _units(model, cache, xs, _tensor(voltages(q)), per_bus)
                        loc = model.base.predict(cache.stats.base, xs).loc.transpose(-1, -2)
                        err = (_tensor(truth(q)).transpose(-1, -2) - loc).abs()
                        coverage = float((err <= factor * unit).double().mean(-1).min())
                        width = float((factor / torch.quantile(err / unit, 0.95, dim=-1)).median())
                        cells.append(f"{name} {coverage:.3f} at {width:.2f}x")
                    line.append(f"{'per bus' if per_bus else 'as trained'} (f {factor:.2f}): " + ", ".join(cells))
            print(f"noise {noise:g}, seed {seed}: " + " | ".join(line))


if __name__ == "__main__":
    main()

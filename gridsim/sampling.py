"""Seedable load-scenario sampling: the paper's protocol plus options a planner needs.

Paper protocol (all options at their defaults): every P_i and Q_i independently uniform in
[base*(1-delta), base*(1+delta)]. Options, applied in this order:

- correlation c in [0, 1]: each relative perturbation is u = c*g + (1-c)*e, with one common
  g ~ U(-1, 1) per scenario (shared by all P and Q) and independent e ~ U(-1, 1); stays in
  [-1, 1], so the protocol bounds still hold; any two loads correlate c^2 / (c^2 + (1-c)^2).
  c = 1 moves all loads together.
- pf_spread s in [0, 1): each Q_i is further multiplied by an independent factor in [1-s, 1+s],
  spreading power factors beyond the protocol (Q in base_q*(1-delta)(1-s) .. (1+delta)(1+s)).
- load_level L > 0: global multiplier on every P and Q (peak/valley studies).
- dg_buses, dg_mw: distributed generation; dg_mw MW (one value for all, or one per bus) is
  subtracted from P at those IEEE buses after scaling, so net active load can be negative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from gridsim.network import Network

__all__ = ["ScenarioOptions", "sample_loads", "check_delta", "check_n"]


@dataclass(frozen=True)
class ScenarioOptions:
    """Sampling options beyond the paper's protocol; the defaults reproduce it exactly."""

    load_level: float = 1.0
    pf_spread: float = 0.0
    correlation: float = 0.0
    dg_buses: tuple[int, ...] = ()
    dg_mw: float | tuple[float, ...] = 0.0

    def __post_init__(self):
        def finite(name):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ValueError(f"{name}: expected a finite number, got {value!r}")
            return float(value)

        if not finite("load_level") > 0:
            raise ValueError(f"load_level: expected a number > 0, got {self.load_level!r}")
        if not 0 <= finite("pf_spread") < 1:
            raise ValueError(f"pf_spread: expected 0 <= pf_spread < 1, got {self.pf_spread!r}")
        if not 0 <= finite("correlation") <= 1:
            raise ValueError(f"correlation: expected 0 <= correlation <= 1, got {self.correlation!r}")
        buses = tuple(self.dg_buses)
        if not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in buses):
            raise ValueError(f"dg_buses: expected IEEE bus numbers (int), got {self.dg_buses!r}")
        if len(set(buses)) != len(buses):
            raise ValueError(f"dg_buses: expected distinct buses, got {self.dg_buses!r}")
        object.__setattr__(self, "dg_buses", tuple(int(b) for b in buses))
        mw = self.dg_mw
        mw = tuple(mw) if isinstance(mw, (tuple, list, np.ndarray)) else (mw,) * len(buses)
        if len(mw) != len(buses):
            raise ValueError(f"dg_mw: expected one value or one per dg bus ({len(buses)}), got {len(mw)}")
        for value in mw:
            if not isinstance(value, (int, float, np.floating, np.integer)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"dg_mw: expected finite values >= 0 (MW generated), got {self.dg_mw!r}")
        object.__setattr__(self, "dg_mw", tuple(float(v) for v in mw))

    @classmethod
    def from_kwargs(cls, **options) -> ScenarioOptions:
        """Build from simulate(**options), naming unknown options in the error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"options: unknown {unknown}, expected some of {sorted(known)}")
        return cls(**options)


def check_delta(delta) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float, np.floating)) or not 0 <= delta < 1:
        raise ValueError(f"delta: expected a number with 0 <= delta < 1, got {delta!r}")
    return float(delta)


def check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n: expected an integer >= 1, got {n!r}")
    return int(n)


def sample_loads(
    network: Network, n: int, delta: float, rng: np.random.Generator, options: ScenarioOptions = ScenarioOptions()
) -> np.ndarray:
    """n load vectors (n, 2*n_load) in feature order [P (MW) ..., Q (MVAr) ...]."""
    n, delta = check_n(n), check_delta(delta)
    k = network.n_features
    u = rng.uniform(-1.0, 1.0, size=(n, k))
    if options.correlation > 0:
        common = rng.uniform(-1.0, 1.0, size=(n, 1))
        u = options.correlation * common + (1.0 - options.correlation) * u
    x = network.base_x * (1.0 + delta * u)
    if options.pf_spread > 0:
        m = network.n_load
        x[:, m:] *= 1.0 + options.pf_spread * rng.uniform(-1.0, 1.0, size=(n, m))
    x *= options.load_level
    if options.dg_buses:
        position = {b: i for i, b in enumerate(network.load_buses)}
        for bus, mw in zip(options.dg_buses, options.dg_mw):
            if bus not in position:
                raise ValueError(
                    f"dg_buses: expected load buses of {network.name} "
                    f"({network.load_buses[0]}..{network.load_buses[-1]}), got {bus}"
                )
            x[:, position[bus]] -= mw
    return x

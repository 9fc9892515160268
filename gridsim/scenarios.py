"""Scenarios in a planner's terms, expanded into the load rows a model answers.

A network keeps consumption and generation apart (`Network.base_consumption`, `base_generation`), so
scaling one leaves the other. Each row of a scenario, in the network's feature order (P then Q), is

    x = consumption * load_scale * (1 + growth_rate)^year * bus_scale * profile_t
        - generation * generation_scale * pv_t - added DER (kW, kvar) * pv_t

where consumption keeps each bus's power factor (Q scales with P), `profile_t` is a time series'
consumption factor at step t (one per step, or one per step and load bus) and `pv_t` its PV output
share (1 without a time series). A scenario with several `years` gives one row per year; with a
time series, one row per year and step. Every factor may be one per step or one per step and load bus.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gridsim.errors import NetworkError
from gridsim.network import Network


@dataclass(frozen=True)
class DER:
    """Generation added at a load bus: kW (and kvar) produced at full output."""

    bus: int
    kw: float
    kvar: float = 0.0


@dataclass(frozen=True)
class Scenario:
    name: str
    load_scale: float = 1.0
    bus_load_scale: Mapping[int, float] = field(default_factory=dict)
    generation_scale: float = 1.0
    der: tuple[DER, ...] = ()
    growth_rate: float = 0.0
    years: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class TimeSeries:
    """Steps with their consumption factor and their generation's output share (PV: the network's own
    generation and the added DER), each (steps,) or (steps, n_load) per load bus."""

    timestamps: tuple[str, ...]
    load: np.ndarray
    pv: np.ndarray
    step_hours: float = 0.25


@dataclass(frozen=True)
class Expanded:
    """The query rows and, per row, its scenario, year and time step (None without a time series)."""

    rows: np.ndarray  # (m, 2 n_load)
    scenario: tuple[str, ...]
    year: tuple[int, ...]
    timestamp: tuple[str, ...] | None


def _position(net: Network, bus: int, field_name: str) -> int:
    if bus not in net.load_buses:
        raise NetworkError(field_name, f"bus {bus} is not a load bus of {net.name}", f"one of {list(net.load_buses)}")
    return net.load_buses.index(bus)


def _per_bus(factor: np.ndarray, n: int) -> np.ndarray:
    """(steps, n) from a factor per step (steps,) or per step and load bus (steps, n)."""
    return np.broadcast_to(factor.reshape(len(factor), -1), (len(factor), n))


def _one(net: Network, scenario: Scenario, index: int, series: TimeSeries | None) -> np.ndarray:
    """(years x steps, 2 n_load) rows of one scenario."""
    n = net.n_load
    where = f"scenarios[{index}]"
    bus_scale = np.ones(n)
    for bus, factor in scenario.bus_load_scale.items():
        bus_scale[_position(net, int(bus), f"{where}.bus_load_scale")] *= factor
    added = np.zeros(2 * n)
    for k, der in enumerate(scenario.der):
        at = _position(net, der.bus, f"{where}.der[{k}].bus")
        added[at] += der.kw / 1e3
        added[n + at] += der.kvar / 1e3
    consumption = net.base_consumption * np.tile(bus_scale, 2)
    generation = net.base_generation * scenario.generation_scale + added
    profile, pv = (
        (np.ones((1, n)), np.ones((1, n))) if series is None else (_per_bus(series.load, n), _per_bus(series.pv, n))
    )
    per_year = []
    for year in scenario.years:
        level = scenario.load_scale * (1.0 + scenario.growth_rate) ** year
        per_year.append(consumption[None] * level * np.tile(profile, 2) - generation[None] * np.tile(pv, 2))
    return np.concatenate(per_year)


def expand(net: Network, scenarios: Sequence[Scenario], series: TimeSeries | None = None) -> Expanded:
    """Every scenario's rows, in order: scenario, then year, then time step."""
    if series is not None:
        steps = len(series.timestamps)
        if series.load.shape not in ((steps,), (steps, net.n_load)):
            raise NetworkError(
                "time_series.load",
                f"shape {series.load.shape} for {steps} steps",
                f"({steps},) or ({steps}, {net.n_load})",
            )
        if series.pv.shape not in ((steps,), (steps, net.n_load)):
            raise NetworkError(
                "time_series.pv", f"shape {series.pv.shape} for {steps} steps", f"({steps},) or ({steps}, {net.n_load})"
            )
    rows, names, years, stamps = [], [], [], []
    for i, scenario in enumerate(scenarios):
        block = _one(net, scenario, i, series)
        per_year = len(block) // len(scenario.years)
        rows.append(block)
        names += [scenario.name] * len(block)
        years += [y for y in scenario.years for _ in range(per_year)]
        if series is not None:
            stamps += list(series.timestamps) * len(scenario.years)
    return Expanded(np.concatenate(rows), tuple(names), tuple(years), tuple(stamps) if series is not None else None)

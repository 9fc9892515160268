"""Correlated daily load and PV profiles for the power-flow prior.

Operators' contexts are time series, not iid draws: every load follows a smooth daily shape that
it shares, in part, with loads of its class (homes, shops, workshops), and PV follows a daylight
bell that clouds cut into. A dataset here is a set of steps (time of day, time of year); each
bus mixes a few random smooth shapes (low harmonics of the day), the load level follows the
season, and PV output follows the bell of that day's length. Everything is drawn from the given
generator on its device, batched over datasets.
"""

from __future__ import annotations

import math

import torch

HARMONICS = 3  # a day's shape: harmonics 1..3 of the day (periods 24, 12 and 8 hours)
SHAPES = 3  # load classes whose shapes each bus mixes
GRID = 96  # steps of 15 minutes: where a shape's peak is found for normalising it
DAYLIGHT = (0.30, 0.70)  # share of the day with daylight, winter to summer
PV_SHARPNESS = 1.5  # the bell is sin(...)^1.5: flatter shoulders than a sine, as clear-sky PV


def uniform(lo_hi: tuple[float, float], shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Uniform draws in [lo, hi] (float64) on the generator's device."""
    lo, hi = lo_hi
    return lo + (hi - lo) * torch.rand(shape, generator=g, dtype=torch.float64, device=g.device)


def daily_shapes(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """(B, N) times of day in [0, 1) -> (B, N, SHAPES) smooth shapes, each scaled to peak |1| over the day."""
    batch = t.shape[0]
    k = torch.arange(1, HARMONICS + 1, dtype=torch.float64, device=t.device)
    amp = torch.randn(batch, SHAPES, HARMONICS, generator=g, dtype=torch.float64, device=g.device) / k
    phase = uniform((0.0, 2.0 * math.pi), (batch, SHAPES, HARMONICS), g)

    def at(times: torch.Tensor) -> torch.Tensor:  # (B, M) -> (B, M, SHAPES)
        angle = 2.0 * math.pi * times[:, :, None, None] * k + phase[:, None]  # (B, M, SHAPES, HARMONICS)
        return (amp[:, None] * torch.cos(angle)).sum(-1)

    grid = torch.arange(GRID, dtype=torch.float64, device=t.device).expand(batch, GRID) / GRID
    peak = at(grid).abs().amax(dim=1, keepdim=True).clamp_min(1e-9)  # (B, 1, SHAPES)
    return at(t) / peak


def bus_mixing(batch: int, n_bus: int, g: torch.Generator) -> torch.Tensor:
    """(B, n_bus, SHAPES) weights summing to 1: most buses lean to one class, some are mixed."""
    logits = 2.0 * torch.randn(batch, n_bus, SHAPES, generator=g, dtype=torch.float64, device=g.device)
    return torch.softmax(logits, dim=-1)


def season_factor(season: torch.Tensor, amplitude: torch.Tensor) -> torch.Tensor:
    """Load level over the year: (B, N) time of year (0 = 1 January) -> 1 + amplitude * cos, peaking in winter."""
    return 1.0 + amplitude * torch.cos(2.0 * math.pi * season)


def pv_bell(t: torch.Tensor, season: torch.Tensor) -> torch.Tensor:
    """Clear-sky PV output (0..1) at time of day t and time of year `season`: zero at night, a bell around
    noon whose width is the day's length and whose height is lower in winter."""
    summer = 0.5 - 0.5 * torch.cos(2.0 * math.pi * season)  # 0 in mid-winter, 1 in mid-summer
    length = DAYLIGHT[0] + (DAYLIGHT[1] - DAYLIGHT[0]) * summer
    phase = (t - (0.5 - length / 2.0)) / length  # 0 at sunrise, 1 at sunset
    inside = (phase > 0.0) & (phase < 1.0)
    bell = torch.sin(math.pi * phase.clamp(0.0, 1.0)).pow(PV_SHARPNESS)
    return torch.where(inside, bell, torch.zeros((), dtype=bell.dtype, device=bell.device)) * (0.5 + 0.5 * summer)


def clouds(batch: int, n_points: int, n_bus: int, depth: tuple[float, float], g: torch.Generator) -> torch.Tensor:
    """(B, N, n_bus) share of clear-sky PV that gets through: one cloud cover per step (shared by a
    feeder's PV, it is one sky) with a little per-bus variation."""
    deep = uniform(depth, (batch, 1, 1), g)
    cover = torch.rand(batch, n_points, 1, generator=g, dtype=torch.float64, device=g.device).pow(2)
    local = 0.1 * torch.rand(batch, n_points, n_bus, generator=g, dtype=torch.float64, device=g.device)
    return (1.0 - deep * (cover + local)).clamp(0.0, 1.0)


def profile_loads(
    t: torch.Tensor,
    season: torch.Tensor,
    amplitude: tuple[float, float],
    jitter: tuple[float, float],
    season_amplitude: tuple[float, float],
    n_bus: int,
    g: torch.Generator,
) -> torch.Tensor:
    """(B, N, n_bus) relative load (around 1) of every bus at every step: its class mix of the daily
    shapes times the season, plus small iid noise."""
    batch = t.shape[0]
    mixed = daily_shapes(t, g) @ bus_mixing(batch, n_bus, g).transpose(-1, -2)  # (B, N, n_bus)
    swing = uniform(amplitude, (batch, 1, 1), g) * uniform((0.5, 1.0), (batch, 1, n_bus), g)
    level = season_factor(season, uniform(season_amplitude, (batch, 1), g))[..., None]
    noise = uniform(jitter, (batch, 1, 1), g) * torch.randn(
        batch, t.shape[1], n_bus, generator=g, dtype=torch.float64, device=g.device
    )
    return level * (1.0 + swing * mixed) + noise

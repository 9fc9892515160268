"""Typical values of loads a context never metered, estimated from the loads it did meter.

network-fit solves every context row with each unmetered load at a typical value (a pseudo-measurement), and the
extrapolation measure places a query's unmetered loads about it. A network model's base loads are a poor default
where they are ratings rather than an operating point: SimBench's are about a load's peak and its generators' full
output (1-LV-semiurb4's households average a tenth of their base). With half the loads of 1-LV-semiurb4 or 1-MV-rural
never metered and their base values taken, network-fit erred 1e-2-2e-2 p.u. through the API, the worst bus held on 0-58 %
of queries (bench/results/partial-metering.md).

The loads the context did meter show how far each kind of customer runs below its rating: every load input is its
network's base consumption and generation split by customer class (`Network.class_consumption`, `class_generation`;
what no class names is one more class of each), and its mean over the context is taken as sum_c base_c * u_c with
one utilisation u_c per class and direction (consumption, generation) and per half (P, Q), fitted on the metered
inputs' means, relative to each input's size, shrunk toward one utilisation for all consumption and one for all
generation where a class has few metered inputs (`CLASS_SHRINKAGE`), and those toward one for everything where the
metered inputs do not tell them apart.
"""

from __future__ import annotations

import numpy as np

# A class's utilisation is pulled toward the pooled one as strongly as this many metered inputs wholly of the class would
CLASS_SHRINKAGE = 0.25
# Inputs metered in fewer context rows than this say too little of their mean (service.engine.sparse's threshold).
MIN_ROWS = 10


def estimated(x: np.ndarray, network: object, min_rows: int = MIN_ROWS) -> np.ndarray:
    """(d,) typical loads for context loads x (n, d; NaN: not metered in that row): each input at its base
    consumption and generation per class times the utilisations its metered inputs show (module docstring); the
    network's base loads where the context meters no input in `min_rows` rows, or none with a base."""
    x = np.asarray(x, dtype=np.float64)
    read = (~np.isnan(x)).sum(axis=0)
    metered = read >= min(min_rows, x.shape[0])
    if not metered.any():
        return np.asarray(network.base_x, dtype=np.float64).copy()  # type: ignore[attr-defined]
    mean = np.where(metered, np.nanmean(np.where(read > 0, x, 0.0), axis=0), 0.0)
    offset, weights = predictor(parts_of(network), np.asarray(network.base_x), metered)  # type: ignore[attr-defined]
    out: np.ndarray = offset + weights @ mean
    return out


def predictor(parts: np.ndarray, base: np.ndarray, metered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offset (d,), weights (d, d)): every input's value as the `metered` inputs' values (d,; bool) show it,
    offset + weights @ v for one row v (weights 0 on the columns not metered), by the class utilisations fitted on
    them (module docstring; `parts`: `parts_of` the network). The offset is the priors' (1e-9 of a unit: nothing);
    an input of a half (P, Q) with no metered input keeps its `base` value."""
    d = parts.shape[0]
    offset = np.asarray(base, dtype=np.float64).copy()
    weights = np.zeros((d, d))
    half = d // 2
    for columns in (np.arange(half), np.arange(half, d)):  # P, then Q: their profiles differ
        used = columns[np.asarray(metered, dtype=bool)[columns]]
        if not used.size:
            continue
        # the utilisations are affine in the metered values: their constant part, and each value's column
        constant = _utilisation(parts[used], np.zeros((used.size, 1)))
        linear = _utilisation(parts[used], np.eye(used.size)) - constant
        offset[columns] = (parts[columns] @ constant)[:, 0]
        weights[np.ix_(columns, used)] = parts[columns] @ linear
    return offset, weights


def sizes_of(network: object) -> np.ndarray:
    """(d,) each load input's size: the consumption plus the generation the network model places there (MW, Mvar)."""
    sizes: np.ndarray = np.abs(parts_of(network)).sum(axis=1)
    return sizes


def parts_of(network: object) -> np.ndarray:
    """(d, 2 C + 2): each input's base consumption of every class, the consumption no class names, then its base
    generation likewise, negated (it lowers the net load)."""
    consumption = np.asarray(network.base_consumption, dtype=np.float64)  # type: ignore[attr-defined]
    generation = np.asarray(network.base_generation, dtype=np.float64)  # type: ignore[attr-defined]
    by_class_c = np.asarray(network.class_consumption, dtype=np.float64).reshape(-1, consumption.size)  # type: ignore[attr-defined]
    by_class_g = np.asarray(network.class_generation, dtype=np.float64).reshape(-1, generation.size)  # type: ignore[attr-defined]
    rest_c = consumption - by_class_c.sum(axis=0)
    rest_g = generation - by_class_g.sum(axis=0)
    return np.column_stack([by_class_c.T, rest_c, -by_class_g.T, -rest_g])


def _utilisation(parts: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """(m, r) utilisations u with mean ~ parts @ u on the metered inputs, for each of r columns of means (k, r), each
    input's residual relative to its size; per class shrunk toward the pooled consumption and generation utilisation
    (CLASS_SHRINKAGE), those toward one for both (a direction no metered input shows: that one)."""
    size = np.abs(parts).sum(axis=1)
    keep = size > 0.0
    m, r = parts.shape[1], mean.shape[1]
    if not keep.any():
        return np.zeros((m, r))
    a, b = parts[keep] / size[keep, None], mean[keep] / size[keep, None]
    consumption = np.zeros(m, dtype=bool)
    consumption[: m // 2] = True
    pooled_design = np.column_stack([a[:, consumption].sum(axis=1), a[:, ~consumption].sum(axis=1)])
    # one utilisation for everything first: what a direction no metered input shows takes (a feeder whose meters are
    # all on households says nothing of its PV; at their ratings, full output at every step, 1-LV-rural1's unmetered
    # PV were taken 7x their real mean), and where the two directions cannot be told apart, what both lean to
    single = _ridge(pooled_design.sum(axis=1, keepdims=True), b, np.ones((1, r)), 1e-9)
    pooled = _ridge(pooled_design, b, np.repeat(single, 2, axis=0), 1e-3)
    prior = np.where(consumption[:, None], pooled[0][None, :], pooled[1][None, :])
    return _ridge(a, b, prior, CLASS_SHRINKAGE)


def _ridge(a: np.ndarray, b: np.ndarray, prior: np.ndarray, strength: float) -> np.ndarray:
    """argmin_u |a u - b|^2 + strength |u - prior|^2 per column of b (k, r) and prior (m, r) (strength > 0 keeps a
    class no input shows at its prior)."""
    gram = a.T @ a + strength * np.eye(a.shape[1])
    out: np.ndarray = np.linalg.solve(gram, a.T @ b + strength * prior)
    return out

"""Per-output spread calibration of a predictive, learned from the context set itself.

A PFN's predictive spread is right on average over its prior, not on every bus of every feeder:
on the IEEE 33-bus protocol some buses over-cover (95 % intervals holding 99 % of the truth).
A GP fixes its spread by fitting hyperparameters to the context; we do the analogue without
training: every context point gets a held-out prediction (`PFNMethod.spread_factors`: its own
attention key masked, its truth the base fit's leave-one-out residual, all in one pass), and a
split-conformal quantile of the normalised held-out errors gives one spread factor s per output.
The answer is then y' = m + s * (y - m) around the predictive mean m: the mean is untouched,
every interval and the std are scaled by s, and the central 95 % interval covers about 95 % of
held-out points on every output.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.stats import chi2, norm

from models.predictive import Predictive

# The central interval the spread factor is fitted to.
CALIBRATION_LEVEL = 0.95
# The chance that a shared error lies within every output's interval at once (`correlated_simultaneous_factor`):
# a context's error at an output is mostly one draw shared by its every query, so a miss is a miss on all of them
# (and, the error shared, on every output): at 0.95, one context in 20 left every bus of a feeder at 0 % coverage
# (network-fit, 1-LV-semiurb4, noise 1e-4: 1 of 12 draws).
FAMILY_LEVEL = 0.99
# Draws of the largest |z| over correlated outputs: its 99 % quantile to ~2 %.
SIMULTANEOUS_DRAWS = 8192
# Below this many context points there are too few held-out errors to estimate a quantile per
# output (at 16 the conformal rank is the largest score: a conservative factor).
MIN_CALIBRATION_POINTS = 16
# A spread factor never shrinks an interval below this fraction (exactly predicted context points
# would otherwise collapse it to nothing).
MIN_SPREAD = 0.2
# Below this many held-out points a factor may widen intervals but not narrow them. A 95 % quantile
# of a few dozen scores is itself uncertain, and a small context's leave-one-out residuals (penalty
# picked on them, no points to spare) understate the error at new points: on IEEE 33 at delta 30 %
# with 16-50 points, narrowing took the worst bus's coverage to 0.50-0.92 where widening only kept
# it at 0.67-0.98 (bench/accuracy.py's sweep, four contexts each).
MIN_NARROWING_POINTS = 200
# On a small context a PFN's central 95 % interval is at least as wide as a Gaussian one with the base
# fit's held-out rms error taken at this upper confidence level (an rms of n errors is
# chi-distributed with n degrees of freedom). 16 held-out scores cannot show a PFN that is
# confident without cause: on IEEE 33's lateral 19-22 at
# n = 16 (bench/accuracy.py's sweep) the shipped PFNs' intervals were half as wide as their errors
# needed while the scores gave factors of 1.0-1.6 (worst-bus coverage 0.60-0.89).
HALF_WIDTH_FLOOR_CONFIDENCE = 0.95
# The held-out pass is not a true leave-one-out: the other points' values are leave-one-out residuals
# of fits that include the masked point, the more so the higher the base fit's leverage, and a model
# that leans on its neighbours' residuals then overstates the error new queries will have
# (models/heldout_bias.py). A checkpoint's card gives the slope s of log(overstatement) against the
# median leverage h, measured on its prior; fits divide their factors by exp(s * h). Slopes outside
# this range are a broken measurement or card.
HELDOUT_SLOPE_RANGE = (0.0, 2.0)


def check_heldout_slope(value: Any, where: str = "calibration.heldout_slope") -> float:
    """A card's held-out slope as a float, or ValueError naming the field and the expected range."""
    low, high = HELDOUT_SLOPE_RANGE
    try:
        slope = float(value)
    except (TypeError, ValueError):
        slope = math.nan
    if not (math.isfinite(slope) and low <= slope <= high):
        raise ValueError(f"{where}: expected a number in [{low}, {high}], got {value!r}")
    return slope


def median_leverage(residuals: np.ndarray, loo_residuals: np.ndarray) -> float:
    """The base fit's median in-sample leverage over points and outputs, from its in-sample and
    leave-one-out residuals (n, k) (r = (1 - h) r_loo for a linear smoother); 0 when none is defined."""
    with np.errstate(divide="ignore", invalid="ignore"):
        h = 1.0 - residuals / loo_residuals
    h = h[np.isfinite(h) & (loo_residuals != 0)]
    return float(np.clip(np.median(h), 0.0, 1.0)) if h.size else 0.0


def spread_from_heldout(
    pred: Predictive, y: np.ndarray, level: float = CALIBRATION_LEVEL, overstatement: float = 1.0
) -> np.ndarray:
    """Spread factor per output (k,) from held-out predictions (n, k) and their truth y (n, k).

    `overstatement`: how much wider the held-out errors are than new queries' (exp(slope * leverage),
    above); divided out where a factor may narrow. Mean and interval come from one `summary` pass (a
    bar predictive's fused one: the scores need no float64 bars; the float64 path took ~15 % of
    transformer-dva's fit on a 500-row IEEE 33 context)."""
    tail = (1.0 - level) / 2.0
    stats = pred.summary((tail, 1.0 - tail))
    factors = conformal_spread(stats.mean, stats.quantiles[0], stats.quantiles[1], y, level)
    if y.shape[0] < MIN_NARROWING_POINTS:
        floored: np.ndarray = np.maximum(factors, 1.0)
        return floored
    narrowed: np.ndarray = np.maximum(factors / overstatement, MIN_SPREAD)
    return narrowed


def simultaneous_factor(k: int, level: float = CALIBRATION_LEVEL) -> float:
    """How much wider a central `level` Gaussian interval must be to hold on k outputs at once
    (Bonferroni): for an error every query of an output shares, a bias rather than noise."""
    tail = (1.0 - level) / 2.0
    return float(norm.ppf(1.0 - tail / max(k, 1)) / norm.ppf(1.0 - tail))


def correlated_simultaneous_factor(
    cov: np.ndarray, family: float = FAMILY_LEVEL, level: float = CALIBRATION_LEVEL
) -> float:
    """How much wider a central `level` Gaussian interval must be for k outputs whose shared errors are jointly normal
    with covariance `cov` (k, k) to hold on all of them at once with probability `family`: the `family` quantile of the
    largest |z| over the outputs under their correlation, over one output's `level` quantile. Errors that are one
    draw on every output (network-fit's offset on a feeder's buses) take one output's `family` quantile (1.31 at
    0.99); it never exceeds Bonferroni's `simultaneous_factor` (what independent errors took, and a covariance not
    finite takes). Drawn
    SIMULTANEOUS_DRAWS times with a fixed seed: one covariance, one factor."""
    if not np.isfinite(cov).all():
        return simultaneous_factor(cov.shape[0], level)
    sd = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    live = sd > 0.0
    if live.sum() == 0:
        return 1.0
    correlation = cov[np.ix_(live, live)] / np.outer(sd[live], sd[live])
    eigenvalues, vectors = np.linalg.eigh(correlation)
    root = vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
    z = np.abs(np.random.default_rng(0).standard_normal((SIMULTANEOUS_DRAWS, root.shape[0])) @ root.T)
    # the largest |z| over one output's in the same draws (their sampling error shared): 1 for one shared error
    spread = np.quantile(z.max(axis=1), family) / np.quantile(z, family, axis=0).mean()
    factor = spread * norm.ppf(0.5 + family / 2.0) / norm.ppf(0.5 + level / 2.0)
    return float(np.clip(factor, 1.0, simultaneous_factor(int(live.sum()), level)))


def half_width_floor(
    heldout_errors: np.ndarray, confidence: float = HALF_WIDTH_FLOOR_CONFIDENCE, level: float = CALIBRATION_LEVEL
) -> np.ndarray:
    """Per output (k,): the half-width of a central `level` Gaussian interval whose sigma is the upper
    `confidence` bound on the rms of held-out errors (n, k), rms * sqrt(n / chi2_{1 - confidence}(n))
    (1.42x the rms at n = 16, 1.20x at 50, 1.13x at 100)."""
    n = heldout_errors.shape[0]
    rms = np.sqrt(np.mean(np.square(heldout_errors), axis=0))
    half: np.ndarray = norm.ppf(0.5 + level / 2) * rms * math.sqrt(n / chi2.ppf(1.0 - confidence, n))
    return half


def conformal_spread(mean: np.ndarray, low: np.ndarray, high: np.ndarray, y: np.ndarray, level: float) -> np.ndarray:
    """Spread factor per output from held-out predictions, all shaped (n, k); returns (k,).

    Each point's score is the factor its central interval (low, high) around `mean` must be
    stretched by to contain y; the split-conformal quantile of the scores (rank ceil((n+1) level))
    is the smallest factor that covers at least `level` of the held-out points, with the usual
    finite-sample correction.
    """
    tiny = np.finfo(np.float64).tiny
    below = (mean - y) / np.maximum(mean - low, tiny)
    above = (y - mean) / np.maximum(high - mean, tiny)
    scores = np.maximum(below, above)
    n = scores.shape[0]
    rank = min(n, math.ceil((n + 1) * level))
    spread: np.ndarray = np.sort(scores, axis=0)[rank - 1]
    return spread

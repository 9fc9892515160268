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

import numpy as np

from models.predictive import Predictive

# The central interval the spread factor is fitted to.
CALIBRATION_LEVEL = 0.95
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


def spread_from_heldout(pred: Predictive, y: np.ndarray, level: float = CALIBRATION_LEVEL) -> np.ndarray:
    """Spread factor per output (k,) from held-out predictions (n, k) and their truth y (n, k)."""
    low, high = pred.interval(level)
    floor = MIN_SPREAD if y.shape[0] >= MIN_NARROWING_POINTS else 1.0
    return np.maximum(conformal_spread(pred.mean, low, high, y, level), floor)


def conformal_spread(mean: np.ndarray, low: np.ndarray, high: np.ndarray, y: np.ndarray,
                     level: float) -> np.ndarray:
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
    return np.sort(scores, axis=0)[rank - 1]

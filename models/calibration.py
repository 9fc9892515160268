"""Per-output spread calibration of a predictive, learned from the context set itself.

A PFN's predictive spread is right on average over its prior, not on every bus of every feeder:
on the IEEE 33-bus protocol some buses over-cover (95 % intervals holding 99 % of the truth).
A GP fixes its spread by fitting hyperparameters to the context; we do the analogue without
training: K-fold cross-fitting on the context gives each context point a held-out prediction,
and a split-conformal quantile of the normalised held-out errors gives one spread factor s per
output. The answer is then y' = m + s * (y - m) around the predictive mean m: the mean is
untouched, every interval and the std are scaled by s, and the central 95 % interval covers
about 95 % of held-out points on every output. Folds train on (K-1)/K of the context, and a
PFN's intervals tighten more slowly with n than its errors do, so few folds over-widen: K = 20
(95 % of the points) gave mean coverage 0.94-0.97 on the IEEE 33-bus protocol, K = 10 0.95-0.97.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.predictive import Predictive

# The central interval the spread factor is fitted to.
CALIBRATION_LEVEL = 0.95
# Below this many context points the folds are too small to estimate a quantile per output.
MIN_CALIBRATION_POINTS = 100
# A spread factor never shrinks an interval below this fraction (exactly predicted context points
# would otherwise collapse it to nothing).
MIN_SPREAD = 0.2


@dataclass(frozen=True)
class FoldPlan:
    """K equal-sized folds so all of them run as one batch: train (K, t) and held-out (K, h) indices.

    Held-out sets partition the context; a fold whose held-out set is one short pads it with a
    repeat (masked out by `valid`) and drops one extra point from its training set.
    """

    train: np.ndarray
    held: np.ndarray
    valid: np.ndarray

    @classmethod
    def build(cls, n: int, folds: int, seed: int = 0) -> "FoldPlan":
        if folds < 2 or n < 2 * folds:
            raise ValueError(f"folds: need 2 <= folds <= n / 2, got folds={folds} for n={n}")
        order = np.random.default_rng(seed).permutation(n)  # context rows may arrive sorted
        parts = np.array_split(order, folds)
        h = math.ceil(n / folds)
        t = n - h
        train, held, valid = [], [], []
        for part in parts:
            rest = np.setdiff1d(order, part, assume_unique=True)
            train.append(np.sort(rest)[:t])
            pad = h - len(part)
            held.append(np.concatenate([part, np.repeat(part[:1], pad)]))
            valid.append(np.arange(h) < len(part))
        return cls(np.stack(train), np.stack(held), np.stack(valid))


def spread_from_heldout(pred: Predictive, y: np.ndarray, level: float = CALIBRATION_LEVEL) -> np.ndarray:
    """Spread factor per output (k,) from held-out predictions (n, k) and their truth y (n, k)."""
    low, high = pred.interval(level)
    return np.maximum(conformal_spread(pred.mean, low, high, y, level), MIN_SPREAD)


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

"""Where a query lies relative to the context: the `extrapolation` every answer carries.

A fit learned from a context knows the feeder only along the directions its loads moved. A query's
distance from the context is measured in that geometry: the Mahalanobis leverage of its loads
(standardised per load as the fits do) under the context's load covariance, relative to the largest
leverage a context row would have as a query (left out: h / (1 - h) for its in-sample leverage h),

    extrapolation(q) = sqrt(h(q) / max_t [h_t / (1 - h_t)]),   h(z) = z^T (Z^T Z + lambda n I)^-1 z.

At most 1: the query lies no farther out than the context's own outermost row (a query drawn like
the context rows exceeds 1 with probability about 1 / (n + 1)). Above 1: beyond anything the context
showed; 2 means twice as far out, in standard deviations, as its farthest row. A load that never
moved in the context but moves in the query counts fully (its std in the context is tiny), and with
fewer rows than loads the directions the context does not span count too. The answer's
`extrapolated` flag is extrapolation > EXTRAPOLATION_THRESHOLD.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A query farther out than the context's farthest row is flagged.
EXTRAPOLATION_THRESHOLD = 1.0
# Ridge on the standardised load covariance, per context row: keeps the leverage finite along
# directions the context never spans (they then count as 1 / RIDGE_PER_ROW squared std's each).
RIDGE_PER_ROW = 1e-2
# The std a load that never moves in the context gets, relative to |its mean| + this (as
# models.physics_base.load_scaling): a query moving it by 1 % is then far outside.
CONSTANT_LOAD_STD = 1e-6
# Reported values are capped here (a load the context never moved gives astronomically large ones).
EXTRAPOLATION_CAP = 1e6


@dataclass(frozen=True)
class ContextGeometry:
    """The context's load scaling and inverse covariance: what `extrapolation` needs (small: d x d)."""

    mean: np.ndarray  # (d,)
    std: np.ndarray  # (d,)
    precision: np.ndarray  # (d, d): (Z^T Z + lambda n I)^-1 on standardised loads
    reference: float  # the largest leverage a context row would have as a query, h / (1 - h)

    @classmethod
    def of(cls, context_x: np.ndarray) -> ContextGeometry:
        x = np.asarray(context_x, dtype=np.float64)
        n, d = x.shape
        mean = x.mean(axis=0)
        std = np.maximum(x.std(axis=0), CONSTANT_LOAD_STD * (np.abs(mean) + CONSTANT_LOAD_STD))
        z = (x - mean) / std
        precision = np.linalg.inv(z.T @ z + RIDGE_PER_ROW * n * np.eye(d))
        precision = 0.5 * (precision + precision.T)
        h = np.einsum("nd,de,ne->n", z, precision, z)
        reference = float(np.max(h / np.maximum(1.0 - h, np.finfo(np.float64).eps)))
        return cls(mean, std, precision, max(reference, np.finfo(np.float64).tiny))

    def leverage(self, x: np.ndarray) -> np.ndarray:
        """(m,) leverage of rows x (m, d) of raw loads."""
        z = (np.asarray(x, dtype=np.float64) - self.mean) / self.std
        h: np.ndarray = np.einsum("md,de,me->m", z, self.precision, z)
        return np.maximum(h, 0.0)

    def extrapolation(self, x: np.ndarray) -> np.ndarray:
        """(m,) float64: how far out each query row lies, 1 = as far as the context's farthest row."""
        out: np.ndarray = np.minimum(np.sqrt(self.leverage(x) / self.reference), EXTRAPOLATION_CAP)
        return out


def extrapolated(extrapolation: np.ndarray) -> np.ndarray:
    """(m,) bool: the answer's flag."""
    flag: np.ndarray = np.asarray(extrapolation) > EXTRAPOLATION_THRESHOLD
    return flag

"""Turn a Predictive into the arrays a response carries, and cut a batched answer per request."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.predictive import Predictive


@dataclass(frozen=True)
class AnswerSpec:
    """What a request asks for besides mean and std."""

    quantiles: tuple[float, ...] = ()
    band: tuple[float, float] | None = None


@dataclass
class Answer:
    """Arrays shaped (m, k); quantiles (levels, m, k); p_outside None when no band was asked."""

    mean: np.ndarray
    std: np.ndarray
    quantiles: np.ndarray
    p_outside: np.ndarray | None

    def rows(self, start: int, stop: int) -> "Answer":
        return Answer(self.mean[start:stop], self.std[start:stop], self.quantiles[:, start:stop],
                      None if self.p_outside is None else self.p_outside[start:stop])

    @staticmethod
    def concat(parts: "list[Answer]") -> "Answer":
        """Answers of consecutive query blocks, joined in order."""
        p_outside = None if parts[0].p_outside is None else np.concatenate([p.p_outside for p in parts])
        return Answer(np.concatenate([p.mean for p in parts]), np.concatenate([p.std for p in parts]),
                      np.concatenate([p.quantiles for p in parts], axis=1), p_outside)

    def all_finite(self) -> bool:
        parts = [self.mean, self.std, self.quantiles] + ([self.p_outside] if self.p_outside is not None else [])
        return all(bool(np.isfinite(part).all()) for part in parts)


def summarize(pred: Predictive, spec: AnswerSpec) -> Answer:
    """Evaluate the predictive once for every statistic the spec asks for."""
    summary = pred.summary(spec.quantiles, spec.band)
    return Answer(summary.mean, summary.std, summary.quantiles, summary.p_outside)

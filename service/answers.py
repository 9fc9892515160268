"""What a request asks for besides mean and std, and the one call that answers it for any method."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.predictive import Method, Summary

# Arrays shaped (m, k); quantiles (levels, m, k); p_outside None when no band was asked.
Answer = Summary


@dataclass(frozen=True)
class AnswerSpec:
    """What a request asks for besides mean and std."""

    quantiles: tuple[float, ...] = ()
    band: tuple[float, float] | None = None


def answer(method: Method, fitted: Any, queries: np.ndarray, spec: AnswerSpec) -> Answer:
    """Every statistic the spec asks for, from one pass of the method over the queries."""
    return method.summarize(fitted, queries, spec.quantiles, spec.band)

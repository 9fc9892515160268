"""What a request asks for besides mean and std, and the one call that answers it for any method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from models.predictive import Method, Summary

# The voltage-band rule, the one validator of every band a request or batch job gives: finite, and
# holding the nominal 1.0 p.u. (low < 1 <= high), so low < high is in the types (and the schema).
BandLow = Annotated[
    float, Field(gt=0.0, lt=1.0, strict=True, allow_inf_nan=False, description="low limit, p.u., below 1")
]
BandHigh = Annotated[
    float, Field(ge=1.0, le=5.0, strict=True, allow_inf_nan=False, description="high limit, p.u., at least 1")
]
VoltageBand = tuple[BandLow, BandHigh]

# Arrays shaped (m, k); quantiles (levels, m, k); p_outside None when no band was asked.
Answer = Summary

# Precision on the wire (JSON, Arrow, batch results). Voltages (means, quantiles, truths) travel as
# float64: near 1.0 p.u. float32 resolves only ~6e-8, coarser than a physics-base model's spread
# at small load changes, and a rounded mean would put the truth outside honest intervals. Spreads,
# errors and probabilities are small numbers whose float32 relative precision (~1e-7) is ample.
VOLTAGE_DTYPE = np.float64
SPREAD_DTYPE = np.float32


def on_the_wire(values: Any, voltage: bool) -> np.ndarray:
    """A C-contiguous copy (or view) of `values` in the dtype its kind travels in."""
    return np.ascontiguousarray(values, dtype=VOLTAGE_DTYPE if voltage else SPREAD_DTYPE)


@dataclass(frozen=True)
class AnswerSpec:
    """What a request asks for besides mean and std."""

    quantiles: tuple[float, ...] = ()
    band: tuple[float, float] | None = None


def answer(method: Method, fitted: Any, queries: np.ndarray, spec: AnswerSpec) -> Answer:
    """Every statistic the spec asks for, from one pass of the method over the queries."""
    return method.summarize(fitted, queries, spec.quantiles, spec.band)

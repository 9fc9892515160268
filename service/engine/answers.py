"""What a request asks for besides mean and std, the one call that answers it for any method, and the
answer as the engine hands it to the HTTP layer and to batch results (typed, in its wire dtypes).

A query's answer is a `QueryAnswer` (the exact GP's) or a `PredictAnswer` (a model's, perhaps beside
the exact GP): who answered, its `Statistics` per (query, output), its `OffContext` per query and its
`Timing`. `service.http.responses` writes it as JSON or Arrow; `service.jobs.results` writes the same
`Statistics` and `OffContext` columns into a batch job's result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from models.off_context import ContextGeometry, OffContextGuard, extrapolated
from models.predictive import Method, Summary
from service.engine.sparse import Metering

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


def placed_answer(
    method: Method, fitted: Any, geometry: ContextGeometry, queries: np.ndarray, spec: AnswerSpec, widen: bool = True
) -> tuple[Answer, OffContext]:
    """`answer` and where each query lies (`OffContext`), the extrapolation measured once: a checkpoint
    served behind the off-context guard reads it too (`geometry` is the same context's). `widen=False`
    leaves a guarded answer unwidened: its caller widens the whole answer once (`widened`)."""
    placed = OffContext.of(geometry, queries)
    if isinstance(method, OffContextGuard):
        if not widen:
            return answer(method.base, fitted.real, queries, spec), placed
        return method.summarize(fitted, queries, spec.quantiles, spec.band, placed.extrapolation), placed
    return answer(method, fitted, queries, spec), placed


def widens_every_row(method: Method, fitted: Any) -> bool:
    """Whether a guarded method's answer is widened at every query row (`OffContextGuard.widens_every_row`)."""
    return isinstance(method, OffContextGuard) and method.widens_every_row(fitted)


def needs_widening(method: Method, fitted: Any, placed: OffContext) -> bool:
    """Whether `widened` changes a guarded method's answer: every answer of one that `widens_every_row`, else where
    it has rows beyond the context's reach: rows whose `ramp` is above 0, which are exactly the `extrapolated` ones
    (extrapolation > EXTRAPOLATION_THRESHOLD)."""
    if not isinstance(method, OffContextGuard):
        return False
    return widens_every_row(method, fitted) or bool(placed.extrapolated.any())


def widened(
    method: Method, fitted: Any, queries: np.ndarray, own: Answer, placed: OffContext, spec: AnswerSpec
) -> Answer:
    """A guarded method's unwidened answer (`placed_answer(..., widen=False)`) widened where it lies far out."""
    assert isinstance(method, OffContextGuard)
    out = method.widen(fitted, queries, own, placed.extrapolation, spec.band, spec.quantiles)
    out.all_finite()  # in the worker thread, as `placed_answer`'s callers check theirs
    return out


@dataclass(frozen=True)
class Statistics:
    """An answer's (queries, outputs) arrays in the dtypes they travel in (`on_the_wire`): what the JSON
    answer, the Arrow answer and a batch job's result are written from."""

    mean: np.ndarray  # float64
    std: np.ndarray  # float32
    quantiles: tuple[tuple[str, np.ndarray], ...]  # (the level as its label, float64 values), as asked
    p_outside_band: np.ndarray | None  # float32; None when no band was asked

    @classmethod
    def of(cls, answer: Answer, levels: Sequence[float]) -> Statistics:
        """`answer` (float64 throughout) in the wire dtypes; quantiles labelled `repr(float(level))`."""
        return cls(
            on_the_wire(answer.mean, voltage=True),
            on_the_wire(answer.std, voltage=False),
            tuple((repr(float(q)), on_the_wire(answer.quantiles[i], voltage=True)) for i, q in enumerate(levels)),
            None if answer.p_outside is None else on_the_wire(answer.p_outside, voltage=False),
        )

    def rows(self, start: int, stop: int) -> Statistics:
        """Rows start:stop (views): one caller's part of a micro-batch's statistics, converted once per pass."""
        p = self.p_outside_band
        return Statistics(
            self.mean[start:stop],
            self.std[start:stop],
            tuple((label, v[start:stop]) for label, v in self.quantiles),
            None if p is None else p[start:stop],
        )

    def blocks(self) -> list[tuple[str, np.ndarray]]:
        """(column prefix, (queries, outputs) array) in column order: mean, std, q<level>..., p_outside."""
        parts = [("mean", self.mean), ("std", self.std)] + [(f"q{label}", v) for label, v in self.quantiles]
        return parts + ([] if self.p_outside_band is None else [("p_outside", self.p_outside_band)])

    def columns(self, outputs: Sequence[str], prefix: str = "") -> list[tuple[str, np.ndarray]]:
        """(name, values) of every column a row per query: `<prefix><stat>_<output>` (`mean_vm_pu_bus2`,
        `q0.05_vm_pu_bus2`, ...), each a contiguous (queries,) array in its wire dtype."""
        named = []
        for stat, matrix in self.blocks():
            by_output = np.ascontiguousarray(matrix.T)  # one copy; each column then zero-copy
            named += [(f"{prefix}{stat}_{output}", column) for output, column in zip(outputs, by_output)]
        return named


@dataclass(frozen=True)
class OffContext:
    """Where each query lies relative to the context's loads (models.off_context), the same for every model but where
    a fit places never-metered loads at a level it found (service.engine.sparse.fitted_geometry: network-fit)."""

    extrapolation: np.ndarray  # (queries,) float64: 1 = as far out as the context's farthest row
    extrapolated: np.ndarray  # (queries,) bool: extrapolation > models.off_context.EXTRAPOLATION_THRESHOLD

    @classmethod
    def of(cls, geometry: ContextGeometry, queries: np.ndarray) -> OffContext:
        values = np.ascontiguousarray(geometry.extrapolation(queries), dtype=np.float64)
        return cls(values, np.ascontiguousarray(extrapolated(values), dtype=bool))

    def rows(self, start: int, stop: int) -> OffContext:
        return OffContext(self.extrapolation[start:stop], self.extrapolated[start:stop])

    @staticmethod
    def concat(parts: Sequence[OffContext]) -> OffContext:
        """Consecutive query blocks' measures, joined in order."""
        if len(parts) == 1:
            return parts[0]
        return OffContext(
            np.concatenate([p.extrapolation for p in parts]), np.concatenate([p.extrapolated for p in parts])
        )

    def columns(self) -> list[tuple[str, np.ndarray]]:
        """The two columns of the Arrow answer and of a batch job's result."""
        return [("extrapolation", self.extrapolation), ("extrapolated", self.extrapolated)]


@dataclass(frozen=True)
class ModelTiming:
    """A model's part of a request's time (seconds)."""

    encode_s: float  # the context's encoding, even when it came from the cache
    predict_s: float  # forward pass and statistics (the whole shared pass when micro-batched)
    context_cached: bool
    batch_rows: int  # rows in the forward pass that answered this request


@dataclass(frozen=True)
class GPTiming:
    """The exact GP's part of a request's time (seconds)."""

    fit_s: float  # the GP's fit, even when it came from the cache
    predict_s: float
    fit_cached: bool


# the speedup's divisor at least this (ms): a model time rounded to 0 gives a large ratio, not a division by 0
MIN_DIVISOR_MS = 1e-6


@dataclass(frozen=True)
class Timing:
    """Where a request's time went: the model's part, the exact GP's part (either may be absent)."""

    total_s: float  # from request parsed to answer built
    model: ModelTiming | None = None
    gp: GPTiming | None = None

    @property
    def speedup(self) -> float | None:
        """(GP fit + predict) / (model encode + predict), when both answered."""
        if self.model is None or self.gp is None:
            return None
        model_ms = self.model.encode_s * 1e3 + self.model.predict_s * 1e3
        return (self.gp.fit_s * 1e3 + self.gp.predict_s * 1e3) / max(model_ms, MIN_DIVISOR_MS)


@dataclass(frozen=True)
class Source:
    """Who answered, on what: the head every model answer (placement, studies, hosting capacity) opens with."""

    model: str
    version: str | None
    network: str
    context_id: str

    @classmethod
    def of(cls, loaded: Any, net: Any, ctx: Any) -> Source:
        """From the served model (`name`, `version`), its network (`name`) and the context set (`id`)."""
        return cls(loaded.name, loaded.version, net.name, ctx.id)

    def json(self) -> dict[str, Any]:
        return {"model": self.model, "version": self.version, "network": self.network, "context_id": self.context_id}


@dataclass(frozen=True)
class QueryAnswer:
    """The answer to a query request as the engine hands it on: the exact GP's (POST /v1/gp/predict)."""

    model: str
    network: str  # the context's network, whose outputs these are
    context_id: str
    outputs: tuple[str, ...]
    statistics: Statistics
    off_context: OffContext
    timing: Timing


@dataclass(frozen=True)
class PredictAnswer(QueryAnswer):
    """A model's answer (POST /v1/predict): its version, the exact GP's mean and std with compare_gp, and
    which buses the context read (service.engine.sparse.Metering; from the context alone, any model)."""

    version: str
    gp: Statistics | None = None
    metering: Metering | None = None

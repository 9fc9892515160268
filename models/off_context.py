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

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from models.calibration import CALIBRATION_LEVEL, simultaneous_factor
from models.errors import RowsRefused
from models.linear import BayesianLinearRegression, posterior
from models.meter_noise import independent_across_buses, meter_noise, worth_taking_out
from models.network_voltages import solved
from models.physics_base import CONSTANT_LOAD_STD  # a load that never moves: a query moving it is far outside
from models.predictive import Method, Predictive, Summary
from models.validation import check_queries

T = TypeVar("T")

# A query farther out than the context's farthest row is flagged.
EXTRAPOLATION_THRESHOLD = 1.0
# Ridge on the standardised load covariance, per context row: keeps the leverage finite along
# directions the context never spans (they then count as 1 / RIDGE_PER_ROW squared std's each).
RIDGE_PER_ROW = 1e-2
# Reported values are capped here (a load the context never moved gives astronomically large ones).
EXTRAPOLATION_CAP = 1e6


# The loads whose P is summed into the feeder's total (`Totals`): those read in at least this share of the rows, over
# the rows that read them all (one row reading one load must not leave no total at all).
TOTALS_READ_SHARE = 0.9


@dataclass(frozen=True)
class Totals:
    """The feeder's total active demand over the context, its own leverage: a query whose total lies beyond the context's
    farthest row's is out of it, however ordinary each load. The leverage over every load misses this where loads
    follow profiles: the context's farthest row is farthest along the many directions one load departs from the rest,
    and demand 30 % over the context's peak hours (1.11x its largest total) was flagged in 2.5-5 % of queries (IEEE 33
    on household profiles, 400 hourly rows; a user trial). P alone: the reactive total moves with it, and taken as a
    second dimension its ridge let rows off the usual power factor set the reference (5-50 % flagged then)."""

    columns: np.ndarray  # (d,) bool: the loads' P summed (read in TOTALS_READ_SHARE of the rows)
    mean: np.ndarray  # (1,) the total's mean over the rows that read those loads
    std: np.ndarray  # (1,)
    precision: np.ndarray  # (1, 1) as ContextGeometry's, on the standardised total
    reference: float  # the largest leverage a context row's totals would have as a query (inf: none summed)

    @classmethod
    def of(cls, x: np.ndarray) -> Totals:
        seen = ~np.isnan(x)
        columns = seen.mean(axis=0) >= TOTALS_READ_SHARE
        columns[x.shape[1] // 2 :] = False  # P only
        rows = seen[:, columns].all(axis=1)
        if not columns.any() or rows.sum() < 3:
            return cls(np.zeros_like(columns), np.zeros(1), np.ones(1), np.eye(1), np.inf)
        mean, std, precision, reference = _leverage_parts(x[np.ix_(rows, columns)].sum(axis=1, keepdims=True))
        return cls(columns, mean, std, precision, reference)

    def extrapolation(self, x: np.ndarray) -> np.ndarray:
        """(m,) how far out each query's total lies, 1 = as far as the context's farthest row's (0: none summed)."""
        if not np.isfinite(self.reference):
            return np.zeros(x.shape[0])
        z = (x[:, self.columns].sum(axis=1, keepdims=True) - self.mean) / self.std
        h = np.maximum(np.einsum("md,md->m", z @ self.precision, z), 0.0)
        out: np.ndarray = np.sqrt(h / self.reference)
        return out


def _leverage_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Fully read loads x (n, d): their mean, std (at least CONSTANT_LOAD_STD's), the ridged precision of the
    standardised loads and the largest leave-one-out leverage of a row (`ContextGeometry`)."""
    n, d = x.shape
    mean, std = x.mean(axis=0), x.std(axis=0)
    std = np.maximum(std, CONSTANT_LOAD_STD * (np.abs(mean) + CONSTANT_LOAD_STD))
    z = (x - mean) / std
    precision = np.linalg.inv(z.T @ z + RIDGE_PER_ROW * n * np.eye(d))
    precision = 0.5 * (precision + precision.T)
    h = np.einsum("nd,nd->n", z @ precision, z)
    reference = float(np.max(h / np.maximum(1.0 - h, np.finfo(np.float64).eps)))
    return mean, std, precision, max(reference, np.finfo(np.float64).tiny)


@dataclass(frozen=True)
class ContextGeometry:
    """The context's load scaling and inverse covariance: what `extrapolation` needs (small: d x d)."""

    mean: np.ndarray  # (d,)
    std: np.ndarray  # (d,)
    precision: np.ndarray  # (d, d): (Z^T Z + lambda n I)^-1 on standardised loads
    reference: float  # the largest leverage a context row would have as a query, h / (1 - h)
    totals: Totals  # the feeder's total P, and how far the context's rows range from it

    @classmethod
    def of(cls, context_x: np.ndarray) -> ContextGeometry:
        """From context loads x (n, d); a value not metered (NaN) is left out of its load's mean and variance (taken
        over the rows that read it, as over n rows) and counts at its load's mean in the covariances (which it
        shrinks: the gram stays positive definite) and in its row's leverage (`_full_row_left_out`)."""
        x = np.asarray(context_x, dtype=np.float64)
        n, d = x.shape
        if n <= d and np.isnan(x).any():
            # no more rows than loads: every row's leverage is the ridge's, near 1, and a row's expected full leverage
            # says nothing more; its missing values count at their load's mean throughout (a user trial: 50 rows of
            # IEEE 33's 64 loads with 10 % missing no longer flagged one load at twice its value, the full context did)
            x = np.where(np.isnan(x), np.nanmean(x, axis=0), x)
        seen = ~np.isnan(x)
        if seen.all():
            return cls(*_leverage_parts(x), Totals.of(x))
        mean, std = np.nanmean(x, axis=0), np.nanstd(x, axis=0)
        std = np.maximum(std, CONSTANT_LOAD_STD * (np.abs(mean) + CONSTANT_LOAD_STD))
        z = np.where(seen, (x - mean) / std, 0.0)
        gram = z.T @ z
        index = np.arange(d)  # each load's variance over the rows that read it, as over n rows
        gram[index, index] *= n / np.maximum(seen.sum(axis=0), 1.0)
        precision = np.linalg.inv(gram + RIDGE_PER_ROW * n * np.eye(d))
        precision = 0.5 * (precision + precision.T)
        reference = float(np.max(_full_row_left_out(z, seen, precision, gram)))
        return cls(mean, std, precision, max(reference, np.finfo(np.float64).tiny), Totals.of(x))

    def leverage(self, x: np.ndarray) -> np.ndarray:
        """(m,) leverage of rows x (m, d) of raw loads."""
        z = (check_queries(x, self.mean.size) - self.mean) / self.std
        h: np.ndarray = np.maximum(np.einsum("md,md->m", z @ self.precision, z), 0.0)
        return h

    def extrapolation(self, x: np.ndarray) -> np.ndarray:
        """(m,) float64: how far out each query row lies, 1 = as far as the context's farthest row: by its leverage,
        or by its total demand (`Totals`), whichever is farther."""
        return self.farther(self.leverage(x), x)

    def farther(self, leverage: np.ndarray, x: np.ndarray) -> np.ndarray:
        """`extrapolation` of queries x whose `leverage` is known."""
        by_loads = np.sqrt(leverage / self.reference)
        out: np.ndarray = np.minimum(np.maximum(by_loads, self.totals.extrapolation(x)), EXTRAPOLATION_CAP)
        return out


def _full_row_left_out(z: np.ndarray, seen: np.ndarray, precision: np.ndarray, gram: np.ndarray) -> np.ndarray:
    """(n,) each context row's leverage left out (h / (1 - h)) as a row with every load read is expected to have it,
    given the loads it read: its own over those (the missing ones at their means) plus what the loads it missed add to
    a row's on average (their share of a whole row's mean leverage). Left as they are, rows that miss loads lie closer
    in, the context's reference shrinks, and queries like its rows were flagged (30 % / 60 % of IEEE 33's load cells
    missing: 26 % / 99 %); scaled in proportion instead, one row reading one far load set the reference for all (a
    user trial: no query flagged, loads at 3x included). O(n d^2), one product for every row."""
    n = z.shape[0]
    h = np.einsum("nd,nd->n", z @ precision, z)
    share = np.einsum("ij,ji->i", precision, gram)  # each load's part of a whole row's mean leverage, times n
    missed = (~seen).astype(np.float64) @ share / n
    # in-sample the two add (on average); a row far out on the loads it read is kept from 1 - where in-sample
    # leverage stops meaning a row and one far load would set the reference for all - by adding the rest left out
    # instead once the sum passes a half
    out: np.ndarray = np.maximum(_left_out(np.minimum(h + missed, 0.5)), _left_out(h) + missed)
    return out


def _left_out(h: np.ndarray) -> np.ndarray:
    """A leverage h in-sample as left out: h / (1 - h)."""
    out: np.ndarray = h / np.maximum(1.0 - h, np.finfo(np.float64).eps)
    return out


def extrapolated(extrapolation: np.ndarray) -> np.ndarray:
    """(m,) bool: the answer's flag."""
    flag: np.ndarray = np.asarray(extrapolation) > EXTRAPOLATION_THRESHOLD
    return flag


# Readings whose noise (as `reading_noise` infers it) is below this are treated as exact (p.u.).
NOISELESS_PU = 1e-10
# Noisy readings: the prober is fitted this many times on the network model's voltages plus noise like
# the readings', and the rms of its misses taken (a t with this many degrees of freedom sets the gain).
# Three were too few: a noisy fit's miss off the context is heavy-tailed (the fit's per-bus model choice
# flips with the noise), and on IEEE 33 at 1e-5 p.u. five of twelve off-context cells left a bus at 0 %
# coverage; sixteen left one. Each probe is a closed-form fit (physics-fit) sharing the loads' work with the others
# (`Method.fit_many`), once a context: ~0.14 s each on a 94-bus feeder, most of a noisy request's time there.
NOISY_PROBES = 16
# A standard normal's central CALIBRATION_LEVEL half-width.
GAUSS_HALF = float(norm.ppf(0.5 + CALIBRATION_LEVEL / 2.0))
# With noisy readings the spread also reaches this far past the fit's own noise-driven error, known up to the
# network model's nonlinearity miss: the method's answer less its fit of the network model's voltages plus
# the readings' smooth departure from them (a 95 % interval's edge 10 % beyond it). Random
# probes sample that error; this one is the fit's own, so a fit whose noise carried it far out (the heavy
# tail sixteen probes still miss: one IEEE 33 growth seed in eight at 1e-5 p.u.) is covered too.
REACH = 1.1 / GAUSS_HALF
# Off the context with noisy readings the answer is the method's fit of the readings with their noise taken out
# (`Probes.smoothed`): noise carries a fit of the readings themselves far off beyond the context (IEEE 33, readings'
# noise 1e-3 p.u., 1.3-1.5x load: physics-fit and the checkpoints 5x least squares' MAE through the API, 0.1-0.3 p.u.
# at the worst bus), the denoised fit does not. The denoiser is network-fit where the guard has one (the network
# model's power flow plus one correction per branch shared by every bus below it: the feeder's structure averages
# the noise out, lines 0.7-1.3x the model's included), else the network model's voltages plus a Bayesian linear fit
# of the readings' departure from them on the loads (which misses a departure that grows faster than the loads).
# With network-fit as denoiser the answer's spread there is network-fit's own spread plus, in quadrature, how far
# the method's answer lies from network-fit's plus its miss on the network model (where that exceeds network-fit's
# spread the answer leans to network-fit's, and the spread with it): 1.6-7.3x the covering width on IEEE 33 (500
# readings, noise 1e-5 and 1e-3, 1.3-1.5x load or PV export, lines as modelled or 0.7-1.3x off) with every bus
# held, where the readings' own spread (kept before network-fit fitted the substation's set point and taps) was
# 25-38,000x. It holds as far as network-fit's model of the feeder does: a tap changer stepping with the load in
# the context is in no model here (bench/results/off-context-departures.md measures it through the API).
# Queries per block when widening (a PFN's bars are m x k x n_bars per block).
GUARD_BLOCK = 512
# Queries per call of the network model's power flow when widening (a call costs ~10 ms whatever its size on a
# small feeder: 512-row calls were a third of physics-fit's answer on Kerber's 17 buses); a multiple of GUARD_BLOCK.
SOLVE_BLOCK = 8 * GUARD_BLOCK


def ramp(extrapolation: np.ndarray) -> np.ndarray:
    """(m,) 0 within the context's reach (extrapolation <= 1), rising to 1 at twice its reach."""
    out: np.ndarray = np.clip(np.asarray(extrapolation) - EXTRAPOLATION_THRESHOLD, 0.0, 1.0)
    return out


@dataclass(frozen=True)
class Probes:
    """What the guard widens by: the wrapped method fitted on the network model's voltages at the context
    loads (its miss there is the nonlinearity it cannot follow), and where the readings are noisy the
    prober's fits on those voltages plus noise like the readings' (their scatter around the prober's fit
    on the plain voltages is how far the noise can carry a fit off the context), the method's fit of the
    voltages plus the readings' smooth part (the answer's fit less it: how far the noise did), and the gain."""

    exact: Any | None  # the method's fit on the network model's voltages (None: no power flow at the context)
    plain: Any | None  # the prober's on the same voltages (None: the prober is the method: `exact`)
    noisy: list[Any]  # the prober's on them plus noise (empty: exact readings)
    gain: float  # the miss's rms to the std that makes a 95 % interval hold: 1 for exact readings
    smoothed: Smoothed | None = None  # the fits of the readings denoised (None: exact readings; their means are read)
    # (k,) the noisy probes' mean square scatter at the context rows (None: not asked, `_probes`)
    context_scatter: np.ndarray | None = None


class Lazy(Generic[T]):
    """A value built on its first use and kept: most contexts are only ever asked within their reach, and then the
    noisy probes (and, but for physics-fit, the network model's power flow and the method's second fit) are never
    paid. The service's worker threads may ask at once: built once (a None built is kept too: asked again, it was
    built again from a build already dropped, an assertion error; helper-68)."""

    def __init__(self, build: Callable[[], T]):
        self._build: Callable[[], T] | None = build
        self._value: T | None = None
        self._built = False
        self._lock = threading.Lock()

    def get(self) -> T:
        if not self._built:
            with self._lock:
                if not self._built:
                    assert self._build is not None
                    self._value, self._build = self._build(), None
                    self._built = True
        return cast(T, self._value)  # T itself, None where T admits it


@dataclass(frozen=True)
class ExactProbe:
    """The network model's voltages at the context loads and the wrapped method fitted on them (both None where
    that power flow has no solution): all a query within the context's reach is widened by (`within_reach`). Only
    the fit's means are read (`_answered`): it is `Method.fit_for_means`'s, or the method's own fit where the
    readings are those voltages to the bit (`ContextWork.readings_are_the_model`)."""

    v: np.ndarray | None
    fit: Any | None


@dataclass(frozen=True)
class ContextWork:
    """A guarded fit's parts on one context, each built on its first use: the method's own fit of the readings `y`,
    the network model's voltages at the context loads, the exact probe and the readings' departure from those
    voltages (`_departure`). Made before the fit (`OffContextGuard.context_work`) so that a caller with an idle core
    builds the network model's parts beside the method's own fit (`OffContextGuard.build_ahead`)."""

    y: np.ndarray
    own: Lazy[Any]
    voltages: Lazy[np.ndarray | None]
    exact: Lazy[ExactProbe]
    departure: Lazy[tuple[np.ndarray, np.ndarray] | None]

    def readings_are_the_model(self) -> bool:
        """Whether the readings are the network model's voltages to the bit (a context simulated on it, as
        bench/cold_path.py's): the exact probe is then the method's own fit, not a second one of the same numbers."""
        v = self.voltages.get()
        return v is not None and np.array_equal(v, self.y)


@dataclass(frozen=True)
class Denoised:
    """The denoiser's fit of the readings and its answer at the context rows (NaN where it has none)."""

    fit: Any
    readings: np.ndarray  # (n, k)


@dataclass(frozen=True)
class Smoothed:
    """The method's fit of the readings denoised (the denoiser's answer at the context rows, else the network model's
    voltages plus the readings' smooth departure from them) and the denoiser's own fit (None: no denoiser answer)."""

    fit: Any
    denoised: Any | None


@dataclass(frozen=True)
class GuardedFit:
    """The wrapped method's fit on the readings, the probes on the network model (lazy), the geometry."""

    real: Any
    exact: Lazy[ExactProbe]
    probes: Lazy[Probes]  # built on the first query beyond the context's reach
    geometry: ContextGeometry
    # the method's spread was calibrated on held-out errors less the readings' meter noise (models.meter_noise):
    # every query is then widened by the noise-driven error the noisy probes show there (`_noise_driven`)
    without_noise: bool = False
    # the fits of the readings denoised (None: exact readings, or no power flow at the context), built on first use
    smoothed: Lazy[Smoothed | None] | None = None


def reading_noise(x: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """(k,) the readings' noise std per bus: what a Bayesian linear fit on the loads leaves of the
    readings minus the network model's voltages (the model's own error there is smooth in the loads)."""
    return _noise_and_smooth(x, residual)[0]


def _departure(x: np.ndarray, y: np.ndarray, v: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """`_noise_and_smooth` of the readings y less the network model's voltages v there (None without them):
    once a context, for the meter-noise test and the noisy probes."""
    return None if v is None else _noise_and_smooth(x, y - v)


def _noise_and_smooth(x: np.ndarray, residual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`reading_noise`, and the smooth part (n, k) of the residual at the context rows: the readings'
    departure from the network model that is no noise (a wrong impedance, a tap, a load scaling)."""
    fit = BayesianLinearRegression().fit(x, residual)
    return fit.noise_std, posterior(fit, x, readings=False).mean


class OffContextGuard(Method):
    """Any method, its spread widened off the context by the error it (or its prober) makes there on the
    network model.

    A fit of the context alone cannot show how wrong it is beyond the context (a linear-plus-squares
    fit misses the cubic terms that load growth excites; PV export reverses flows the context never
    saw). The network model can: the wrapped method (or its `prober`) is fitted a second time on the
    network model's own voltages at the same context loads, and at each query the miss e(q) of that fit
    against the model's exact power flow is the error this method makes there on a feeder like the user's. Where
    the readings are noisy (`reading_noise`), noise like theirs is added to those voltages, since
    noise is what makes a fit of the context go astray off it: NOISY_PROBES fits of the `prober` (the
    method itself, or for a checkpoint its closed-form physics base), their rms scatter added to that
    miss, widened to hold on every bus at once (the error is a bias per bus) with a Student-t's
    allowance for the probes' number. With exact readings the answer keeps the method's mean; with noisy
    ones it moves w of the way to the method's fit of the readings with their noise taken out (`denoiser`),
    e growing by the move. It adds an independent normal error of std w e to its distribution:
    std sqrt(std^2 + (w e)^2), each quantile moved out in quadrature (`widened_quantiles`),
    p_outside_band of the sum (`convolved_outside`), where w = `ramp`:
    within the context's reach the method's own calibrated spread is kept, from twice its reach the
    full network-model error counts.
    """

    def __init__(
        self,
        base: Method,
        voltage_model: Callable[[np.ndarray], np.ndarray],
        prober: Method | None = None,
        within_reach: bool = False,
        denoiser: Method | None = None,
    ):
        # `prober`: the method whose noisy fits measure how far reading noise carries a fit off the context
        # (None: the method itself). A checkpoint is probed with its physics base (physics-fit): its mean off
        # the context moves with the base's, and NOISY_PROBES forward passes per far query block would cost
        # more than the answer itself. Its own miss on the exact voltages is still its own (one fit).
        # `within_reach`: every query, not only those beyond the context's reach, is widened by at least the
        # exact probe's miss there (its nonlinearity, which reading noise does not change): for a method whose
        # spread is its context's residual scale (physics-fit), which a context from one season cannot show
        # for another (SimBench, context of the year's first 500 steps: worst-bus coverage 0.66-0.82 -> 1.00;
        # in its 0.5-1.0 extrapolation the errors were 2-18 spreads). Every answer then pays the power flow.
        self.base, self.voltage_model = base, voltage_model
        self.prober = base if prober is None else prober
        self.within_reach = within_reach
        # `denoiser`: the method whose mean at the context rows is the readings with their noise taken out, which
        # the method is fitted on for its answer off the context (None: the network model's voltages plus the
        # readings' smooth departure from them; the registry gives network-fit)
        self.denoiser = denoiser
        self.name = getattr(base, "name", "method")

    def fit(self, context_x: np.ndarray, context_y: np.ndarray, work: ContextWork | None = None) -> GuardedFit:
        """`work`: this context's `context_work`, where the caller made it (to build its parts ahead)."""
        x = np.asarray(context_x, dtype=np.float64)
        y = np.asarray(context_y, dtype=np.float64)
        parts = self.context_work(x, y) if work is None else work
        denoised = Lazy(lambda: self._denoised(x, y))
        own = parts.own.get()
        real = self._without_meter_noise(own, x, y, parts.departure.get, denoised.get)
        without_noise = real is not own
        smoothed = Lazy(lambda: self._smoothed(x, parts.exact.get(), parts.departure.get(), denoised.get))
        probes = Lazy(lambda: self._probes(x, parts.exact.get(), parts.departure.get(), smoothed.get, without_noise))
        geometry = ContextGeometry.of(x)
        return GuardedFit(real, parts.exact, probes, geometry, without_noise=without_noise, smoothed=smoothed)

    def context_work(self, context_x: np.ndarray, context_y: np.ndarray) -> ContextWork:
        """The context's `ContextWork`, nothing built yet."""
        x = np.asarray(context_x, dtype=np.float64)
        y = np.asarray(context_y, dtype=np.float64)
        voltages = Lazy(lambda: self._context_voltages(x, y.shape))
        work = ContextWork(
            y,
            Lazy(lambda: self.base.fit(x, y)),
            voltages,
            Lazy(lambda: self._exact_probe(x, work)),
            Lazy(lambda: _departure(x, y, voltages.get())),
        )
        return work

    def build_ahead(self, work: ContextWork, extrapolation: np.ndarray) -> None:
        """Builds the parts of `work` other than the method's own fit that the fit and the answer at queries of this
        `extrapolation` (on the context's geometry) read whatever that fit gives: the departure where a denoiser is
        given (`_without_meter_noise`), the exact probe where some query lies beyond the context's reach or every
        answer is widened (`consulted`) and it is no own fit. For a core the method's own fit leaves idle: the answer
        then waits for neither (a checkpoint's exact probe is a second encoding of the context)."""
        if self.denoiser is not None:
            work.departure.get()
        far = self.within_reach or bool((np.asarray(extrapolation) > EXTRAPOLATION_THRESHOLD).any())
        if far and not work.readings_are_the_model():
            work.exact.get()

    def _context_voltages(self, x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
        """The network model's |V| at the context loads, None where its power flow has no solution at some row."""
        v = np.asarray(self.voltage_model(x), dtype=np.float64)
        return v if np.isfinite(v).all() and v.shape == shape else None

    def _exact_probe(self, x: np.ndarray, work: ContextWork) -> ExactProbe:
        v = work.voltages.get()
        if v is None:
            return ExactProbe(None, None)
        return ExactProbe(v, work.own.get() if work.readings_are_the_model() else self.base.fit_for_means(x, v))

    def _denoised(self, x: np.ndarray, y: np.ndarray) -> Denoised | None:
        if self.denoiser is None:
            return None
        fitted = self.denoiser.fit(x, y)
        return Denoised(fitted, np.asarray(self.denoiser.summarize(fitted, x).mean, dtype=np.float64))

    def _without_meter_noise(
        self,
        real: Any,
        x: np.ndarray,
        y: np.ndarray,
        departure: Callable[[], tuple[np.ndarray, np.ndarray] | None],
        denoised: Callable[[], Denoised | None],
    ) -> Any:
        """The method's fit, its spread calibrated on held-out errors less the readings' meter noise where that
        noise is a fair share of them (models.meter_noise): the answer is about the true voltage. The network
        model's power flow at the context and the denoiser's fit are paid only where the method's spread comes
        from the readings' held-out errors (`Method.heldout_rms`) and a denoiser is given."""
        if self.denoiser is None or not np.isfinite(y).all():
            return real
        rms = self.base.heldout_rms(real)
        noise_and_smooth = None if rms is None else departure()
        # first the readings' departure from the network model less its part linear in the loads: no larger than
        # their noise where that is all there is, larger where the feeder departs from its model nonlinearly
        # (lines off, a set point: 3-6e-7 p.u. with exact readings on IEEE 33), so a cheap test that passes
        # every context whose noise can matter; then network-fit's own residual, which fits those departures
        if rms is None or noise_and_smooth is None or not worth_taking_out(noise_and_smooth[0], rms):
            return real
        answer = denoised()
        if answer is None:
            return real
        noise = meter_noise(y, answer.readings)
        if not (independent_across_buses(noise) and worth_taking_out(np.sqrt(np.mean(np.square(noise), axis=0)), rms)):
            return real
        return self.base.without_meter_noise(real, x, y, noise)

    def _smoothed(
        self,
        x: np.ndarray,
        probe: ExactProbe,
        departure: tuple[np.ndarray, np.ndarray] | None,
        denoised: Callable[[], Denoised | None],
    ) -> Smoothed | None:
        """`Smoothed` (None where the readings are exact, or without the network model's voltages at the context)."""
        v = probe.v
        if v is None or departure is None or float(departure[0].max()) <= NOISELESS_PU:
            return None
        answer = denoised()
        if answer is None:
            return Smoothed(self.base.fit_for_means(x, v + departure[1]), None)
        readings = np.where(np.isfinite(answer.readings), answer.readings, v + departure[1])
        return Smoothed(self.base.fit_for_means(x, readings), answer.fit)

    def _probes(
        self,
        x: np.ndarray,
        probe: ExactProbe,
        departure: tuple[np.ndarray, np.ndarray] | None,
        smoothed: Callable[[], Smoothed | None],
        without_noise: bool,
    ) -> Probes:
        """`departure`: the readings' noise and smooth departure from the network model (`_departure`);
        `without_noise`: the method was calibrated less the meter noise, so its probes' scatter at the context
        rows is wanted too (`_noise_driven`)."""
        v, exact = probe.v, probe.fit
        if v is None or departure is None:
            return Probes(None, None, [], 1.0)
        noise = departure[0]
        if float(noise.max()) <= NOISELESS_PU:
            return Probes(exact, None, [], 1.0)
        plain = None if self.prober is self.base else self.prober.fit_for_means(x, v)
        rng = np.random.default_rng(0)
        # one call: the fits share their work on the loads alone (the loads' scaling and SVD, `Method.fit_many`)
        noisy = self.prober.fit_many(x, [v + rng.normal(0.0, noise, v.shape) for _ in range(NOISY_PROBES)])
        at_context = None
        if without_noise:
            at_plain = _answered(self.base, exact, x, v) if plain is None else _answered(self.prober, plain, x, v)
            at_context = np.mean(scatter_of(self.prober, noisy, x, v, at_plain), axis=(0, 1))
        # a noisy context's fit errs by a bias per bus that every query of the bus shares: the interval
        # must hold on all k buses at once (Bonferroni), with the t's allowance for so few probes
        k = v.shape[1]
        gain = simultaneous_factor(k) * float(student_t.ppf(0.5 + CALIBRATION_LEVEL / 2.0, NOISY_PROBES)) / GAUSS_HALF
        fits = smoothed()
        assert fits is not None  # noisy readings and the network model's voltages, as here
        return Probes(exact, plain, noisy, gain, fits, at_context)

    def _miss(
        self,
        fitted: GuardedFit,
        rows: np.ndarray,
        v: np.ndarray,
        answer: np.ndarray,
        weight: np.ndarray,
        own_std: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(m, k) what widens the answer at query rows (m, d), the network model's voltages there v: the error
        this method makes there on the network model times each row's `weight` (m,; 1 at every row of a context whose
        meter noise the denoiser takes out) (`_far_miss`), and
        `within_reach`, at least the exact probe's miss whatever the weight; (m, k) how far the answer's centre
        moves there (`_far_miss`'s, times the weight; 0 within the context's reach and for exact readings); and
        (m,) how much of the method's own spread the answer keeps (1 - the weight where the centre moved to the
        denoised fit with the denoiser's spread, whose answer it then is; else 1). `answer`, `own_std`: the
        method's own mean and std there (already computed: a checkpoint's is a forward pass)."""
        exact = fitted.exact.get().fit
        assert exact is not None
        nonlinear = _answered(self.base, exact, rows, v) - v
        if fitted.without_noise and self.denoiser is not None:
            # noisy readings: every query is answered as one beyond the context's reach, from the method's fit of the
            # readings denoised with the denoiser's spread (`_leaned`). A fit of the noisy readings themselves is no
            # better than per-bus least squares (0.8-1.06x on the SimBench development grids at 1e-3 p.u. and IEEE 33
            # at 1e-5), network-fit's joint fit over the branches takes the noise out (0.01-0.3x). The noisy probes
            # are then not built: they widen only an answer that keeps the method's own fit (~0.3 s of a 4,000-query
            # answer on IEEE 33)
            fits = None if fitted.smoothed is None else fitted.smoothed.get()
            leaned = None if fits is None else self._leaned(fits, rows, v, nonlinear)
            if leaned is not None:
                return leaned[0], leaned[1] - answer, np.zeros(len(rows))
            weight = np.ones_like(weight)
        out: np.ndarray = np.abs(nonlinear) if self.within_reach else np.zeros_like(nonlinear)
        beyond = weight > 0.0
        # the noisy probes' answers only where they count: every row of a fit calibrated less the noise, else far ones
        probes = fitted.probes.get() if fitted.without_noise or beyond.any() else None
        scatter = None if probes is None else self._scatter(probes, rows, v, nonlinear)
        if fitted.without_noise and probes is not None and scatter is not None:
            out = np.sqrt(np.square(out) + _noise_driven(probes, scatter, own_std))
        shift = np.zeros_like(nonlinear)
        keep = np.ones(len(rows))
        if probes is not None and beyond.any():
            far, centre, replaced = self._far_miss(
                probes,
                rows[beyond],
                v[beyond],
                answer[beyond],
                nonlinear[beyond],
                None if scatter is None else scatter[beyond],
            )
            w = weight[beyond, None]
            shift[beyond] = w * (centre - answer[beyond])
            if replaced:  # the denoised fit's answer, as far as the weight goes: its spread replaces the method's
                out[beyond] = w * far + (1.0 - w) * out[beyond]
                keep[beyond] = 1.0 - weight[beyond]
            else:
                out[beyond] = np.maximum(out[beyond], w * far)
        return out, shift, keep

    def _scatter(self, probes: Probes, rows: np.ndarray, v: np.ndarray, nonlinear: np.ndarray) -> np.ndarray | None:
        """(m, k) the noisy probes' mean square scatter at query rows around the plain fit's answer (None: exact
        readings, no probes)."""
        if not probes.noisy:
            return None
        plain = nonlinear + v if probes.plain is None else _answered(self.prober, probes.plain, rows, v)
        scatter: np.ndarray = np.mean(scatter_of(self.prober, probes.noisy, rows, v, plain), axis=0)
        return scatter

    def _far_miss(
        self,
        probes: Probes,
        rows: np.ndarray,
        v: np.ndarray,
        answer: np.ndarray,
        nonlinear: np.ndarray,
        scatter: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """The error this method makes at query rows on the network model: its exact probe's miss `nonlinear`,
        and with noisy readings the noisy probes' scatter, times the gain, or where larger the fit's own
        noise-driven error plus that miss, REACH times (Probes); and the centre the answer moves to there: with
        noisy readings the method's fit of the readings denoised, else the answer; and whether that error is the
        denoised fit's whole spread (with network-fit as denoiser: the module's comments; the method's own spread
        is then not the answer's). `scatter`: the noisy probes' there (`_scatter`)."""
        if scatter is None:
            exact: np.ndarray = np.abs(nonlinear)
            return exact, answer, False
        assert probes.smoothed is not None
        leaned = self._leaned(probes.smoothed, rows, v, nonlinear)
        if leaned is not None:
            return leaned[0], leaned[1], True
        centre = _answered(self.base, probes.smoothed.fit, rows, v)  # the method's fit of the readings denoised
        # without a denoiser's spread: the answer's own fit's, moved with the centre and widened by the move (the
        # interval holds every value the unmoved one held)
        sampled = probes.gain * np.sqrt(np.square(nonlinear) + scatter)
        own = REACH * np.abs(answer - centre + nonlinear)
        out: np.ndarray = np.maximum(sampled, own) + np.abs(centre - answer)
        return out, centre, False

    def _leaned(
        self, fits: Smoothed, rows: np.ndarray, v: np.ndarray, nonlinear: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(m, k) the spread and centre at query rows of the method's fit of the readings denoised, leaning to the
        denoiser's answer (`_far_miss`); None without a denoiser's fit, or where either is not finite."""
        if fits.denoised is None or self.denoiser is None:
            return None
        centre = _answered(self.base, fits.fit, rows, v)  # the method's fit of the readings denoised
        # the denoiser's own spread there, and how far the method's fit strays from the denoiser's answer
        # (its extrapolation of the denoised readings) plus its miss on the network model (module comment)
        known = self.denoiser.summarize(fits.denoised, rows)
        denoiser_mean, denoiser_var = np.asarray(known.mean), np.square(np.asarray(known.std))
        # where the method's fit strays from the denoiser's answer by more than the denoiser's spread (a few rows,
        # far out: 16 readings at 2-3x load answered 0.23-1.0 p.u., network-fit 0.6-0.95) the answer leans to the
        # denoiser's, by the inverse of each one's squared error (the method's: its distance plus its miss)
        strays = np.square(np.abs(centre - denoiser_mean) + np.abs(nonlinear))
        total = strays + denoiser_var
        lean = np.divide(strays, total, out=np.zeros_like(total), where=total > 0.0)
        centre = centre + lean * (denoiser_mean - centre)
        spread = np.sqrt(denoiser_var + np.square(1.0 - lean) * strays)  # the method's error as far as it counts
        if np.isfinite(spread).all() and np.isfinite(centre).all():
            return spread, centre
        return None

    def predict(self, fitted: GuardedFit, query_x: np.ndarray) -> Predictive:
        """The wrapped method's predictive, unwidened (the service asks `summarize`)."""
        out: Predictive = self.base.predict(fitted.real, query_x)
        return out

    def summarize(
        self,
        fitted: GuardedFit,
        query_x: np.ndarray,
        levels: Sequence[float] = (),
        band: tuple[float, float] | None = None,
        extrapolation: np.ndarray | None = None,
    ) -> Summary:
        """The wrapped method's own summary (bit for bit within the context's reach), widened beyond it.
        `extrapolation`: the queries' measure on this context's geometry where the caller has it already."""
        q = np.asarray(query_x, dtype=np.float64)
        own = self.base.summarize(fitted.real, q, levels, band)
        if extrapolation is None:
            extrapolation = fitted.geometry.extrapolation(q) if q.ndim == 2 and len(q) else np.zeros(len(q))
        return self.widen(fitted, q, own, extrapolation, band, levels)

    def widen(
        self,
        fitted: GuardedFit,
        query_x: np.ndarray,
        own: Summary,
        extrapolation: np.ndarray,
        band: tuple[float, float] | None = None,
        levels: Sequence[float] = (),
    ) -> Summary:
        """`own` (the wrapped method's summary of these queries at quantile `levels`) widened where they lie
        beyond the context's reach. Apart from `summarize` so a caller that splits a big answer over threads
        widens it once, after the split: the few far rows' small calls are slow beside another thread's big
        forward pass."""
        far = self.consulted(fitted, extrapolation)
        if not far.size:
            return own
        q = np.asarray(query_x, dtype=np.float64)
        weight = ramp(extrapolation)
        mean, std = own.mean.copy(), own.std.copy()
        quantiles = own.quantiles.copy()
        p_outside = None if own.p_outside is None else own.p_outside.copy()
        z = norm.ppf(np.asarray(levels, dtype=np.float64))[:, None, None]  # (L, 1, 1)
        for solve_start in range(0, far.size, SOLVE_BLOCK):  # the power flow in big blocks (its cost is per call)
            solving = far[solve_start : solve_start + SOLVE_BLOCK]
            voltages = self._solved(q, solving)
            for start in range(0, solving.size, GUARD_BLOCK):
                rows, v = solving[start : start + GUARD_BLOCK], voltages[start : start + GUARD_BLOCK]
                self._widen_block(fitted, q, rows, v, weight, (mean, std, quantiles, p_outside), z, band)
        return Summary(mean, std, quantiles, p_outside)

    def _widen_block(
        self,
        fitted: GuardedFit,
        q: np.ndarray,
        rows: np.ndarray,
        v: np.ndarray,
        weight: np.ndarray,
        out: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None],
        z: np.ndarray,
        band: tuple[float, float] | None,
    ) -> None:
        """`widen` at query rows `rows` (the network model's voltages there v): std, quantiles and p_outside of
        `out` (mean, std, quantiles, p_outside; the last None without a band) widened in place."""
        mean, std, quantiles, p_outside = out
        added, shift, keep = self._miss(fitted, q[rows], v, mean[rows], weight[rows], std[rows])
        own_mean = mean[rows].copy()
        mean[rows] += shift
        std[rows] = np.sqrt(np.square(keep[:, None] * std[rows]) + np.square(added))
        if z.size:
            kept = own_mean[None] + keep[None, :, None] * (quantiles[:, rows] - own_mean[None])
            quantiles[:, rows] = widened_quantiles(kept + shift[None], mean[rows], z * added[None])
        if band is not None and p_outside is not None:
            moved = keep < 1.0  # the denoised fit's answer (in part): normal at the answer's mean and spread
            own = ~moved  # the method's own answer widened: its distribution convolved with the added error
            if own.any():
                pred = self.base.predict(fitted.real, q[rows[own]])
                p_outside[rows[own]] = convolved_outside(pred, band, added[own], shift[own])
            if moved.any():
                mu, sigma = mean[rows][moved], np.maximum(std[rows][moved], np.finfo(np.float64).tiny)
                p_outside[rows[moved]] = norm.cdf((band[0] - mu) / sigma) + norm.sf((band[1] - mu) / sigma)

    def widens_every_row(self, fitted: GuardedFit) -> bool:
        """Whether `widen` reads every query row, within the context's reach too: `within_reach` (physics-fit), or
        a method calibrated less the readings' meter noise (a noisy context)."""
        return self.within_reach or fitted.without_noise

    def consulted(self, fitted: GuardedFit, extrapolation: np.ndarray) -> np.ndarray:
        """The query rows whose answer `widen` reads the network model's power flow at: those beyond the
        context's reach (their ramp above 0; every row where it `widens_every_row`), where the probes have a power
        flow at the context (they are built here, once, if there is such a row)."""
        # a flat test first: most answers have no such row, and clip is slow on a few rows
        beyond = np.asarray(extrapolation) > EXTRAPOLATION_THRESHOLD
        far = np.flatnonzero(np.ones_like(beyond) if self.widens_every_row(fitted) else beyond)
        if far.size and fitted.exact.get().fit is None:
            return far[:0]
        return far

    def _solved(self, q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The network model's |V| at rows `rows` of the queries q; RowsRefused naming them in q's numbering."""
        try:  # a row with no power flow is no query any model can answer: refused, as network-fit does
            return solved(self.voltage_model, q[rows], "query_x")
        except RowsRefused as exc:
            raise RowsRefused(exc.field, [int(rows[r]) for r in exc.rows], exc.reason, exc.expected) from None

    def refuse_unsolved(self, fitted: GuardedFit, query_x: np.ndarray, extrapolation: np.ndarray) -> None:
        """RowsRefused naming every query row `widen` would refuse (a consulted one without a power flow),
        asked in `widen`'s power-flow blocks, the refused rows of all of them named (`widen` stops at the first)."""
        self.base.refuse_unsolved(fitted.real, query_x, extrapolation)  # a probed checkpoint asks at every row
        q = np.asarray(query_x, dtype=np.float64)
        far = self.consulted(fitted, extrapolation)
        rows: list[int] = []
        refused: RowsRefused | None = None
        for start in range(0, far.size, SOLVE_BLOCK):
            try:
                self._solved(q, far[start : start + SOLVE_BLOCK])
            except RowsRefused as exc:
                rows, refused = rows + exc.rows, exc
        if refused is not None:
            raise RowsRefused(refused.field, rows, refused.reason, refused.expected)


# convolved_outside's cells the band is out of reach of (a normal error reaches QUIET_REACH stds with
# probability 6e-16): given their bound, within QUIET_P of the exact answer.
QUIET_REACH, QUIET_P = 8.0, 1e-9


def _answered(method: Method, model: Any, rows: np.ndarray, v: np.ndarray) -> np.ndarray:
    """A probe's mean at query rows, the network model's voltages v where it has no answer (it adds nothing)."""
    out = np.asarray(method.summarize(model, rows).mean)
    answered: np.ndarray = np.where(np.isfinite(out), out, v)
    return answered


def _noise_driven(probes: Probes, scatter: np.ndarray, own_std: np.ndarray) -> np.ndarray:
    """(m, k) the variance to add at query rows to a spread calibrated on held-out errors less the readings'
    meter noise. The truth's error at a query is the method's misfit there plus the error the noise carries
    the fit to, which the noisy probes sample (S(q), their mean square scatter; S at the context rows on
    average). The held-out errors were measured against network-fit's answer, which shares part of that
    noise-driven error (both fitted the same readings), so the misfit is taken as at most own^2 - S. The
    noise-driven error is largely one draw per bus that every query of the bus shares (a bias): like the
    probes beyond the context it is widened to hold on every bus at once (`Probes.gain`). Without that, the
    bus whose draw was the largest of 32 sat at 0.59 coverage (IEEE 33, lines off, noise 1e-3 p.u.: its
    bias 1.6 probe spreads) and of 94 at 0.62. The answer's variance: misfit + gain^2 S(q)."""
    assert probes.context_scatter is not None
    misfit = np.maximum(np.square(own_std) - probes.context_scatter[None, :], 0.0)
    added: np.ndarray = np.maximum(misfit + probes.gain**2 * scatter - np.square(own_std), 0.0)
    return added


def scatter_of(method: Method, probes: list[Any], rows: np.ndarray, v: np.ndarray, plain: np.ndarray) -> np.ndarray:
    """(P, m, k) each noisy probe's squared distance from the plain fit's answer `plain` at query rows."""
    return np.stack([np.square(_answered(method, model, rows, v) - plain) for model in probes])


def widened_quantiles(quantiles: np.ndarray, centre: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Quantiles (L, m, k) of an answer plus an independent normal error, whose own quantile at each level
    is `offset` (L, m, k): in quadrature with each quantile's distance from the mean on its own side (exact
    for a normal answer), added where a quantile lies on the other side (a skewed answer's levels near the
    median). A heavy-tailed or skewed PFN answer so widens its short side as much as its long one."""
    d = quantiles - centre[None]
    same_side = d * offset > 0.0
    out: np.ndarray = centre[None] + np.where(
        same_side, np.sign(offset) * np.sqrt(np.square(d) + np.square(offset)), d + offset
    )
    return out


def convolved_outside(
    pred: Predictive, band: tuple[float, float], added: np.ndarray, shift: np.ndarray | None = None
) -> np.ndarray:
    """(m, k) P(outside `band`) of `pred` moved by `shift` (m, k; None: not moved) plus an independent normal
    error of std `added` (m, k), exact for each kind of answer (`Predictive.cdf_with_error`). A cell the answer
    leaves (or stays in) the band from with less than QUIET_P even QUIET_REACH error stds nearer to it (or
    farther out) gets that bound without the convolution, where the answer can give its other cells alone
    (`Predictive.cells`): most cells of most answers lie far inside the band or far outside it."""
    moved = np.zeros_like(added) if shift is None else shift
    low, high = band[0] - moved, band[1] - moved  # the moved answer leaves the band where pred leaves this one
    reach = QUIET_REACH * added
    below_low, below_high, within_high, within_low = pred.cdf_many(
        np.stack(np.broadcast_arrays(low + reach, high - reach, high + reach, low - reach))
    )
    leaves = below_low + (1.0 - below_high)  # at least P(outside)
    stays = np.maximum(within_high - within_low, 0.0)  # at least P(inside)
    live = ~((leaves < QUIET_P) | (stays < QUIET_P))
    sub = pred.cells(live) if not live.all() else None
    if sub is None:
        return _convolved_outside(pred, (low, high), added)
    out: np.ndarray = np.clip(np.where(leaves < QUIET_P, leaves, 1.0 - stays), 0.0, 1.0)
    if live.any():
        out[live] = _convolved_outside(sub, (low[live][None], high[live][None]), added[live][None])[0]
    return out


def _convolved_outside(pred: Predictive, band: tuple[Any, Any], added: np.ndarray) -> np.ndarray:
    """`convolved_outside` on every cell: both ends of the band in one pass (`Predictive.cdf_with_error`)."""
    ends = pred.cdf_with_error(np.stack(np.broadcast_arrays(band[1], band[0], added)[:2]), added)
    out: np.ndarray = np.clip(1.0 - (ends[0] - ends[1]), 0.0, 1.0)
    return out

"""How far a context's pseudo-measurements err, as its voltage readings show: the spread network-fit adds for them.

Where a context leaves loads unmetered, network-fit solves its rows with those loads at guessed values
(models.typical_loads) and the guesses' errors move every bus below them. The service states how large it expects
them to be, in blocks of columns (a unit-std error each: a customer class's utilisation, one customer's own departure
from its class), but those are guesses about guesses: on 1-MV-rural with its generators unmetered, the class
utilisations erred ~5x what their posterior said, and the worst bus held on 0.47 of queries at readings noise 1e-3.

The readings say how large the errors were. Each row's readings, less the network model's voltages at its guessed
loads and less each bus's mean over the rows (the fit's offset and the classes' mean errors take that up), are drawn
as N(0, sum_b s_b^2 A_b A_b' + sigma^2 I), A_b the network model's response to block b (k buses x its columns); the
scales s_b and the readings' noise sigma are those of maximum likelihood (`scales`). A block is only ever widened
(s_b >= 1): its stated size is the service's estimate from the metered loads, and a feeder unlike its model shows as
larger scales, never smaller ones.

network-fit uses them three ways (`PseudoErrors`): each bus's spread holds their variance; its branch stage weighs
the readings by the inverse of their covariance across buses (a guess's error moves every bus below its load
together, as no impedance error does, so the fit no longer takes it for one); and its per-bus stage is given the
readings less what the guesses most likely moved (a fit of that follows the guessed loads, and is wrong at every
query, whose loads are given). IEEE 33 with half its load buses unmetered, the model right: at 1.3-1.5x load
network-fit erred 8e-3 p.u. and held no bus, now 5e-8 and every bus; 1-MV-rural with its generators unmetered,
3e-3 -> 3e-4.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from models.branch_correction import LEVEL_EVIDENCE, LEVEL_EVIDENCE_NOISY, LEVEL_NOISY_PU
from models.errors import RowsRefused
from models.network_voltages import solved

# Readings on fewer rows than this (read at every bus they read) say too little of the errors' size: stated sizes kept.
MIN_ROWS = 20
# The likelihood's search: log scales from the stated size (0) and the noise from this (p.u.), within these bounds.
# (Nelder-Mead: the likelihood is flat or undefined where the noise reaches the floor with exact readings.)
NOISE_START_PU, NOISE_FLOOR_PU = 1e-4, 1e-8
LOG_SCALE_BOUNDS = (-6.0, 6.0)
SEARCH = {"maxiter": 600, "xatol": 1e-2, "fatol": 1e-3}
# The likelihood is taken in the smaller of the buses' and the columns' spaces, and not beyond this size (a k^3
# factorisation per step of its search: an upload's thousands of buses each unmetered would take minutes).
MAX_SIZE = 400
# The readings' noise is taken as at least this share of the largest move of a bus (`PseudoErrors.covariance`).
CONDITION = 1e-3
# The finite-difference step of the sensitivity, relative to an input's largest stated error.
STEP = 1e-4


def sensitivity(
    voltage_model: Callable[[np.ndarray], np.ndarray], x: np.ndarray, moving: np.ndarray, step: np.ndarray
) -> np.ndarray:
    """(moving, k) the network model's |V| response per unit of each load input in `moving`, at the mean of the
    loads x (n, d), by a `step` (moving,) in each: one power flow of a row per input. RowsRefused where it has none
    there."""
    rows = np.repeat(x.mean(axis=0)[None, :], moving.size + 1, axis=0)
    rows[np.arange(1, moving.size + 1), moving] += step
    v = solved(voltage_model, rows, "context.x")
    out: np.ndarray = (v[1:] - v[0]) / step[:, None]
    return out


def scales(residual: np.ndarray, responses: Sequence[np.ndarray], fit_scales: bool = True) -> tuple[np.ndarray, float]:
    """(b,) each block's scale, at least 1, and the readings' noise sigma: rows of `residual` (n, k) as
    N(0, sum_b s_b^2 R_b R_b' + sigma^2 I), R_b = `responses`[b] (k, c_b), by maximum likelihood (the scales held at
    1 unless `fit_scales`). Ones and NaN where fewer than MIN_ROWS rows, no block moves a bus, or both spaces exceed
    MAX_SIZE."""
    ones = np.ones(len(responses))
    n, k = residual.shape
    columns = sum(r.shape[1] for r in responses)
    if n < MIN_ROWS or min(columns, k) > MAX_SIZE or not any(r.size and np.abs(r).max() > 0 for r in responses):
        return ones, float("nan")
    residual = residual - residual.mean(axis=0)
    scatter = residual.T @ residual
    both = np.concatenate(responses, axis=1)  # (k, c): the likelihood in the smaller of the two spaces
    sizes = [r.shape[1] for r in responses]
    if both.shape[1] < k:
        gram, projected, trace = both.T @ both, both.T @ scatter @ both, float(np.trace(scatter))

    def negative_log_likelihood(logs: np.ndarray) -> float:
        noise = np.exp(2.0 * logs[-1])
        weights = np.repeat(np.exp(2.0 * logs[:-1]), sizes) if fit_scales else np.ones(columns)
        try:
            if both.shape[1] < k:  # Woodbury: (sigma^2 I + A D A')^-1 through the c x c M = sigma^2 D^-1 + A'A
                chol = np.linalg.cholesky(noise / weights[:, None] * np.eye(len(weights)) + gram)
                logdet = (k - len(weights)) * np.log(noise) + 2.0 * np.log(np.diag(chol)).sum()
                logdet += np.log(weights).sum()
                inner = np.linalg.solve(chol, projected)
                inner = np.linalg.solve(chol, inner.T)
                quadratic = (trace - float(np.trace(inner))) / noise
            else:
                chol = np.linalg.cholesky(noise * np.eye(k) + (both * weights) @ both.T)
                logdet = 2.0 * np.log(np.diag(chol)).sum()
                whitened = np.linalg.solve(chol, scatter)
                quadratic = float(np.trace(np.linalg.solve(chol, whitened.T)))
        except np.linalg.LinAlgError:
            return float("inf")
        return float(0.5 * (n * logdet + quadratic))

    start = np.concatenate([np.zeros(len(responses) if fit_scales else 0), [np.log(NOISE_START_PU)]])
    bounds = [LOG_SCALE_BOUNDS] * (len(start) - 1) + [(np.log(NOISE_FLOOR_PU), 0.0)]
    simplex = start + np.vstack([np.zeros(len(start)), np.eye(len(start))])  # steps of e: a flat start stalls
    found = minimize(
        negative_log_likelihood,
        start,
        method="Nelder-Mead",
        bounds=bounds,
        options=SEARCH | {"initial_simplex": simplex},
    )
    factor: np.ndarray = np.maximum(np.exp(found.x[:-1]), 1.0) if fit_scales else ones
    return factor, float(np.exp(found.x[-1]))


@dataclass(frozen=True)
class PseudoErrors:
    """A context's pseudo-measurement errors as the readings size them (`widened_by_readings`)."""

    errors: np.ndarray  # (d, c) a column per unit-std error, each block times its scale
    variance: np.ndarray  # (k,) each bus's variance from them (the network model's sensitivity times the columns)
    response: np.ndarray  # (k, c) each column's move of every bus's |V|
    noise: float  # the readings' noise (p.u.) beside them; NaN: not known (too few rows)
    # the leading columns that are context-wide levels (a class's utilisation: the same in every row), as the sizes of
    # their groups (a prior each)
    levels: tuple[int, ...] = ()
    level_evidence: float = LEVEL_EVIDENCE  # how far their evidence must beat none for the branch stage to take them
    # (n, levels) how far each level moves each context row (a class's level where its guesses follow a profile);
    # None: 1 in every row
    level_rows: np.ndarray | None = None

    @property
    def level_margin(self) -> float:
        """How far the levels' evidence must beat none: `level_evidence`, at most LEVEL_EVIDENCE_NOISY where the
        readings' own noise is known to be at least LEVEL_NOISY_PU."""
        if np.isfinite(self.noise) and self.noise >= LEVEL_NOISY_PU:
            return min(self.level_evidence, LEVEL_EVIDENCE_NOISY)
        return self.level_evidence

    def level_moves(self, level: np.ndarray) -> np.ndarray | None:
        """(k, levels) the level columns' move of every bus's |V|^2 / 2 (`level` (k,): each bus's |V|), what
        network-fit's branch stage fits beside the branches; None where there are none."""
        if not self.level_count:
            return None
        out: np.ndarray = self.response[:, : self.level_count] * np.asarray(level, dtype=np.float64)[:, None]
        return out

    def level_move(self, level: np.ndarray) -> np.ndarray:
        """What the fitted `level` (levels,) moves the guessed loads by: (d,) the same in every row, or (n, d) row by
        row (`level_rows`)."""
        columns = self.errors[:, : self.level_count]
        if self.level_rows is None:
            same: np.ndarray = columns @ level
            return same
        out: np.ndarray = (self.level_rows * level) @ columns.T
        return out

    @property
    def level_count(self) -> int:
        return int(sum(self.levels))

    def level_groups(self) -> np.ndarray:
        """(level_count,) each level column's group."""
        return np.repeat(np.arange(len(self.levels)), self.levels)

    def covariance(self, buses: np.ndarray) -> np.ndarray | None:
        """(b, b) the readings' error covariance over `buses` (indices; |V|): the guesses' moves and the noise, the
        noise at least CONDITION of the largest move (a bound on how far one direction is trusted over another);
        None where the noise is not known."""
        if not np.isfinite(self.noise):
            return None
        response = self.response[buses]
        covariance: np.ndarray = response @ response.T + self._noise(response) ** 2 * np.eye(len(buses))
        return covariance

    def _noise(self, response: np.ndarray) -> float:
        return max(self.noise, CONDITION * float(np.sqrt(np.square(response).sum(axis=1).max(initial=0.0))))

    def precision(self, every: np.ndarray, level: np.ndarray) -> np.ndarray | None:
        """(k, k) the readings' relative precision in |V|^2 / 2 (the branch stage's terms: a move d|V| is |V| d|V|
        there, `level` (k,) each bus's |V|): across the buses read in every row (`every`, bool) the inverse of their
        covariance, on any other bus the inverse of its own variance; scaled to a mean diagonal of 1. None where
        the noise is not known."""
        k = self.response.shape[0]
        covariance = self.covariance(np.arange(k))
        if covariance is None:
            return None
        covariance = covariance * level[:, None] * level[None, :]
        precision = np.diag(1.0 / np.diag(covariance))
        if every.any():
            precision[np.ix_(every, every)] = np.linalg.inv(covariance[np.ix_(every, every)])
        out: np.ndarray = precision / float(np.mean(np.diag(precision)))
        return out

    def without_guesses(self, residual: np.ndarray, every: np.ndarray) -> np.ndarray:
        """Rows of `residual` (n, k; |V|) less what the guesses' errors most likely moved on the buses read in every
        row (`every`): r - R R' C^-1 r = sigma^2 C^-1 r, C their covariance. What a correction fitted bus by bus is
        then given: a fit of what the guesses moved follows the guessed loads and is wrong at every query, whose
        loads are given (IEEE 33 half unmetered: 8e-3 p.u. at 1.3-1.5x load)."""
        covariance = self.covariance(np.flatnonzero(every))
        if covariance is None or not every.any():
            return residual
        out = residual.copy()
        noise = self._noise(self.response[every])
        out[:, every] = noise**2 * np.linalg.solve(covariance, residual[:, every].T).T
        return out


def widened_by_readings(
    voltage_model: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    v: np.ndarray,
    y: np.ndarray,
    blocks: Sequence[np.ndarray],
    calibrate: bool = True,
    levels: Sequence[int] = (),
) -> PseudoErrors:
    """The pseudo-measurements' errors (d, c) with each block times its `scales` from the readings y (n, k; NaN: not
    read; the buses read in every row count) at complete loads x (n, d), where the network model's voltages are v
    (n, k) (only the noise where not `calibrate`), and their move of every bus: the network model's sensitivity to
    every input they move times their columns; each bus's variance from them at most its readings' mean square
    departure from v. The stated blocks and no noise where the model has no power flow at the loads' mean. `levels`:
    the sizes of the groups of leading columns that are context-wide levels (`PseudoErrors.levels`)."""
    d, k = x.shape[1], y.shape[1]
    blocks = [np.asarray(b, dtype=np.float64).reshape(d, -1) for b in blocks]
    stated = np.concatenate(blocks, axis=1)
    moving = np.flatnonzero(np.abs(stated).sum(axis=1) > 0.0)
    nothing = PseudoErrors(stated, np.zeros(k), np.zeros((k, stated.shape[1])), float("nan"), tuple(levels))
    if not moving.size:
        return nothing
    try:
        response = sensitivity(voltage_model, x, moving, STEP * np.maximum(np.abs(stated[moving]).max(axis=1), 1e-6))
    except RowsRefused:
        return nothing
    read = np.isfinite(y).all(axis=0)
    noise, shown = float("nan"), np.full(k, np.inf)
    departure = np.square(y - v)
    seen = np.isfinite(departure).any(axis=0)
    shown[seen] = np.nanmean(departure[:, seen], axis=0)
    if read.any():
        responses = [response[:, read].T @ b[moving] for b in blocks]
        factor, noise = scales(y[:, read] - v[:, read], responses, fit_scales=calibrate)
        stated = stated * np.repeat(factor, [b.shape[1] for b in blocks])[None, :]
    moves = response.T @ stated[moving]  # (k, c)
    # a bus's readings depart from the model at the guessed loads by what the guesses' errors moved (and the feeder's
    # own departures, and noise): the spread holds no more of the guesses than that shows (a scale fitted to a
    # direction their errors barely span went to 400 on IEEE 33 read exactly: intervals 0.13 p.u. wide)
    return PseudoErrors(stated, np.minimum(np.square(moves).sum(axis=1), shown), moves, noise, tuple(levels))

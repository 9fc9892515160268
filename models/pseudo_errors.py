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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import minimize

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


def scales(residual: np.ndarray, responses: Sequence[np.ndarray]) -> np.ndarray:
    """(b,) each block's scale, at least 1: rows of `residual` (n, k) as N(0, sum_b s_b^2 R_b R_b' + sigma^2 I), R_b
    = `responses`[b] (k, c_b), s_b and sigma by maximum likelihood. Ones where fewer than MIN_ROWS rows, no block
    moves a bus, or both spaces exceed MAX_SIZE."""
    ones = np.ones(len(responses))
    n, k = residual.shape
    columns = sum(r.shape[1] for r in responses)
    if n < MIN_ROWS or min(columns, k) > MAX_SIZE or not any(r.size and np.abs(r).max() > 0 for r in responses):
        return ones
    residual = residual - residual.mean(axis=0)
    scatter = residual.T @ residual
    both = np.concatenate(responses, axis=1)  # (k, c): the likelihood in the smaller of the two spaces
    sizes = [r.shape[1] for r in responses]
    if both.shape[1] < k:
        gram, projected, trace = both.T @ both, both.T @ scatter @ both, float(np.trace(scatter))

    def negative_log_likelihood(logs: np.ndarray) -> float:
        noise = np.exp(2.0 * logs[-1])
        weights = np.repeat(np.exp(2.0 * logs[:-1]), sizes)
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

    start = np.concatenate([np.zeros(len(responses)), [np.log(NOISE_START_PU)]])
    bounds = [LOG_SCALE_BOUNDS] * len(responses) + [(np.log(NOISE_FLOOR_PU), 0.0)]
    simplex = start + np.vstack([np.zeros(len(start)), np.eye(len(start))])  # steps of e: a flat start stalls
    found = minimize(
        negative_log_likelihood,
        start,
        method="Nelder-Mead",
        bounds=bounds,
        options=SEARCH | {"initial_simplex": simplex},
    )
    factor: np.ndarray = np.maximum(np.exp(found.x[:-1]), 1.0)
    return factor


def widened_by_readings(
    voltage_model: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    blocks: Sequence[np.ndarray],
    calibrate: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """The pseudo-measurements' errors (d, c) with each block times its `scales` from the readings y (n, k; NaN: not
    read; the buses read in every row count) at complete loads x (n, d), and (k,) each bus's variance from them:
    the network model's sensitivity to every input they move times their columns. Zeros where no block moves an
    input; the stated blocks where the model has no power flow at the loads' mean, or not `calibrate`."""
    d, k = x.shape[1], y.shape[1]
    stated = np.concatenate([np.asarray(b, dtype=np.float64).reshape(d, -1) for b in blocks], axis=1)
    moving = np.flatnonzero(np.abs(stated).sum(axis=1) > 0.0)
    if not moving.size:
        return stated, np.zeros(k)
    try:
        response = sensitivity(voltage_model, x, moving, STEP * np.maximum(np.abs(stated[moving]).max(axis=1), 1e-6))
    except RowsRefused:
        return stated, np.zeros(k)
    read = np.isfinite(y).all(axis=0)
    if calibrate and read.any():
        v = np.asarray(voltage_model(x), dtype=np.float64)
        rows = np.isfinite(v).all(axis=1)
        responses = [response[:, read].T @ np.asarray(b, dtype=np.float64).reshape(d, -1)[moving] for b in blocks]
        factor = scales(y[rows][:, read] - v[rows][:, read], responses)
        sizes = [np.asarray(b).reshape(d, -1).shape[1] for b in blocks]
        stated = stated * np.repeat(factor, sizes)[None, :]
    variance: np.ndarray = np.square(response.T @ stated[moving]).sum(axis=1)
    return stated, variance

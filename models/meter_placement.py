"""Where to meter next: rank the buses no meter reads by how much one meter there would shrink the
largest predictive spread over given queries (network-fit, models.network_fit).

A Bayesian design: network-fit's branch stage is linear-Gaussian in the branches' relative impedance
errors, so the posterior after a meter at bus b reads every context row is known before the reading
is: its precision gains F_b^T F_b / sigma^2 (F_b: bus b's feature rows at the context's loads, sigma^2
the fitted reading noise), whatever the readings say. Each candidate costs one Cholesky of the
(2k + 1)-square normal equations and one pass of the posterior std over the queries: no refit, no power flow.
The score is the largest spread over every query and bus with that meter added (the bus itself then
counts as metered: the held-out widening leaves it); ties go to the lower bus index, so the ranking
is deterministic. The per-bus stage a new meter would also get is not counted (it narrows that bus's
spread further, never widens another's), nor a hedge's gap (`NetworkFitted.hedges`: how far the context's other
fits answer, with levels that follow the guesses' profile or the feeder held as recorded, which a meter's readings
may or may not close).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

from models.errors import InputValidationError
from models.linear import _one_blas_thread
from models.network_fit import NetworkFitMethod, NetworkFitted, at_set_point


@dataclass(frozen=True)
class MeterPlacement:
    """The ranking: candidates (output indices) best first, with the largest spread each leaves."""

    current: float  # the largest spread over the queries' buses with today's meters (p.u.)
    candidates: np.ndarray  # (c,) int: output index of each bus no meter reads, best first
    largest_spread: np.ndarray  # (c,) the largest spread with a meter added there (p.u.)
    worst_bus: np.ndarray  # (c,) int: the output index where that largest spread is


@_one_blas_thread
def rank_meters(
    method: NetworkFitMethod,
    fitted: NetworkFitted,
    context_x: np.ndarray,
    query_x: np.ndarray,
    typical_loads: np.ndarray | None = None,
    top: int | None = None,
) -> MeterPlacement:
    """Rank the buses `fitted` reads in no context row (the context `context_x` it was fitted on, NaN
    where a load is not metered; `typical_loads` as for the fit) for queries `query_x`; `top`: keep the
    best this many (None: all)."""
    method, fitted = method.answering(fitted)  # a relinearised fit's branch stage is its own network's
    branches = fitted.branches
    if branches is None:
        raise InputValidationError(
            "context", "the feeder has too many buses for the branch stage that placement rests on", "<= 400 buses"
        )
    x = method.complete(np.asarray(context_x, dtype=np.float64), typical_loads)
    model = at_set_point(method.voltage_model, fitted.set_point)
    fp, fq, head, _ = method.branch_inputs(x, np.asarray(model(x), dtype=np.float64), fitted.set_point)  # as fitted
    parts = method.at_queries(fitted, query_x)
    qp, qq, qh = parts.fp, parts.fq, parts.head
    now = parts.predictive(fitted, parts.branch_std(branches.posterior(qp, qq, qh)[1]), fitted.metered).std
    candidates = np.flatnonzero(fitted.metered == 0)
    eye = np.eye(branches.system.shape[0])
    spreads, worst = np.empty(candidates.size), np.empty(candidates.size, dtype=np.int64)
    for i, bus in enumerate(candidates):
        rows = branches.rows(int(bus), fp, fq, head)
        chol = np.linalg.cholesky(branches.system + rows.T @ rows)  # the normal equations with bus's rows added
        factor = np.sqrt(branches.noise_var) * solve_triangular(chol, eye, lower=True).T  # covariance: factor factor^T
        metered = fitted.metered.copy()
        metered[bus] = 1.0
        std = parts.branch_std(branches.posterior(qp, qq, qh, factor)[1])
        spread = parts.predictive(fitted, std, metered).std
        spreads[i], worst[i] = float(spread.max()), int(spread.max(axis=0).argmax())
    order = np.lexsort((candidates, spreads))[: None if top is None else max(int(top), 0)]
    return MeterPlacement(float(now.max()), candidates[order], spreads[order], worst[order])

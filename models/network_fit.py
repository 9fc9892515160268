"""The feeder's own power flow, corrected by the context: the model that knows what the context cannot show.

Every context names a network (built in or uploaded), so the service can run that network's exact
AC power flow at any loads. The operator's real feeder differs from its model (line impedances,
tap positions, the substation's set point), and readings carry meter noise, so the model's voltages
V(x) are a prior, not the answer. This method fits only what the context shows the model gets wrong,

    y(x) = V(x) + r(x),

in two stages: one correction per branch shared by every bus below it (`BranchCorrection`), then
per bus, on the loads and the branches' squared flows, by Bayesian linear regression
(models.linear: prior and noise precision by maximum evidence, so r shrinks to nothing when the
readings are noise around the model), kept as far as it is signal. Why it is trustworthy where a
fit of y alone is not:

- Off the context, V(x) carries every nonlinear term of the power flow exactly (load growth, PV
  reversing flows); only the correction r is extrapolated, and r is small and nearly linear.
- Under meter noise, the fit estimates a correction shrunk toward zero (the model itself), shared
  across the buses below each branch: noise averages out instead of being fitted per bus.
- A model whose impedances are off leaves a correction that bends with the losses: the per-bus stage
  takes every branch's squared flows (DistFlow's second-order terms, on the network's own tree)
  beside the loads, so it follows that bend beyond the context.

The spread per bus and query has two parts. The posterior std of r at the query (the function,
not a new reading: the truth has no meter noise), which grows with the query's distance from the
context; it is shared by every query of a bus (an error in the correction moves them all), so it
is widened to hold for all k buses at once (Bonferroni: a 95 % interval for the worst bus, not
the average one). And a model-error term the context cannot show: how far a linear fit of
the network model's own voltages on the same context misses V at the query (e(q), known exactly:
large off the context, small within it), scaled by the correction's share of the feeder's response
(rho, the largest over buses, since every bus's losses flow through the branches above it: a
model 30 % off leaves a correction 30 % of the response, whose nonlinear part a linear correction
misses) and by MODEL_ERROR_GAIN (second-order terms scale with the impedances squared:
a relative error rho in them is ~2 rho in those terms).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import cho_solve, solve_triangular

from models.calibration import simultaneous_factor
from models.errors import InputValidationError, RowsRefused
from models.linear import BayesianLinearRegression, LinearFit, posterior
from models.physics_fit import VERSION as VERSION  # built in, as physics-fit
from models.physics_fit import on_network, width_free_card
from models.predictive import GaussianPredictive, Method
from models.validation import check_context, check_queries

NAME = "network-fit"

# |V| (n, k) of the network model at raw load rows x (n, d); NaN rows where its power flow diverges.
VoltageModel = Callable[[np.ndarray], np.ndarray]

# See the module docstring: the model-error term is MODEL_ERROR_GAIN * rho * |e(q)|.
MODEL_ERROR_GAIN = 2.0
# The model's response over the context below this (p.u.) counts as this: a context of identical loads.
RESPONSE_FLOOR_PU = 1e-9
# The correction's share of the response is capped here: beyond, the network model explains nothing.
SHARE_CAP = 10.0
# The smallest spread (p.u.): the network model's power flow and a reference solver agree to ~1e-9.
SPREAD_FLOOR_PU = 2e-9


@dataclass(frozen=True)
class NetworkFitted:
    """The fitted correction, the probe fit of the model's own voltages, and the widening factors."""

    branches: (
        BranchCorrection | None
    )  # r = y - V(x), one per branch shared by the buses below it (None: too many buses)
    per_bus: LinearFit  # what each bus's readings still show beyond it
    keep: np.ndarray  # (k,) how much of that per-bus part is signal (positive-part James-Stein factor)
    probe: LinearFit  # V(x) itself, linear on the same context: its miss at a query is e(q)
    share: float  # rho: the fitted correction's variation relative to the model's, largest over buses
    simultaneous: float  # the epistemic std's factor for a 95 % interval on all k buses at once
    metered: np.ndarray  # (k,) the share of context rows in which each bus's voltage was read


def _solved(model: VoltageModel, x: np.ndarray, field: str) -> np.ndarray:
    v = np.asarray(model(x), dtype=np.float64)
    bad = ~np.isfinite(v).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise RowsRefused(
            field,
            rows.tolist(),
            "the network model's power flow does not converge at these loads: beyond what the feeder can carry",
            "loads the feeder can carry",
        )
    return v


# Prior precision grid of the branch corrections (standardised, times the stacked rows) searched by evidence.
BRANCH_PRIOR_GRID = tuple(10.0**e for e in np.arange(-12.0, 6.5, 0.5))
# A branch whose flows' mean square over the context is below this share of the typical branch's has none.
UNSEEN_FLOW = 1e-12
# Above this many buses the per-branch stage is skipped (its (2k + 1)^2 system grows as k^3 to solve).
MAX_BRANCH_BUSES = 400
# Queries per block for the posterior variance (memory ~ QUERY_BLOCK * k * 2k floats).
QUERY_BLOCK = 256
# The offset's penalty relative to the stacked rows: (nearly) flat, as a voltage set point is not small.
OFFSET_PENALTY = 1e-12


@dataclass(frozen=True)
class BranchCorrection:
    """r[t, j] = c + sum over branches b on bus j's path of (a_b P_b[t] + q_b Q_b[t]): one correction
    per branch shared by every bus below it (linearised DistFlow: an impedance error on a branch moves
    every voltage downstream by its flow times the error), fitted jointly on all buses' readings."""

    downstream: np.ndarray  # (k, k) float: [c, j] = 1 where bus j is c or below it
    load_positions: np.ndarray  # (m,) output index of each load
    scale: np.ndarray  # (2k + 1,) raw feature -> standardised feature factor
    theta: np.ndarray  # (2k + 1,) posterior mean on standardised features [P flows, Q flows, 1]
    factor: np.ndarray  # (2k + 1, 2k + 1) L with L L^T the posterior covariance of theta
    noise_var: float  # the readings' variance around the fitted correction (meter noise plus what it misses)

    @staticmethod
    def flows(x: np.ndarray, downstream: np.ndarray, load_positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """P and Q (n, k) through the branch into every output bus, lossless, from load rows x (n, 2m)."""
        m, k = len(load_positions), downstream.shape[0]
        p, q = np.zeros((x.shape[0], k)), np.zeros((x.shape[0], k))
        p[:, load_positions], q[:, load_positions] = x[:, :m], x[:, m:]
        return p @ downstream.T, q @ downstream.T

    @classmethod
    def fit(
        cls,
        x: np.ndarray,
        r: np.ndarray,
        downstream: np.ndarray,
        load_positions: np.ndarray,
        observed: np.ndarray | None = None,
    ) -> BranchCorrection:
        """Fit on corrections r (n, k) at loads x (n, 2m); `observed` (n, k) bool: which readings
        exist (None: all; r must be 0 where one does not)."""
        n, k = r.shape
        downstream = np.asarray(downstream, dtype=np.float64)
        observed = np.ones((n, k), dtype=bool) if observed is None else observed
        fp, fq = cls.flows(x, downstream, load_positions)
        path = downstream.T  # [j, c]: branch c is on bus j's path
        flows = np.concatenate([fp, fq], axis=1)  # (n, 2k)
        every = observed.all(axis=0)  # buses read in every row: their share of the gram in one product
        on_path = np.concatenate([path, path], axis=1)  # (k, 2k): feature c of bus j is on its path
        paths = on_path[every].T @ on_path[every]
        gram_flows = paths * (flows.T @ flows)
        for j in np.flatnonzero(~every & observed.any(axis=0)):  # buses read in some rows
            seen = flows[observed[:, j]]
            gram_flows += np.outer(on_path[j], on_path[j]) * (seen.T @ seen)
        with_offset = (on_path * (observed.astype(np.float64).T @ flows)).sum(axis=0)  # (2k,)
        gram = np.block(
            [[gram_flows, with_offset[:, None]], [with_offset[None, :], np.array([[float(observed.sum())]])]]
        )
        ra = r @ path  # (n, k): sum over the buses below c of their correction
        rhs = np.concatenate([(fp * ra).sum(0), (fq * ra).sum(0), [r.sum()]])
        rows = int(observed.sum())
        dof = max(rows - 1, 1)
        # each feature standardised as if every bus were read in every row, so a branch no meter sees
        # keeps the prior an average branch has (not one scaled by nothing)
        full_diag = np.append(on_path.sum(axis=0) * np.square(flows).sum(axis=0), n * k) / (n * k)
        # a branch no load in the context ever flows through gets the typical branch's scale (all-zero
        # loads: unit scale), so its prior stays finite in physical units
        flowing = full_diag[:-1][full_diag[:-1] > 0]
        typical = float(np.median(flowing)) if flowing.size else 1.0
        full_diag[:-1] = np.where(full_diag[:-1] > UNSEEN_FLOW * typical, full_diag[:-1], typical)
        scale = 1.0 / np.sqrt(np.maximum(full_diag, np.finfo(np.float64).tiny))
        gram_s, rhs_s = gram * scale[:, None] * scale[None, :], rhs * scale
        rows = n * k  # the penalty's scale: as for a fully read context (the prior is per branch, not per reading)
        total = float(np.square(r).sum())
        best: tuple[float, np.ndarray, np.ndarray, float] | None = None
        for prior in BRANCH_PRIOR_GRID:  # profile evidence, the noise variance maximised out
            penalty = np.full(len(rhs), prior * rows)
            penalty[-1] = OFFSET_PENALTY * rows  # the offset is (nearly) unpenalised
            try:
                chol = np.linalg.cholesky(gram_s + np.diag(penalty))
            except np.linalg.LinAlgError:  # too weak a prior for what the readings leave undetermined
                continue
            theta = cho_solve((chol, True), rhs_s)
            energy = max(total - float(rhs_s @ theta), np.finfo(np.float64).tiny)
            evidence = 0.5 * np.log(penalty[:-1]).sum() - np.log(np.diag(chol)).sum() - 0.5 * dof * np.log(energy)
            if best is None or evidence > best[0]:
                best = (evidence, chol, theta, energy)
        assert best is not None
        _, chol, theta, energy = best
        noise_var = energy / dof
        # covariance noise_var (C C^T)^-1 = L L^T with L = sqrt(noise_var) C^-T
        factor = np.sqrt(noise_var) * solve_triangular(chol, np.eye(len(rhs)), lower=True).T
        return cls(downstream.astype(np.float64), load_positions, scale, theta, factor, noise_var)

    def posterior(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std (m, k) of the correction at load rows x (m, 2m).

        A bus's feature row sums its path's branch flows, so with the covariance's factor L its
        variance is |sum over the path of (P_c L_P[c] + Q_c L_Q[c]) + L_1|^2: accumulated down the
        tree from the substation, one bus at a time (m k p work, not m k^2 p)."""
        fp, fq = self.flows(x, self.downstream, self.load_positions)
        k = self.downstream.shape[0]
        weights = self.scale * self.theta
        mean = (fp * weights[:k] + fq * weights[k : 2 * k]) @ self.downstream + weights[-1]
        rows = self.scale[:, None] * self.factor  # raw features' rows of L
        depth = self.downstream.sum(axis=0)  # buses on each bus's path, itself included
        parent = np.where(self.downstream > 0.5, depth[:, None], -1.0)
        np.fill_diagonal(parent, -1.0)
        above = parent.argmax(axis=0)  # the deepest strict ancestor
        has_parent = parent.max(axis=0) > 0
        var = np.empty_like(mean)
        for start in range(0, x.shape[0], QUERY_BLOCK):
            block = slice(start, start + QUERY_BLOCK)
            along = np.empty((fp[block].shape[0], k, rows.shape[1]))
            for j in np.argsort(depth, kind="stable"):
                step = fp[block, j, None] * rows[j] + fq[block, j, None] * rows[k + j]
                along[:, j] = step + (along[:, above[j]] if has_parent[j] else rows[-1])
            var[block] = np.square(along).sum(axis=-1)
        return mean, np.sqrt(var)


class NetworkFitMethod(Method):
    """The network model's power flow plus a correction fitted on the context: one per branch
    shared by all buses below it, then what each bus still shows (module docstring)."""

    accepts_missing = True  # NaN in context x (unmetered load) and y (bus not read): see fit

    name = "network model + context correction"

    def __init__(
        self,
        voltage_model: VoltageModel,
        downstream: np.ndarray,
        load_positions: np.ndarray,
        typical_loads: np.ndarray | None = None,
    ):
        self.voltage_model = voltage_model
        self.downstream = np.asarray(downstream, dtype=np.float64)
        self.load_positions = np.asarray(load_positions, dtype=np.int64)
        self.typical_loads = None if typical_loads is None else np.asarray(typical_loads, dtype=np.float64)
        self.linear = BayesianLinearRegression()

    def fit(
        self, context_x: np.ndarray, context_y: np.ndarray, typical_loads: np.ndarray | None = None
    ) -> NetworkFitted:
        """Fit on a context whose unmeasured values are NaN: a load never or not always metered takes
        its typical value (`typical_loads` (d,), else the network's base loads: a pseudo-measurement),
        a voltage not read is simply absent (the network model stands in for it)."""
        x, y = check_context(context_x, context_y, missing=True)
        typical = self.typical_loads if typical_loads is None else np.asarray(typical_loads, dtype=np.float64)
        unmetered = np.isnan(x)
        if unmetered.any():
            if typical is None or typical.shape != (x.shape[1],):
                raise InputValidationError("context.x", "a load is not metered (null) and no typical values are known")
            x = np.where(unmetered, typical[None, :], x)
        read = ~np.isnan(y)
        if not read.any():
            raise InputValidationError("context.y", "no voltage is read in any row", "at least one reading")
        v = _solved(self.voltage_model, x, "context.x")
        if v.shape != y.shape:
            raise InputValidationError("context.y", f"expected {v.shape[1]} buses per row, got {y.shape[1]}")
        k = y.shape[1]
        r = np.where(read, y - v, 0.0)
        branches = None
        if k <= MAX_BRANCH_BUSES:
            branches = BranchCorrection.fit(x, r, self.downstream, self.load_positions, read)
        shared = branches.posterior(x)[0] if branches is not None else np.zeros_like(r)
        per_bus = self.linear.fit(self._features(x), np.where(read, r - shared, 0.0))
        probe = self.linear.fit(
            x, v
        )  # linear in the loads: its miss measures the nonlinearity a correction must follow
        own = posterior(per_bus, self._features(x), readings=False)
        keep = _positive_part(own.mean, own.sigma, read)
        fitted_r = shared + keep * own.mean
        count = np.maximum(read.sum(axis=0), 1)
        centre = np.where(read, fitted_r, 0.0).sum(axis=0) / count
        spread_r = np.sqrt(np.where(read, np.square(fitted_r - centre), 0.0).sum(axis=0) / count)
        # a context whose loads barely move shows nothing of the feeder's response: share taken as at most
        # SHARE_CAP, its response as at least RESPONSE_FLOOR_PU (identical rows would divide by 0)
        share = np.minimum(spread_r / np.maximum(v.std(axis=0), RESPONSE_FLOOR_PU), SHARE_CAP)
        # every bus's losses flow through the branches above it: the largest share anywhere counts everywhere
        return NetworkFitted(
            branches, per_bus, keep, probe, float(share.max()), simultaneous_factor(k), read.mean(axis=0)
        )

    def _features(self, x: np.ndarray) -> np.ndarray:
        """The per-bus stage's inputs: the loads and every branch's squared flows (DistFlow's
        second-order terms, from the network's own tree), so a correction may bend as the losses do."""
        fp, fq = BranchCorrection.flows(x, self.downstream, self.load_positions)
        return np.concatenate([x, fp * fp, fq * fq, fp * fq], axis=1)

    def predict(self, fitted: NetworkFitted, query_x: np.ndarray) -> GaussianPredictive:
        q = check_queries(query_x, d=self.load_positions.shape[0] * 2)
        v = _solved(self.voltage_model, q, "queries")
        shared, shared_std = (
            fitted.branches.posterior(q) if fitted.branches is not None else (np.zeros_like(v), np.zeros_like(v))
        )
        features = self._features(q)
        r = posterior(fitted.per_bus, features, readings=False)
        probe_error = posterior(fitted.probe, q, readings=False).mean - v
        model_error = MODEL_ERROR_GAIN * fitted.share * np.abs(probe_error)
        dropped = (1.0 - fitted.keep) * r.mean  # what the positive-part factor left out may be signal after all
        epistemic = np.square(shared_std) + np.square(r.sigma) + np.square(dropped)
        spread = np.sqrt(np.square(fitted.simultaneous) * epistemic + np.square(model_error))
        return GaussianPredictive(v + shared + fitted.keep * r.mean, np.maximum(spread, SPREAD_FLOOR_PU))


def _positive_part(fitted: np.ndarray, std: np.ndarray, read: np.ndarray) -> np.ndarray:
    """(k,) the share of each bus's fitted values (n, k) that is signal: 1 - (their posterior
    variance) / (their mean square) over the rows where it is read, at least 0 (0 where never read).
    A per-bus stage fitted to meter noise alone (the model is right there) is dropped instead of adding
    its intercept's sigma / sqrt(n) error; one fitted to a real mismatch is kept whole."""
    count = np.maximum(read.sum(axis=0), 1)
    signal = np.where(read, np.square(fitted), 0.0).sum(axis=0) / count
    noise = np.where(read, np.square(std), 0.0).sum(axis=0) / count
    keep: np.ndarray = np.clip(1.0 - noise / np.maximum(signal, np.finfo(np.float64).tiny), 0.0, 1.0)
    return np.where(read.any(axis=0), keep, 0.0)


def general_card(max_context: int) -> dict[str, Any]:
    return width_free_card(
        NAME,
        "the network's own AC power flow plus a correction fitted on the context: one per branch, shared by "
        "every bus below it, then per bus (Bayesian linear, maximum evidence); the spread is the correction's "
        "posterior (for all buses at once) plus the network-model error a linear correction misses, which "
        "grows off the context (models.network_fit)",
        "network power flow",
        max_context,
    )


def card_for(network: Any, max_context: int) -> dict[str, Any]:
    return on_network(general_card(max_context), network)


def method_for(network: Any) -> NetworkFitMethod:
    from gridsim.api import VoltageModel as NetworkVoltages
    from gridsim.tree import downstream

    return NetworkFitMethod(NetworkVoltages(network), downstream(network), network.load_positions, network.base_x)

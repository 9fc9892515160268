"""network-fit's branch stage: one correction per branch, shared by every bus below it (models.network_fit).

DistFlow's voltage equation in s = |V|^2 / 2 is linear in the branches' impedances: an error a_b (q_b)
in branch b's resistance (reactance) moves s at every bus below b by its P (Q) flow times the error.
With one prior for every branch's *relative* error (features standardised by the branch's own
impedance), a meter pins the branches on its path (its readings' response to each load is the
impedance that load's path shares with it), a branch no meter lies below keeps the prior, and the
posterior over branches is joint, so a bus's std says what the meters leave open. A branch may also carry a tap at
its head (a regulator's or off-load tap's fixed step t: every bus below moves by (t^2 - 1) |V_head|^2 / 2), fitted
only where the evidence for steps beats the impedances alone and the step found is one a device makes
(TAP_MIN_STEP): read as an impedance error instead, a +1.25 % regulator on IEEE 33 needed ~300 % on its line and
grew with the load. The prior's size
and the reading noise are set by maximum evidence, the noise no smaller than the power flow's accuracy (a
context that excites no branch keeps a prior as wide as its readings allow, at most MAX_RELATIVE_ERROR).
Where some bus is never read, the readings are trusted no closer than the linearisation's share of the
correction (LINEARISATION_SHARE: what it misses is systematic and does not average out), and a bus no meter
reads gets the held-out meters' measure of what the posterior still understates (`_heldout_factor`) and that
share as its least std.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import cho_solve, solve_triangular
from scipy.stats import chi2

from models.linear import _one_blas_thread

logger = logging.getLogger(__name__)

# The branch stage's design as `_bus_rows` reads it: flows (n, 3k), each bus's weighed path (k, 3k), which readings
# exist (n, k), the corrections (n, k), the features' scale, each bus's root weight (k,), the active features.
Design = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]

# Prior precision grid of the branches' relative errors (times the branches' mean weight) searched by evidence.
BRANCH_PRIOR_GRID = tuple(10.0**e for e in np.arange(-14.0, 8.5, 0.5))
# Prior correlation of a branch's resistance and reactance errors, searched by evidence with the prior's size: a
# line's length wrong in the map moves both alike (a conductor's temperature moves r alone, a wrong type either), and
# where the readings tell the two apart poorly (P and Q flows moving together) a correlated prior spends one unknown
# per branch there rather than two.
CORRELATION_GRID = (0.0, 0.9, 0.99, 0.999, 0.9999, 0.99999)
# A correlation is taken only where its log evidence beats none by this much (about 20:1 odds): on IEEE 33 read with
# noise alone (the model right) the best of the grid gained 0.04, and taken it made one of five answers at 1.3-1.5x
# load 40 % worse; lines off in length gained 49-78.
CORRELATION_EVIDENCE = 3.0
# The branches' relative errors' prior std is at most this: a line twice its recorded length is a wrong map.
MAX_RELATIVE_ERROR = 0.5
# Penalty grid (times the taps' mean weight) of a constant offset below each branch (a tap or regulator's
# fixed step) searched by evidence once the impedances' prior is chosen.
TAP_PRIOR_GRID = tuple(10.0**e for e in np.arange(-6.0, 10.5, 1.0))
# Once that grid has placed the taps, their penalty is chosen again by evidence among these weaker ones too. The grid's
# floor decides where a step is (a floor this weak let steps fit anything: IEEE 33 with 8 of 32 buses metered and
# lines 0.7-1.3 off took 19-26 taps and its unmetered buses erred 10x the model's error), but a step found is no small
# correction, and its penalty's cost (theta' P theta) is counted in the readings' noise (`energy`): held at the
# floor, a +1.25 % regulator read exactly on IEEE 33 made the branch stage's noise 5.7e-6 (its fit's misfit 2e-8-4e-7),
# its posterior std at 1.3-1.5x load 370x what the evidence's own choice gives, and network-fit's intervals there and
# at PV export 40-90x the width that just covers (2.0-3.1x with it; the step's estimate and every bus's cover kept).
TAP_WEAKER_GRID = tuple(10.0**e for e in np.arange(-14.0, -6.5, 1.0))
# The least step a tap is fitted for: (t^2 - 1) / 2 for a tap ratio t, about the step itself; 0.1 % is below any
# device's (a voltage regulator's step is 0.625 %, a distribution transformer's 2.5 %), and impedance errors on
# IEEE 33 (lines 0.7-1.3 off, readings noise 0-1e-3 p.u.) found steps under 5e-6 where the evidence liked any. A step
# the evidence does not tell from an impedance error (a 0.2-0.3 % regulator under readings noise 1e-3 with loads
# within +-10 %) gets none and is read as that error.
TAP_MIN_STEP = 1e-3
# Where taps on every branch at once split a step along a chain, each of this many branches with the largest share
# is tried alone (`_one_tap`).
ONE_TAP_TRIES = 3
# The prior precision of the context-wide levels (`BranchCorrection.fit`'s `levels`), in their mean information,
# searched by evidence beside none at all (np.inf: no level departs).
LEVEL_PRIOR_GRID = tuple(10.0**e for e in np.arange(-8.0, 4.5, 1.0))
# A group of levels is fitted only where its log evidence beats none by this much: on IEEE 33 with half its load buses
# never metered and the other half's level shown right, the best level prior gained 0-11 (lines 0.7-1.3 off, or as
# modelled; readings exact or noise 1e-5; taken, one context's answers were 5x further off); with the unmetered half
# at 1.3x its guess, 70-1100 read exactly, 24 under readings noise 1e-3 (at 30 it was not taken: 6e-3 p.u. off).
LEVEL_EVIDENCE = 15.0
# Where the readings' own noise (models.pseudo_errors' estimate beside the guesses' errors, p.u.) is at least
# LEVEL_NOISY_PU, far above the linearised models' misfit that inflates the evidence of exact readings (~1e-6), the
# margin is LEVEL_EVIDENCE_NOISY (about 20:1): under noise 1e-4-1e-3 no level departing gained 0-1.3, a 1.3x or 0.5x
# level 4.4-28 (at 15: 5e-3-1e-2 p.u. off, not held). Not the branch stage's misfit: a level itself, readings missing
# or a user's typical values off inflate that, and levels taken on it erred (20 % of the readings null: 3 of 8 cells).
LEVEL_NOISY_PU, LEVEL_EVIDENCE_NOISY = 5e-5, 3.0
# Queries per block for the posterior variance (memory ~ QUERY_BLOCK * k * 2k floats).
QUERY_BLOCK = 256
# The offset's penalty per reading: (nearly) flat, as a voltage set point is not small.
OFFSET_PENALTY = 1e-12
# First-order DistFlow in the impedance errors misses up to about this share of the correction (the errors'
# squares, the losses they move in turn, shunts): on IEEE 33 with lines 0.7-1.3 off, buses between meters
# erred 1-4 % of their correction with 2e-6 p.u. residuals at the meters; at 2 % a 10 %-metered case still
# covered 1 % of its worst bus, at 5 % every IEEE 33 and SimBench 1-MV-rural case of bench/sparse_meters.py
# covered >= 0.8 with the unread buses' MAE 5-30 % higher than at 2 %.
LINEARISATION_SHARE = 0.05
# Readings are trusted no closer than this (p.u.): the network model's power flow and a reference solver agree
# to ~1e-9. Without it a context the model explains exactly (a feeder with no load draws no current, so its
# readings say nothing of any impedance) made the noise and with it every branch's prior variance 0: answers
# 1e-3 p.u. off at 2e-9 spread where such a context was all there was.
READING_FLOOR_PU = 2e-9
# A context where no branch's error of MAX_RELATIVE_ERROR would move the readings' sum of squares by more than this
# many noise variances excites nothing (BranchCorrection.fit): 20 rows of 1e-8 MW loads on IEEE 33 give 30, 1e-9 MW
# 0.3; the least of bench/accuracy_v3.py's contexts whose evidence rose to the grid's end ~9,500 (1-LV-rural1, the
# year's first 500 steps, readings noise 1e-3 p.u.).
UNSEEN_SIGNAL = 100.0
# Held-out meters (at most this many, spread over the metered buses) that calibrate unmetered buses' spread.
MAX_HELDOUT = 12
# A bus's readings are suspect (`_suspect_readings`) where their constant departure from what the other meters and
# the feeder's physics predict stands out beyond what chance gives on any of the buses checked: at most this chance
# of flagging an honest meter on a feeder its model describes.
SUSPECT_FALSE_FLAG = 0.05
# Suspect meters are set aside one at a time (the worst first: its pull on its neighbours' fit goes with it), at
# most this many.
MAX_SUSPECT = 4
# Offsets no larger than this (in |V|^2 / 2, about p.u.) are named by no test: far below any meter's class accuracy
# (readings noise 1e-5 p.u. named a -2.3e-7 offset on SimBench 1-LV-rural1).
SUSPECT_FLOOR = 1e-5
# Sets of taps tested apart per round of the check (each one more factorisation of the branch stage's equations).
SEPARATE_TESTS = 8


@dataclass(frozen=True)
class Solved:
    """One candidate fit of the branch stage: its log evidence, the Cholesky factor of its penalised normal
    equations, its mean on the active features, the readings' energy left, the penalties, the active features."""

    evidence: float
    chol: np.ndarray
    theta: np.ndarray
    energy: float
    penalty: np.ndarray
    active: np.ndarray
    rho: float  # the resistance and reactance errors' prior correlation


def _penalty_matrix(penalty: np.ndarray, k: int, rho: float) -> np.ndarray:
    """The prior's precision on the active features: diagonal `penalty`, but each branch's resistance and reactance
    errors (features b and k + b, both always active) correlated `rho` at the same marginal variance."""
    matrix = np.diag(penalty)
    if rho:
        b = np.arange(k)
        scaled = penalty[:k] / (1.0 - rho * rho)
        matrix[b, b], matrix[k + b, k + b] = scaled, penalty[k : 2 * k] / (1.0 - rho * rho)
        matrix[b, k + b] = matrix[k + b, b] = -rho * np.sqrt(scaled * penalty[k : 2 * k] / (1.0 - rho * rho))
    return matrix


def _one_tap(
    at: Callable[[float, np.ndarray, float], Any], prior: float, none: Any, tap: float, steps: np.ndarray, rho: float
) -> np.ndarray:
    """(k,) the step of one tap alone where taps on every branch at once (`steps`) split a step between the branches
    of a chain and none reached TAP_MIN_STEP: at each of the ONE_TAP_TRIES branches with the largest share, alone at
    penalty `tap` or any weaker one (TAP_WEAKER_GRID), the one of best evidence if it beats `none` (the fit without
    taps; `at`: the fit at a prior, taps and correlation). Zeros where none does. IEEE 33 with a +1.25 % regulator,
    half its load buses unmetered (their loads taken at typical values, so their flows barely vary) and exact
    readings: 0.08 %, 0.06 % and 0.03 % on three branches in a row, no tap placed, a 480 % impedance error fitted
    instead, 2.3e-3 p.u. off at 1.3-1.5x load and no bus held (2 of 10 contexts; at `tap` alone the impedance still
    took 15/16 of the step)."""
    k = steps.shape[0]
    best, found_steps = none, np.zeros(k)
    for branch in np.argsort(-steps)[:ONE_TAP_TRIES]:
        if steps[branch] <= 0.0:
            continue
        for penalty in (tap, *TAP_WEAKER_GRID):
            alone = np.full(k, np.inf)
            alone[branch] = penalty
            found = at(prior, alone, rho)
            if found is not None and found.evidence > best.evidence:
                step = np.zeros(k)
                step[branch] = abs(float(found.theta[2 * k]))  # the one tap's standardised step (its scale is 1)
                best, found_steps = found, step
    return found_steps


def head_buses(downstream: np.ndarray) -> np.ndarray:
    """(k,) the output bus each bus's branch leaves (its deepest strict ancestor), -1 for the substation."""
    depth = downstream.sum(axis=0)  # buses on each bus's path, itself included
    ancestors = np.where(downstream > 0.5, depth[:, None], -1.0)
    np.fill_diagonal(ancestors, -1.0)
    heads: np.ndarray = np.where(ancestors.max(axis=0) > 0, ancestors.argmax(axis=0), -1)
    return heads


def flows(x: np.ndarray, downstream: np.ndarray, load_positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P and Q (n, k) through the branch into every output bus, lossless, from load rows x (n, 2m)."""
    m, k = len(load_positions), downstream.shape[0]
    p, q = np.zeros((x.shape[0], k)), np.zeros((x.shape[0], k))
    p[:, load_positions], q[:, load_positions] = x[:, :m], x[:, m:]
    return p @ downstream.T, q @ downstream.T


@dataclass(frozen=True)
class BranchCorrection:
    """s[t, j] = c + sum over branches b on bus j's path of (a_b F_b[t] + q_b G_b[t]), s = (y^2 - V^2) / 2:
    DistFlow's voltage equation, where an error a_b (q_b) in branch b's resistance (reactance) adds
    its P (Q) flow times the error (F, G: the model's flows with losses, less the loss term's own share),
    one correction per branch shared by every bus below it, fitted jointly on all buses' readings."""

    downstream: np.ndarray  # (k, k) float: [c, j] = 1 where bus j is c or below it
    scale: np.ndarray  # (3k + 1,) raw feature -> standardised feature factor (the branch's impedance; 1 for taps)
    theta: np.ndarray  # (3k + 1,) posterior mean on standardised features [P, Q, taps, 1]: relative errors, steps
    factor: np.ndarray  # (a, a) the active features' L with L L^T their posterior covariance
    noise_var: float  # the readings' variance around the fitted correction (meter noise plus what it misses)
    system: np.ndarray  # (a, a) the active features' penalised normal equations: covariance = noise_var system^-1
    prior_var: float  # every branch's relative error's prior variance
    unseen: float  # the std's factor on a bus no meter reads (held-out meters' error over their std, >= 1)
    unseen_floor: float  # and the least std there: the linearisation's share of the correction (0: all read)
    taps: np.ndarray  # (k,) each branch's tap penalty (np.inf: no tap at its head; TAP_MIN_STEP)
    active: np.ndarray  # (a,) the features fitted: every impedance, the tapped branches' taps, the offset
    prior: float  # the impedances' penalty as chosen, in the branches' mean weight (`fit`'s `prior`)
    correlation: float  # each branch's resistance and reactance errors' prior correlation as chosen
    # (k,) each bus's readings' constant departure in s from what the others predict, where it stands out as no
    # chance departure does (a biased meter, or a step only its readings see; `_suspect_readings`), else 0
    suspect: np.ndarray | None = None
    # (e,) the context-wide unknowns beside the branches (`fit`'s `levels`) as fitted, in the units of its columns, and
    # (k,) what they move each bus's s by at the context rows; None: none taken
    level_fit: np.ndarray | None = None
    level_shift: np.ndarray | None = None  # (n, k) where the levels move each row by its own (`fit`'s `level_rows`)
    # the readings' log evidence under this fit's model (its prior, levels and the readings' relative precisions; the
    # noise variance maximised out), comparable between fits of the same readings however they weigh them: the
    # weights' log determinant counted (`_log_weights`). NaN: not measured
    evidence: float = float("nan")

    @property
    def tapped(self) -> np.ndarray:
        """(k,) bool: the branches fitted with a tap at their head."""
        tapped: np.ndarray = np.isfinite(self.taps)
        return tapped

    @property
    def tap_halves(self) -> np.ndarray:
        """(k,) each branch's fitted tap as (t^2 - 1) / 2 for its ratio t, 0 where it has none."""
        k = self.taps.shape[0]
        halves: np.ndarray = self.theta[2 * k : 3 * k] * self.scale[2 * k : 3 * k]  # 0 untapped (or its centre)
        return halves

    def rows(self, j: int, fp: np.ndarray, fq: np.ndarray, head: np.ndarray) -> np.ndarray:
        """(n, a) bus j's standardised active feature rows at branch inputs fp, fq, head (n, k)."""
        path = self.downstream[:, j]
        on_path = np.concatenate([path, path, path, [1.0]])
        features = np.concatenate([fp, fq, head, np.ones((fp.shape[0], 1))], axis=1)
        rows: np.ndarray = (features * on_path * self.scale)[:, self.active]
        return rows

    @classmethod
    @_one_blas_thread
    def fit(
        cls,
        fp: np.ndarray,
        fq: np.ndarray,
        head: np.ndarray,
        r: np.ndarray,
        downstream: np.ndarray,
        impedance: np.ndarray,
        observed: np.ndarray | None = None,
        heldout: bool = True,
        weights: np.ndarray | None = None,
        taps: np.ndarray | None = None,
        prior: float | None = None,
        check_readings: bool = False,
        centre: np.ndarray | None = None,
        correlation: float = 0.0,
        levels: np.ndarray | None = None,
        level_evidence: float = LEVEL_EVIDENCE,
        level_groups: np.ndarray | None = None,
        level_rows: np.ndarray | None = None,
    ) -> BranchCorrection:
        """Fit on corrections r (n, k) at branch inputs fp, fq, head (n, k); `impedance` (2k,): each branch's
        drop per MW and per MVAr; `observed` (n, k) bool: which readings exist (None: all; r is 0 where not);
        `heldout`: measure `unseen` (where some bus is never read); `weights` (k,): each bus's readings'
        precision relative to the others' (None: alike), or (k, k) where their errors are correlated across buses
        (`_normal_equations`); `taps` (k,): each branch's tap penalty as an earlier fit
        of the same feeder found them (its `taps`: refits with the losses it moved, its probe), None: found here;
        `prior`: with `taps`, the impedances' prior as an earlier fit chose it (its `prior`), taken as it is with
        the taps' penalties (an impedance probe regularised as the fit it mimics), None: chosen here; `correlation`:
        with `prior`, the resistance and reactance errors' prior correlation that fit chose (else chosen here);
        `check_readings`: find the buses whose readings depart as no chance departure does (`suspect`);
        `centre` (3k + 1,): where the prior is centred, in `theta`'s terms (None: at 0, the model as recorded). A fit
        about a network with an earlier fit's errors applied (models.network_fit's relinearised pass) centres it on
        the recorded model, not on that fit: centred there, the prior would count the readings twice (its mean is
        their fit), and the posterior would be narrower than its errors. A tap not fitted stays at its centre.
        `levels` (k, e): what each of e unknowns the same in every context row moves every bus's s by (an unmetered
        customer class's level: models.network_fit), fitted beside the branches with a prior per group chosen by
        evidence (`level_groups` (e,): each column's group, 0 up; None: one group) and integrated out of their
        posterior (`level_shift`: their fitted move of each bus); a query does not carry them. A group is taken where
        its log evidence beats none by `level_evidence`. `level_rows` (n, e): how far each level moves each row, its
        column times that (a class's level where its guesses follow a profile); None: 1 in every row."""
        n, k = r.shape
        downstream = np.asarray(downstream, dtype=np.float64)
        observed = np.ones((n, k), dtype=bool) if observed is None else observed
        start = np.zeros(3 * k + 1) if centre is None else np.asarray(centre, dtype=np.float64)
        if start.any():  # fitted as the departure from the centre, whose prior is then centred at 0
            weights_c = (
                np.concatenate([np.maximum(np.asarray(impedance, dtype=np.float64), 0.0), np.ones(k + 1)]) * start
            )
            shift = (fp * weights_c[:k] + fq * weights_c[k : 2 * k] + head * weights_c[2 * k : 3 * k]) @ downstream
            r = np.where(observed, r - shift - weights_c[-1], 0.0)
        flows = np.concatenate([fp, fq, head], axis=1)  # (n, 3k)
        # (k, 3k): feature c of bus j is on its path
        on_path = np.concatenate([downstream.T, downstream.T, downstream.T], axis=1)
        # a later group of levels counts only what the first (the classes') cannot move: each customer's own level
        # otherwise took its class's too (IEEE 33 read exactly, the unmetered half at 0.5x: 22 customers' levels at
        # up to 7,000 of their stds, 3.4e-2 p.u. off)
        group = None
        if levels is not None:
            e = np.shape(levels)[1]
            group = np.zeros(e, dtype=np.int64) if level_groups is None else np.asarray(level_groups, dtype=np.int64)
        levels, unmixing = _apart_from_first(levels, group, level_rows)
        gram_all, rhs_all, total_all, root, r = _normal_equations(
            flows, on_path, observed, r, weights, levels, level_rows
        )
        levels_of = _Levels.eliminate(gram_all, rhs_all, total_all, 3 * k, np.inf)  # none yet: the model's own
        gram, rhs, total = levels_of.gram, levels_of.rhs, levels_of.total
        weighed = on_path * root[:, None]
        readings = float(observed.sum())
        dof = max(int(readings) - 1, 1)
        # physics' prior: an impedance error is relative (a line 20 % longer than recorded), so each branch's
        # correction per unit flow is its own impedance times an error of one prior size on every branch
        scale = np.concatenate([np.maximum(np.asarray(impedance, dtype=np.float64), 0.0), np.ones(k + 1)])
        gram_s, rhs_s = gram * scale[:, None] * scale[None, :], rhs * scale
        # the penalty's unit: the branches' mean weight had every bus been read in every row (the prior is
        # per branch, not per reading, so fewer meters must not weaken it)
        full = (on_path.sum(axis=0) * np.square(flows * scale[:-1]).sum(axis=0))[: 2 * k]
        tap_unit = float((on_path[:, 2 * k :].sum(axis=0) * np.square(head).sum(axis=0)).mean())
        # (no flow anywhere, as in a context of no load: the data say nothing of any branch, and the grid's weakest
        # prior is the widest allowed at the noise floor)
        no_flow = READING_FLOOR_PU**2 / (MAX_RELATIVE_ERROR**2 * BRANCH_PRIOR_GRID[0])
        unit = float(full[full > 0].mean()) if (full > 0).any() else no_flow

        systems: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

        def normal_equations(taps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            """The active features with `taps`, their gram and right-hand side (built once per set of taps)."""
            key = np.isfinite(taps).tobytes()
            if key not in systems:
                active = np.concatenate([np.arange(2 * k), 2 * k + np.flatnonzero(np.isfinite(taps)), [3 * k]])
                systems[key] = (active, gram_s[np.ix_(active, active)], rhs_s[active])
            return systems[key]

        def at(prior: float, taps: np.ndarray, rho: float) -> Solved | None:
            """The fit at this prior on the impedances, correlation `rho` between each branch's two, and `taps` (k,)
            on the taps (np.inf: none at that branch); None where it is singular."""
            active, sub, rhs_a = normal_equations(taps)
            tapped = taps[np.isfinite(taps)]
            penalty = np.concatenate([np.full(2 * k, prior * unit), tapped * tap_unit, [OFFSET_PENALTY * readings]])
            try:
                chol = np.linalg.cholesky(sub + _penalty_matrix(penalty, k, rho))
            except np.linalg.LinAlgError:  # too weak a prior for what the readings leave undetermined
                return None
            theta = cho_solve((chol, True), rhs_a)
            energy = max(total - float(rhs_a @ theta), dof * READING_FLOOR_PU**2)
            log_prior = 0.5 * np.log(penalty[:-1]).sum() - 0.5 * k * np.log1p(-rho * rho)
            evidence = log_prior - np.log(np.diag(chol)).sum() - 0.5 * dof * np.log(energy) + levels_of.evidence
            return Solved(evidence, chol, theta, energy, penalty, active, rho)

        def over_priors(taps: np.ndarray, rho: float) -> tuple[Solved, float]:
            best: Solved | None = None
            for prior in BRANCH_PRIOR_GRID:  # profile evidence, the noise variance maximised out
                found = at(prior, taps, rho)
                if found is None:
                    continue
                if (
                    found.energy / dof > np.square(MAX_RELATIVE_ERROR) * found.penalty[0]
                    and prior != BRANCH_PRIOR_GRID[-1]
                ):
                    continue  # a prior wider than any real impedance error is off
                if best is None or found.evidence > best.evidence:
                    best, chosen = found, prior
            assert best is not None
            return best, chosen

        def search(taps: np.ndarray) -> tuple[Solved, float]:
            """The prior's size and correlation by evidence, a coordinate at a time (the size at no correlation,
            the correlation at that size, the size again at the correlation chosen): a third of a joint grid's
            factorisations, and on IEEE 33 (lines off, alike or apart, noise 1e-5 and 1e-3) the same choice. A
            correlation must beat none by CORRELATION_EVIDENCE."""
            best, chosen = over_priors(taps, 0.0)
            least = best.evidence + CORRELATION_EVIDENCE
            for rho in (r for r in CORRELATION_GRID if r):
                found = at(chosen, taps, rho)
                if found is not None and found.evidence > max(best.evidence, least):
                    best = found
            if best.rho:
                best, chosen = over_priors(taps, best.rho)
            return best, chosen

        # a tap: where the evidence for a step below some branch beats the impedances alone, and the step found is
        # one a tap or regulator makes (TAP_MIN_STEP); only those branches get one, the rest none. Given `taps`, only
        # their branches may have one, their prior found anew (a prior is relative to the readings' noise), or with
        # `prior` too, both as given
        may = np.ones(k, dtype=bool) if taps is None else np.isfinite(np.asarray(taps, dtype=np.float64))
        fixed = None
        if taps is not None and prior is not None:
            fixed = at(float(prior), np.asarray(taps, dtype=np.float64), correlation)  # None: singular, chosen here
        if fixed is not None and taps is not None and prior is not None:
            tap_penalty: np.ndarray = np.asarray(taps, dtype=np.float64)
            best, chosen = fixed, float(prior)
            may = np.zeros(k, dtype=bool)
        else:
            tap_penalty = np.full(k, np.inf)
            best, chosen = search(tap_penalty)
        with_taps, tap = best, np.inf
        for candidate in TAP_PRIOR_GRID if may.any() else ():
            found = at(chosen, np.where(may, candidate, np.inf), best.rho)
            if found is not None and found.evidence > with_taps.evidence:
                with_taps, tap = found, candidate
        if np.isfinite(tap):
            steps = np.zeros(k)
            steps[may] = np.abs(with_taps.theta[2 * k : -1] * scale[2 * k : 3 * k][may])
            if not (steps >= TAP_MIN_STEP).any():
                steps = _one_tap(at, chosen, best, tap, steps, best.rho)
            if (steps >= TAP_MIN_STEP).any():
                placed = steps >= TAP_MIN_STEP
                tap_penalty = np.where(placed, tap, np.inf)
                # the placed steps' penalty by evidence below the grid too (TAP_WEAKER_GRID)
                kept = at(chosen, tap_penalty, best.rho)
                for weaker in (p for p in TAP_WEAKER_GRID if p < tap):
                    found = at(chosen, np.where(placed, weaker, np.inf), best.rho)
                    if kept is not None and found is not None and found.evidence > kept.evidence:
                        kept, tap_penalty = found, np.where(placed, weaker, np.inf)
                best, chosen = search(tap_penalty)
        if levels is not None and np.shape(levels)[1]:
            # each group's prior by evidence (once any taps are placed: levels took a regulator's
            # step for theirs), at the impedances' prior chosen, then that prior again at them (twice)
            assert group is not None
            information = np.diag(gram_all)[3 * k : -1]
            units = [max(float(np.mean(information[group == g])), 1e-300) for g in range(int(group.max()) + 1)]
            precisions = np.full(len(units), np.inf)

            def eliminated(each: np.ndarray) -> tuple[_Levels, np.ndarray, np.ndarray, float]:
                """The levels at these priors (one per group) integrated out: their terms, the scaled gram and rhs,
                the total."""
                systems.clear()
                out = _Levels.eliminate(gram_all, rhs_all, total_all, 3 * k, each[group])
                return out, out.gram * scale[:, None] * scale[None, :], out.rhs * scale, out.total

            for _ in range(2):
                for g, unit_g in enumerate(units):
                    candidates = []
                    for precision in (np.inf, *(unit_g * p for p in LEVEL_PRIOR_GRID)):
                        levels_of, gram_s, rhs_s, total = eliminated(
                            np.where(np.arange(len(units)) == g, precision, precisions)
                        )
                        found = at(chosen, tap_penalty, best.rho)
                        if found is not None:
                            candidates.append((found.evidence, precision))
                    # a group must beat none by `level_evidence` (none comes first: np.inf)
                    top = max(candidates, default=(0.0, np.inf))
                    none = candidates[0][0] if candidates and not np.isfinite(candidates[0][1]) else -np.inf
                    precisions[g] = top[1] if top[0] > none + level_evidence else np.inf
                    logger.debug("branch stage: level group %d, log evidence over none %.1f", g, top[0] - none)
                levels_of, gram_s, rhs_s, total = eliminated(precisions)
                if not levels_of.count:  # none taken: the equations are the model's own, and so is `best`
                    break
                if fixed is not None and prior is not None:
                    best = at(chosen, tap_penalty, best.rho) or best
                else:
                    best, chosen = search(tap_penalty)
        shown = np.square(MAX_RELATIVE_ERROR) * float(gram_s.diagonal()[: 2 * k].max(initial=0.0)) / (best.energy / dof)
        unseen = shown <= UNSEEN_SIGNAL
        if chosen == BRANCH_PRIOR_GRID[-1] and unseen:
            # the evidence rose to the grid's end, and no branch's error of MAX_RELATIVE_ERROR would move the readings
            # much beyond their noise (UNSEEN_SIGNAL): a context that excites nothing (loads of 1e-9 MW) shows no
            # error because it could not, and the grid's end made it certain of every impedance. The prior is kept
            # where the readings could first show an error (as precise as they are), at most MAX_RELATIVE_ERROR wide.
            limit = at(max(1.0, best.energy / dof / (np.square(MAX_RELATIVE_ERROR) * unit)), tap_penalty, best.rho)
            best = best if limit is None else limit
        chol, theta_active, penalty, active, rho = best.chol, best.theta, best.penalty, best.active, best.rho
        chosen = float(penalty[0] / unit)
        noise_var = best.energy / dof
        system = gram_s[np.ix_(active, active)] + _penalty_matrix(penalty, k, rho)
        # first-order DistFlow in the errors misses a share of the correction (their squares, the losses
        # they move in turn) that is no noise: it does not average out, so the readings are trusted no closer
        # (a bus no meter reads only: where every bus is read, each one's own stage takes up what this misses)
        floor = np.square(LINEARISATION_SHARE) * total / max(readings, 1.0)
        sparse = not observed.any(axis=0).all()
        if floor > noise_var and sparse:
            penalty = penalty * (floor / noise_var)
            penalty[-1] = OFFSET_PENALTY * readings
            system = gram_s[np.ix_(active, active)] + _penalty_matrix(penalty, k, rho)
            chol = np.linalg.cholesky(system)
            theta_active, noise_var = cho_solve((chol, True), rhs_s[active]), floor
        # covariance noise_var (C C^T)^-1 = L L^T with L = sqrt(noise_var) C^-T, on the active features
        factor = np.sqrt(noise_var) * solve_triangular(chol, np.eye(len(active)), lower=True).T
        unseen = 1.0
        design = (flows, weighed, observed, r, scale, root, active)
        if heldout and sparse:  # only a bus no meter reads needs it
            unseen = _heldout_factor(design, system, rhs_s[active], noise_var)
        suspect = None
        if check_readings:  # held to the linearisation's share of what the fit explains: that misfit is no meter's
            systematic = np.square(LINEARISATION_SHARE) * max(total - best.energy, 0.0) / max(readings, 1.0)
            suspect = _suspect_readings(design, system, rhs_s[active], noise_var, systematic, downstream)
        # what it misses is systematic: the offset and the branches a fit leans on absorb it alike, so on a bus
        # no meter reads it is an error of that size however well the meters seem to pin its path
        unseen_floor = float(np.sqrt(floor)) if sparse else 0.0
        prior_var = noise_var / penalty[0]
        theta = start.copy()
        theta[active] += theta_active
        level_fit = level_shift = None
        if levels_of.count and levels is not None:
            raw = np.zeros(3 * k + 1)
            raw[active] = theta_active * scale[active]
            fitted_levels = np.zeros(np.shape(levels)[1])
            fitted_levels[levels_of.free] = levels_of.solved(raw)
            if level_rows is None:
                level_shift = np.asarray(levels, dtype=np.float64) @ fitted_levels
            else:  # (n, k): each row moved as far as its levels run there
                level_shift = (np.asarray(level_rows, dtype=np.float64) * fitted_levels) @ np.asarray(levels).T
            level_fit = unmixing @ fitted_levels  # in the columns given
        return cls(
            downstream,
            scale,
            theta,
            factor,
            noise_var,
            system,
            prior_var,
            unseen,
            unseen_floor,
            tap_penalty,
            active,
            chosen,
            rho,
            suspect,
            level_fit,
            level_shift,
            float(best.evidence) + _log_weights(weights, observed),
        )

    @_one_blas_thread
    def posterior(
        self,
        fp: np.ndarray,
        fq: np.ndarray,
        head: np.ndarray,
        factor: np.ndarray | None = None,
        with_std: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and std (m, k) of the correction at branch inputs fp, fq, head (m, k) (std zeros unless `with_std`);
        `factor`: another posterior's (a meter added: models.meter_placement)."""
        k = self.downstream.shape[0]
        weights = self.scale * self.theta
        mean = (fp * weights[:k] + fq * weights[k : 2 * k] + head * weights[2 * k : 3 * k]) @ self.downstream
        mean += weights[-1]
        if not with_std:
            return mean, np.zeros_like(mean)
        var = np.empty_like(mean)
        for start in range(0, fp.shape[0], QUERY_BLOCK):
            block = slice(start, start + QUERY_BLOCK)
            var[block] = np.square(self.along(fp[block], fq[block], head[block], factor)).sum(axis=-1)
        return mean, np.sqrt(var)

    def along(self, fp: np.ndarray, fq: np.ndarray, head: np.ndarray, factor: np.ndarray | None = None) -> np.ndarray:
        """(m, k, a) each bus's correction at branch inputs fp, fq, head (m, k) as a combination of a standard normal
        a-vector (the posterior is mean + this @ z): the std is its norm, two buses' covariance their dot product.

        A bus's feature row sums its path's branch flows, so with the covariance's factor L its
        row is sum over the path of (P_c L_P[c] + Q_c L_Q[c]) + L_1: accumulated down the
        tree from the substation, one bus at a time (m k p work, not m k^2 p)."""
        k = self.downstream.shape[0]
        rows = np.zeros((len(self.scale), len(self.active)))  # raw features' rows of L (0 for a feature not fitted)
        rows[self.active] = self.scale[self.active, None] * (self.factor if factor is None else factor)
        tapped = self.tapped
        depth = self.downstream.sum(axis=0)  # buses on each bus's path, itself included
        above = head_buses(self.downstream)
        along = np.empty((fp.shape[0], k, rows.shape[1]))
        for j in np.argsort(depth, kind="stable"):
            step = fp[:, j, None] * rows[j] + fq[:, j, None] * rows[k + j]
            if tapped[j]:
                step = step + head[:, j, None] * rows[2 * k + j]
            along[:, j] = step + (along[:, above[j]] if above[j] >= 0 else rows[-1])
        return along

    def determined(self, fp: np.ndarray, fq: np.ndarray, head: np.ndarray, metered: np.ndarray) -> np.ndarray:
        """(k,) 1 - the correction's posterior std over its prior std at inputs fp, fq (rms over the
        rows), in [0, 1]: 1 where the meters pin a bus's correction, 0 where they say nothing of it."""
        k = self.downstream.shape[0]
        _, std = self.posterior(fp, fq, head)
        std = np.where(metered > 0, std, np.hypot(std * self.unseen, self.unseen_floor))
        drops = np.square(np.concatenate([fp, fq], axis=1) * self.scale[: 2 * k])
        prior = np.sqrt(self.prior_var * (drops[:, :k] + drops[:, k:]) @ self.downstream)
        ratio = np.sqrt(np.mean(np.square(std), axis=0) / np.maximum(np.mean(np.square(prior), axis=0), 1e-300))
        return np.asarray(np.clip(1.0 - ratio, 0.0, 1.0))


def _apart_from_first(
    levels: np.ndarray | None, group: np.ndarray | None, rows: np.ndarray | None = None
) -> tuple[np.ndarray | None, np.ndarray]:
    """`levels` (k, e) with every column of a later group less its least-squares fit on the first group's columns,
    and (e, e) what takes a fit in those columns back to the columns given (the same move of every bus). Only columns
    the same in every row count (`rows` (n, e): how far each moves each row; None: all): one that follows a profile
    moves no row as a constant does."""
    if levels is None or group is None:
        return levels, np.zeros((0, 0))
    levels = np.asarray(levels, dtype=np.float64)
    unmixing = np.eye(levels.shape[1])
    constant = np.ones(levels.shape[1], dtype=bool) if rows is None else (np.asarray(rows) == 1.0).all(axis=0)
    first, later = np.flatnonzero((group == 0) & constant), np.flatnonzero((group > 0) & constant)
    if not first.size or not later.size:
        return levels, unmixing
    fit = np.linalg.lstsq(levels[:, first], levels[:, later], rcond=None)[0]  # (first, later)
    out = levels.copy()
    out[:, later] -= levels[:, first] @ fit
    unmixing[np.ix_(first, later)] = -fit
    return out, unmixing


@dataclass(frozen=True)
class _Levels:
    """The branch stage's normal equations with e context-wide levels integrated out (their block eliminated: a
    Schur complement), and what recovers the levels' fit from the branches'."""

    gram: np.ndarray  # (3k + 1, 3k + 1) the flows' and offset's, the levels integrated out
    rhs: np.ndarray
    total: float
    count: int  # e
    inverse: np.ndarray  # (e, e) the levels' own block's inverse
    cross: np.ndarray  # (3k + 1, e) the levels' cross terms with the flows and the offset
    own_rhs: np.ndarray  # (e,)
    evidence: float  # the levels' share of the log evidence: (log |prior| - log |prior + their information|) / 2
    free: np.ndarray  # the levels fitted (the others held at 0), indices into the e given

    @classmethod
    def eliminate(
        cls, gram: np.ndarray, rhs: np.ndarray, total: float, start: int, precision: float | np.ndarray
    ) -> _Levels:
        """From `_normal_equations`'s terms with the levels at [start, start + e) (before the offset, last), each of
        prior `precision` (or (e,) one each) relative to the readings' noise (np.inf: held at 0)."""
        e = gram.shape[0] - start - 1
        keep = np.r_[np.arange(start), gram.shape[0] - 1]
        each = np.broadcast_to(np.asarray(precision, dtype=np.float64), (max(e, 0),))
        free = np.flatnonzero(np.isfinite(each))
        if not free.size:
            none = np.zeros((len(keep), 0))
            return cls(gram[np.ix_(keep, keep)], rhs[keep], total, 0, np.zeros((0, 0)), none, np.zeros(0), 0.0, free)
        own = start + free
        chol = np.linalg.cholesky(gram[np.ix_(own, own)] + np.diag(each[free]))
        inverse = cho_solve((chol, True), np.eye(free.size))
        cross = gram[np.ix_(keep, own)]
        reduced = gram[np.ix_(keep, keep)] - cross @ inverse @ cross.T
        return cls(
            (reduced + reduced.T) / 2.0,
            rhs[keep] - cross @ inverse @ rhs[own],
            total - float(rhs[own] @ inverse @ rhs[own]),
            free.size,
            inverse,
            cross,
            rhs[own],
            0.5 * float(np.log(each[free]).sum()) - float(np.log(np.diag(chol)).sum()),
            free,
        )

    def solved(self, theta: np.ndarray) -> np.ndarray:
        """(e,) the levels' fit given the flows' and offset's raw (unscaled) coefficients `theta` (3k + 1,)."""
        out: np.ndarray = self.inverse @ (self.own_rhs - self.cross.T @ theta)
        return out


def _log_weights(weights: np.ndarray | None, observed: np.ndarray) -> float:
    """Half the log determinant of the readings' precision, `weights` as `_normal_equations` takes them, over the
    `observed` readings: what a fit weighing readings differently must count for its evidence to compare with
    another's (the readings' density carries it; its scale cancels with the noise variance maximised out)."""
    if weights is None:
        return 0.0
    w = np.asarray(weights, dtype=np.float64)
    count = observed.sum(axis=0)
    if w.ndim == 1:
        return 0.5 * float((count * np.log(np.clip(w, 1e-300, None))).sum())
    every = observed.all(axis=0)  # weighed together in every row; the others one by one (`_normal_equations`)
    apart = np.clip(np.diag(w)[~every], 1e-300, None)
    total = float((count[~every] * np.log(apart)).sum())
    if every.any():
        total += observed.shape[0] * float(np.linalg.slogdet(w[np.ix_(every, every)])[1])
    return 0.5 * total


def _normal_equations(
    flows: np.ndarray,
    on_path: np.ndarray,
    observed: np.ndarray,
    r: np.ndarray,
    weights: np.ndarray | None,
    levels: np.ndarray | None = None,
    level_rows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """The branch stage's gram (3k + 1, 3k + 1) and right-hand side on `flows` (n, 3k) and readings r (n, k; 0 where
    not `observed`), the readings' weighted sum of squares, each bus's root weight (k,) and r times it. Feature c of
    bus j at row t is on_path[j, c] * flows[t, c] (and 1 for the offset), so over the buses read in every row the
    gram is (on_path' W on_path) * (flows' flows) in one product, W the buses' precision: `weights` (k,) relative
    precisions, or (k, k) a precision across buses (readings whose errors are correlated: unmetered loads' guesses
    move every bus below them together, models.pseudo_errors), taken over the buses read in every row, its diagonal
    for the others (per bus: a bus read in some rows only). `levels` (k, e): features the same in every row (a
    customer class's level, `BranchCorrection.fit`), placed after the flows' and before the offset: each is a flow of
    1 (or of `level_rows` (n, e) where they move each row by its own) on a path of its own column."""
    n, k = r.shape
    e = 0 if levels is None else levels.shape[1]
    if e:
        flows = np.concatenate([flows, np.ones((n, e)) if level_rows is None else level_rows], axis=1)
        on_path = np.concatenate([on_path, np.asarray(levels, dtype=np.float64)], axis=1)
    every = observed.all(axis=0)
    matrix = weights is not None and np.ndim(weights) == 2
    if weights is None:
        root = np.ones(k)
    else:
        w = np.asarray(weights, dtype=np.float64)
        root = np.sqrt(np.clip(np.diag(w) if matrix else w, 0.0, None))
    weighed, raw, r = on_path * root[:, None], r, r * root
    apart = ~every if matrix else np.ones(k, dtype=bool)  # buses weighed one by one
    together = every & ~apart
    gram_flows = (weighed[every & apart].T @ weighed[every & apart]) * (flows.T @ flows)
    for j in np.flatnonzero(~every & observed.any(axis=0)):  # buses read in some rows
        seen = flows[observed[:, j]]
        gram_flows += np.outer(weighed[j], weighed[j]) * (seen.T @ seen)
    with_offset = (weighed[apart] * ((observed * root)[:, apart].T @ flows)).sum(axis=0)  # (3k,)
    offset = float((observed * np.square(root))[:, apart].sum())
    ra = r[:, apart] @ weighed[apart][:, :k]  # (n, k): sum over the buses below c of their (weighed) correction
    ra_levels = r[:, apart] @ weighed[apart][:, 3 * k :]  # (n, e)
    offset_rhs = float((r * root)[:, apart].sum())
    total = float(np.square(r[:, apart]).sum())
    if together.any():
        omega = np.asarray(weights, dtype=np.float64)[np.ix_(together, together)]
        paths, ones, whitened = on_path[together], np.ones(int(together.sum())), raw[:, together] @ omega
        gram_flows += (paths.T @ omega @ paths) * (flows.T @ flows)
        with_offset += (ones @ omega @ paths) * flows.sum(axis=0)
        offset += n * float(ones @ omega @ ones)
        ra = ra + whitened @ paths[:, :k]
        ra_levels = ra_levels + whitened @ paths[:, 3 * k :]
        offset_rhs += float(whitened.sum())
        total += float((whitened * raw[:, together]).sum())
    gram = np.block([[gram_flows, with_offset[:, None]], [with_offset[None, :], np.array([[offset]])]])
    rhs = np.concatenate([(flows * np.concatenate([np.tile(ra, 3), ra_levels], axis=1)).sum(axis=0), [offset_rhs]])
    return gram, rhs, total, root, r


def _heldout_factor(
    design: Design,
    system: np.ndarray,
    rhs: np.ndarray,
    noise_var: float,
) -> float:
    """How far the branch posterior understates its error on a bus no meter reads: each metered bus in
    turn (at most MAX_HELDOUT) is left out (its readings taken off the normal equations, the prior kept),
    predicted from the others, and its rms error set against its rms posterior std; the largest ratio, at
    least 1. The posterior is exact for a linear feeder; this measures what the linearisation misses where
    a branch's split from its neighbours rests on a few meters (a held-out meter has one meter fewer than
    an unmetered bus has: conservative)."""
    observed = design[2]
    metered = np.flatnonzero(observed.any(axis=0))
    if metered.size > MAX_HELDOUT:
        metered = metered[np.linspace(0, metered.size - 1, MAX_HELDOUT).round().astype(np.int64)]
    worst = 1.0
    for j in metered:
        left = _left_out(design, system, rhs, int(j))
        if left is None:
            continue
        features, chol, theta, target = left
        var = noise_var * np.square(solve_triangular(chol, features.T, lower=True)).sum(axis=0)
        error = target - features @ theta
        worst = max(worst, float(np.sqrt(np.mean(np.square(error)) / max(float(np.mean(var)), 1e-300))))
    return worst


def _left_out(
    design: Design, system: np.ndarray, rhs: np.ndarray, j: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Bus j's readings taken off the penalised normal equations (`system`, `rhs` on the active features; the prior
    kept): its feature rows, the Cholesky factor and mean of the fit without it, and its readings; None where that
    fit is singular."""
    features, target = _bus_rows(design, j)
    fit = _solved(system - features.T @ features, rhs - features.T @ target)
    return None if fit is None else (features, *fit, target)


def _bus_rows(design: Design, j: int) -> tuple[np.ndarray, np.ndarray]:
    """Bus j's rows of the branch stage's normal equations: its active feature rows and its (weighed) readings."""
    flows, weighed, observed, r, scale, root, active = design
    rows = observed[:, j]
    features = np.concatenate([flows[rows], np.ones((int(rows.sum()), 1))], axis=1) * (
        np.append(weighed[j], root[j]) * scale
    )
    return features[:, active], r[rows, j]


def _suspect_readings(
    design: Design, system: np.ndarray, rhs: np.ndarray, noise_var: float, systematic: float, downstream: np.ndarray
) -> np.ndarray:
    """(k,) each bus's readings' constant offset (in s = |V|^2 / 2) beyond what the branch stage explains, where it
    stands out as no chance offset does, 0 elsewhere: a biased meter, or a step (a tap) on its branch that no other
    meter sees. The branch stage absorbs such an offset (a tap on a leaf's branch, or impedance errors bent along a
    bus's path: a 2e-3 p.u. bias on one IEEE 33 meter was answered 2e-3 off at 1/27 of that std). Each metered bus's
    offset is the fit's own estimate of a constant added to that bus alone: its residuals' sum over n - g' S^-1 g,
    for g the sum of its feature rows and S the penalised normal equations (state estimation's largest normalised
    residual, for the bus's mean): with one biased meter the largest z is at that meter, where held-out predictions
    blamed its neighbours (the fit bent along the path). The offset is set against its std, the linearisation's
    misfit (`systematic`, a variance: it does not average out) and the buses' typical offset (1.4826 x the median
    |offset|: a misfit every bus shares is no meter's), and flagged beyond chi2(1) at SUSPECT_FALSE_FLAG / the
    buses checked, where it is over SUSPECT_FLOOR and the metered buses below it and below the taps its test leaves
    out do not depart as much in its test (a step the fit bent around or split over two branches shows at one bus
    most: a regulator, not a meter; a +1.25 % regulator at IEEE 33's 13-14 was fitted as 0.6 % taps at 13 and 14 and
    bus 13 named at -5.5e-3); the worst is set aside (its readings off the equations) and the rest tested again, at
    most MAX_SUSPECT. Taps that can lift one bus
    alone are left out of its test (that meter's offset by another name, `_lifting_alone`): a 2e-3 p.u. bias on
    IEEE 33's last bus was fitted as a 0.22 % tap on its branch, on SimBench 1-LV-semiurb4 buses as a step on its
    branch with the opposite step on each of its children's, or as the offset with the opposite step on every branch
    below; at most SEPARATE_TESTS such sets of taps are tested apart per round (a context of 116 biased meters on a
    350-bus feeder took 43 s against 8 without the check). A meter whose offset the fit can still take up whole
    (n - g' S^-1 g ~ 0) is not told from its branch and is not flagged."""
    flows, weighed, observed, r, scale, root, active = design
    k = observed.shape[1]
    below = np.asarray(downstream > 0.5)
    tap_at = np.where((active >= 2 * k) & (active < 3 * k), active - 2 * k, -1)  # each active feature's tap branch
    # each bus's summed feature rows g (k, a) and readings, without building its rows
    read = observed.astype(np.float64)
    summed = (read.T @ np.concatenate([flows, np.ones((flows.shape[0], 1))], axis=1)) * np.concatenate(
        [weighed, root[:, None]], axis=1
    )
    g_all, totals, counts = (summed * scale)[:, active], (r * read).sum(axis=0), read.sum(axis=0)
    sums = (g_all, totals, counts)
    left: np.ndarray = np.asarray(observed.any(axis=0), dtype=bool)
    offsets = np.zeros(k)
    for _ in range(MAX_SUSPECT):
        shared = _solved(system, rhs)
        if shared is None or left.sum() < 3:  # too few meters to tell one from the rest
            break
        lifting = _lifting_alone(tap_at, below, left)
        solved: dict[bytes, tuple[np.ndarray, np.ndarray] | None] = {b"": shared}
        offset, variance = np.full(k, np.nan), np.full(k, np.nan)
        tested: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray] | None] = {}
        for j in np.flatnonzero(left).tolist():
            own = lifting.get(j, np.zeros(tap_at.shape[0], dtype=bool))
            key = own.tobytes()
            if key not in solved and len(solved) <= SEPARATE_TESTS:
                solved[key] = _solved(system[np.ix_(~own, ~own)], rhs[~own])
            fit = solved.get(key)
            tested[j] = None if fit is None else (own, *fit)
            if fit is not None:  # else singular, or past SEPARATE_TESTS: not tested this round
                offset[j], variance[j] = _offset(fit, g_all[j, ~own], totals[j], counts[j], noise_var)
        checked = np.isfinite(offset)
        if checked.sum() < 3:
            break
        typical = 1.4826 * float(np.median(np.abs(offset[checked])))
        z = np.where(checked, np.abs(offset) / np.sqrt(variance + systematic + typical**2 + 1e-300), 0.0)
        z = np.where(np.abs(np.nan_to_num(offset)) > SUSPECT_FLOOR, z, 0.0)
        for j in np.flatnonzero(z**2 > chi2.isf(SUSPECT_FALSE_FLAG / int(checked.sum()), 1)).tolist():
            entry = tested[j]
            assert entry is not None  # it was tested
            own, chol, theta = entry
            others = left.copy()
            others[j] = False
            # what moved j is a step others feel too, not j's meter, where in j's own test the metered buses below j
            # share its offset (a regulator the fit took as impedance errors), or where leaving out j's taps
            # moves the buses below them as much (a regulator's step split over j's branch and a child's)
            below_j = _departures(below[j] & others, (chol, theta), own, sums, noise_var)
            tapped = below[tap_at[own]].any(axis=0) & others
            moved = _departures(tapped, (chol, theta), own, sums, noise_var) - _departures(
                tapped, shared, np.zeros_like(own), sums, noise_var
            )
            if (below_j.size and float(np.nanmedian(below_j)) * np.sign(offset[j]) >= 0.5 * abs(offset[j])) or (
                moved.size and float(np.sqrt(np.nanmean(np.square(moved)))) >= 0.5 * abs(offset[j])
            ):
                z[j] = 0.0
        worst = int(np.argmax(z))
        if z[worst] ** 2 <= chi2.isf(SUSPECT_FALSE_FLAG / int(checked.sum()), 1):
            break
        offsets[worst], left[worst] = offset[worst], False
        features, target = _bus_rows(design, worst)
        system, rhs = system - features.T @ features, rhs - features.T @ target
    return offsets


def _offset(
    fit: tuple[np.ndarray, np.ndarray], g: np.ndarray, total: float, count: float, noise_var: float
) -> tuple[float, float]:
    """A bus's constant offset beyond the fit (`fit`: its Cholesky factor and mean) and that offset's variance, from
    its summed feature rows g, readings' sum and count (`_suspect_readings`); NaN where the fit can take it up whole."""
    chol, theta = fit
    free = count - float(np.square(solve_triangular(chol, g, lower=True)).sum())
    if free <= 1e-9 * count:
        return float("nan"), float("nan")
    return (total - float(g @ theta)) / free, noise_var / free


def _departures(
    buses: np.ndarray,
    fit: tuple[np.ndarray, np.ndarray],
    drop: np.ndarray,
    sums: tuple[np.ndarray, np.ndarray, np.ndarray],
    noise_var: float,
) -> np.ndarray:
    """The constant offsets (`_offset`) of `buses` (k,) bool under `fit`, the active features `drop` left out of it;
    `sums`: every bus's summed feature rows, readings' sum and count."""
    g_all, totals, counts = sums
    return np.array(
        [_offset(fit, g_all[d, ~drop], totals[d], counts[d], noise_var)[0] for d in np.flatnonzero(buses).tolist()]
    )


def _lifting_alone(tap_at: np.ndarray, below: np.ndarray, left: np.ndarray) -> dict[int, np.ndarray]:
    """Per bus of those `left` to test that some taps can lift alone, (a,) bool: the active features that are
    taps with a share in the combination of constant steps (a tap lifts the buses below it, the offset all) that
    is 1 on that bus and 0 on the rest (`tap_at`: each feature's tap branch, -1 none; `below` [c, j]: j at or below
    c). A tap no other of them lies below is one; so is a step on a bus's branch with the opposite step on each of
    its children's, or the offset with the opposite step on every branch leading away from it. A step its
    neighbours share (a regulator) is in no such combination. One pseudo-inverse for every bus."""
    taps = np.flatnonzero(tap_at >= 0)
    buses = np.flatnonzero(left)
    if taps.size == 0 or buses.size == 0:
        return {}
    steps = np.concatenate([np.ones((buses.size, 1)), below[np.ix_(tap_at[taps], buses)].T.astype(np.float64)], axis=1)
    shares = np.linalg.pinv(steps)  # (1 + taps, buses): column i the least-squares combination for bus i alone
    alone = np.abs(steps @ shares - np.eye(buses.size)).max(axis=0) < 1e-6
    lifting: dict[int, np.ndarray] = {}
    for i in np.flatnonzero(alone & (np.abs(shares[1:]) > 1e-6).any(axis=0)):
        own = np.zeros(tap_at.shape[0], dtype=bool)
        own[taps] = np.abs(shares[1:, i]) > 1e-6
        lifting[int(buses[i])] = own
    return lifting


def _solved(system: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The Cholesky factor of `system` and its solution at `rhs`; None where it is singular."""
    try:
        chol = np.linalg.cholesky(system)
    except np.linalg.LinAlgError:
        return None
    return chol, cho_solve((chol, True), rhs)

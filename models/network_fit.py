"""The feeder's own power flow, corrected by the context: the model that knows what the context cannot show.

Every context names a network (built in or uploaded), so the service can run that network's exact
AC power flow at any loads. The operator's real feeder differs from its model (line impedances,
tap positions, the substation's set point), and readings carry meter noise, so the model's voltages
V(x) are a prior, not the answer. This method fits only what the context shows the model gets wrong,

    y(x) = V(x) + r(x),

in two stages: one correction per branch shared by every bus below it (models.branch_correction: impedance
errors, taps, and an offset that is the substation's set point moved, for which the model is solved again at
the set point the readings show: AtSetPoint), then
per bus, on the loads and the branches' squared flows, by Bayesian linear regression
(models.linear: prior and noise precision by maximum evidence, so r shrinks to nothing when the
readings are noise around the model), kept as far as it is signal and, where the buses together show no
more than noise, only where it stands out beyond what noise alone reaches on the worst of the k buses
(`_positive_part`). Why it is trustworthy where a fit of y alone is not:

- Off the context, V(x) carries every nonlinear term of the power flow exactly (load growth, PV
  reversing flows); only the correction r is extrapolated, and r is small and nearly linear.
- Under meter noise, the fit estimates a correction shrunk toward zero (the model itself), shared
  across the buses below each branch: noise averages out instead of being fitted per bus.
- Sparse meters: the branch stage is DistFlow's, in |V|^2 / 2 (where an impedance error on a branch
  adds its flow times the error; losses, line charging and the losses the errors move counted), with
  one prior for every branch's *relative* impedance error. A meter pins the branches on its path (its readings' response to each load is
  the impedance shared with that load's path); a branch no meter lies below keeps that prior, and
  the posterior over branches is joint, so an unmetered bus's spread says what the meters leave open.

Where the impedance probe (below) shows the first order missing more than the readings pin, the fit is taken again
about the network with its fitted errors, taps and set point applied, its prior centred on the recorded model
(`NetworkFitMethod._relinearised`: a Gauss-Newton step), and that fit answers.

Where loads are guessed (unmetered, at typical values), the guesses' errors move every bus below them together: the
branch stage weighs the readings by the inverse of that covariance across buses, sized by the readings
(models.pseudo_errors), and the per-bus stage is given the readings less what the guesses most likely moved, so
neither takes a guess's error for the feeder's.

A meter whose readings sit a constant offset from what the feeder and every other meter explain, beyond what chance
gives on any bus (models.branch_correction._suspect_readings: a biased meter, or a step only it sees), is named
(`NetworkFitted.reading_offsets`) and set aside: its bus is answered as one no meter reads, the offset kept in its
spread.

The spread per bus and query has two parts. The posterior std of r at the query (the function,
not a new reading: the truth has no meter noise), which grows with the query's distance from the
context; it is shared by every query of a bus (an error in the correction moves them all), so it
is widened to hold for all k buses at once (an interval for the worst bus, not the average one: the 99 %
quantile of the largest |z| over the buses under the posterior's own correlation, from one bus's where one
shared error moves every bus, Bonferroni's at 99 % where each bus errs on its own); on a bus no meter
reads it is also widened by how much held-out meters' errors exceed their posterior std
(models.branch_correction). The per-bus stage counts as the mixture its positive-part factor implies (signal, or reading noise fitted: `_per_bus_variance`).
`NetworkFitted.determined` says per bus how far the meters pin its correction (1 - posterior std /
prior std). And a model-error term the context cannot show (`_model_error`): the impedance probe's
miss, this method fitted on the same context loads to the exact voltages of the network with the
fitted impedance errors applied (models.corrected_network), at each query, where the network model
knows the answer: what first-order DistFlow in those errors misses off the context, taken with the
branch stage alone where the readings' noise hides that misfit from the per-bus stage; beside it a
linear fit's miss of the network model's own voltages e(q) scaled by the per-bus stage's share of the
feeder's response (rho: a model 30 % off in a way no impedance explains leaves a correction 30 % of the
response, whose nonlinear part a linear correction misses); each times MODEL_ERROR_GAIN (second-order
terms scale with the impedances squared: a relative error rho in them is ~2 rho).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import chi2, norm

from models.branch_correction import (
    BRANCH_PRIOR_GRID,
    READING_FLOOR_PU,
    SUSPECT_FLOOR,
    BranchCorrection,
    flows,
    head_buses,
)
from models.calibration import (
    CALIBRATION_LEVEL,
    FAMILY_LEVEL,
    correlated_simultaneous_factor,
    simultaneous_factor,
)
from models.corrected_network import CorrectedNetwork
from models.errors import InputValidationError
from models.linear import BayesianLinearRegression, LinearFit, posterior, posterior_mean
from models.network_voltages import solved
from models.physics_fit import VERSION as VERSION  # built in, as physics-fit
from models.physics_fit import on_network, width_free_card
from models.predictive import GaussianPredictive, Method
from models.pseudo_errors import PseudoErrors, widened_by_readings
from models.validation import check_context, check_queries

NAME = "network-fit"

logger = logging.getLogger(__name__)

# |V| (n, k) of the network model at raw load rows x (n, d); NaN rows where its power flow diverges.
VoltageModel = Callable[[np.ndarray], np.ndarray]

# See the module docstring: the model-error term is MODEL_ERROR_GAIN * rho * |e(q)|.
MODEL_ERROR_GAIN = 2.0
# the chance that meter noise alone has the per-bus stage kept on any bus of a feeder whose model is right
PER_BUS_FALSE_KEEP = 0.05
# Context rows the buses' posterior correlation is taken at (`_simultaneous`).
SIMULTANEOUS_ROWS = 8
# The model's response over the context below this (p.u.) counts as this: a context of identical loads.
RESPONSE_FLOOR_PU = 1e-9
# A per-bus correction at a query beyond PER_BUS_REACH times the largest the answer took at any context row, and beyond
# PER_BUS_LIMIT_PU, is not taken (`NetworkFitMethod.at_queries`): it is the per-bus stage's extrapolation (second-order
# terms grow about 2.25x from the context to 1.5x load; a context's own corrections on the development grids stay
# under 1e-2 p.u.).
PER_BUS_REACH, PER_BUS_LIMIT_PU = 10.0, 0.05
# The correction's share of the response is capped here: beyond, the network model explains nothing.
SHARE_CAP = 10.0
# The smallest spread (p.u.): the network model's power flow and a reference solver agree to ~1e-9.
SPREAD_FLOOR_PU = READING_FLOOR_PU
# Above this many buses the per-branch stage is skipped (its (2k + 1)^2 system grows as k^3 to solve).
MAX_BRANCH_BUSES = 400
# A meter set aside is named where its readings depart from the answer without them by more than this many standard
# errors of their mean (the meter's noise over the root of its readings).
NAMED_Z = 3.0
# Readings' relative precisions (where loads are guessed) are kept within [this, 1 / this].
WEIGHT_RANGE = 1e-3
# Refits with the losses the fitted impedance errors move (one: the next changes nothing that matters).
LOSS_PASSES = 1
# The substation's set point is refitted (AtSetPoint) while the branch stage's offset moves it by more than this
# (p.u.), at most SET_POINT_PASSES times (the second moves it by ~1e-6 on IEEE 33 at 1.03 p.u.).
SET_POINT_TOLERANCE_PU = 1e-4
SET_POINT_PASSES = 2
# The set point moves at most this share of the model's (a wilder offset is no set point: left to the fit).
SET_POINT_RANGE = 0.2
# The fit is taken again about the network with its fitted errors and taps applied (`_relinearised`) where the
# impedance probe's misfit on some bus exceeds this many of the answer's branch posterior std there: the first
# order's miss then moves the answer beyond what the readings pin (IEEE 33 with a regulator or lines 0.7-1.3 off,
# readings noise 1e-5: 2-13; the model exact: at most 0.19).
RELINEARISE_Z = 1.0
# Where loads follow a profile, a fit the readings misfit by more than this many times the answer's is refuted by
# them and does not hedge it (`hedged`): the branch misfit of the feeder held as recorded over that of its errors
# fitted, IEEE 33 on one profile (bench/partial_metering.py's profile case) as recorded, a level departing, read
# exactly 0.06-0.2; with noise 1e-4-1e-3 p.u. 1.0; lines 0.7-1.3 off, no level departing, 4.7-260 exact or at noise
# 1e-4 (1.15-1.45 at 1e-3: hedged).
RECORDED_MISFIT = 2.0
# The recorded feeder's fit answers where its misfit is at most this many times that of the feeder's errors fitted:
# with fewer unknowns it explains the readings as well (under noise both misfit alike: 1.00-1.03 as modelled, noise
# 1e-4-1e-3; lines 0.7-1.3 off at noise 1e-3 1.15-1.45, ~4800 readings, whose misfits' own scatter is ~1 %).
RECORDED_ANSWERS = 1.1
# Where the recorded feeder answers (its model explains the readings), another fit whose log evidence falls short of
# its by more than this is refuted too (odds e^15, as LEVEL_EVIDENCE): under noise the feeder's errors fitted misfit
# the readings no worse (their many unknowns fit the noise) yet the readings' evidence is 1,400-3,200 below the
# recorded feeder's (IEEE 33 on one profile, a level departing, noise 1e-5-1e-3; 16-48,000 on the development grids
# at 1.3x and 0.5x, one 11). Not where the recorded feeder is refuted: the fits left are all unlike the feeder, and
# the evidence then favoured one 8e-3 p.u. off over one 4e-3 off whose gap held it (lines 0.7-1.3 off and a level).
HEDGE_EVIDENCE = 15.0


class AtSetPoint:
    """The network model's voltages with the substation at `ratio` times its set point: a feeder of constant-power
    loads scales exactly, |V|(x; r V0) = r |V|(x / r^2; V0), so the same power flow answers at loads x / r^2."""

    def __init__(self, model: VoltageModel, ratio: float):
        self.model, self.ratio = model, float(ratio)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        v: np.ndarray = self.ratio * np.asarray(self.model(np.asarray(x) / self.ratio**2), dtype=np.float64)
        return v


def at_set_point(model: VoltageModel, ratio: float) -> VoltageModel:
    return model if ratio == 1.0 else AtSetPoint(model, ratio)


@dataclass(frozen=True)
class NetworkFitted:
    """The fitted correction, the probe fit of the model's own voltages, and the widening factors."""

    branches: BranchCorrection | None  # one correction per branch shared by the buses below it (None: too many)
    per_bus: LinearFit  # what each bus's readings still show beyond it
    keep: np.ndarray  # (k,) how much of that per-bus part the answer takes (`_positive_part`)
    # (k,) the odds that it is signal (positive-part James-Stein factor): `keep` where the answer takes it, and where
    # it does not, what the spread still hedges (`_per_bus_variance`)
    signal_odds: np.ndarray
    probe: LinearFit  # V(x) itself, linear on the same context: its miss at a query is e(q)
    share: float  # rho: the fitted correction's variation relative to the model's, largest over buses
    own_share: np.ndarray  # (k,) the same per bus of the per-bus stage's signal alone (what the impedance probe
    # does not cover; per bus, as each bus's stage is its own)
    simultaneous: float  # the epistemic std's factor for a 95 % interval on all k buses at once
    metered: np.ndarray  # (k,) the share of context rows in which each bus's voltage was read
    determined: np.ndarray  # (k,) in [0, 1]: 1 - the correction's posterior std / its prior std, per bus
    branch_misfit: np.ndarray  # (k,) rms of the readings less the branch stage's fit: what the per-bus stage sees
    noise: np.ndarray  # (k,) the readings' noise std as the per-bus stage infers it
    read_rows: np.ndarray  # (k,) context rows that read each bus (at least 1)
    loads_guessed: bool  # some context load was not metered (NaN): it took its typical value
    # (k,) p.u.: each bus's readings' constant departure from what the feeder and every other meter explain, where
    # it stands out as no chance departure does (models.branch_correction._suspect_readings: a biased meter, or a
    # step on its branch only it sees), else 0; the answer follows the readings and its spread holds the other case
    reading_offsets: np.ndarray
    # (k,) p.u.: each meter set aside (named by the test, then the fit redone without it) and its readings' mean
    # departure from that answer, NaN where not set aside; the spread there holds the departure
    set_aside: np.ndarray
    impedance_probe: ImpedanceProbe | None = None  # see NetworkFitMethod._impedance_probe
    set_point: float = 1.0  # the substation's set point the readings show, relative to the model's (AtSetPoint)
    substation_vm_pu: float = float("nan")  # that set point in p.u. (NetworkFitMethod.fit)
    # the fit taken again about the network with this one's errors and taps applied, which answers (`_relinearised`;
    # None: this one answers). `determined`, `reading_offsets`, `set_aside` and `substation_vm_pu` above are then its
    relinearised: Relinearised | None = None
    # (k,) the variance the unmetered loads' pseudo-measurements add at every query, where they may err together
    # (`NetworkFitMethod.fit`'s `load_errors`; 0: none given)
    pseudo_var: np.ndarray | float = 0.0
    # (k,) p.u.: the largest per-bus correction the answer took at a context row, what bounds it at a query
    # (`NetworkFitMethod.at_queries`; None: unbounded)
    per_bus_reach: np.ndarray | None = None
    # the same context fitted otherwise (`NetworkFitMethod.hedged`: with levels that follow its guesses' profile, and
    # with the feeder held as recorded): where one answers otherwise, the spread holds the largest gap (none: no such fit)
    hedges: tuple[NetworkFitted, ...] = ()
    levels_found: bool = False  # the guesses were moved by levels the readings showed, and the context fitted again
    # (d,) how far those levels moved the guesses, the same in every row (None: none, or not the same in every row):
    # where a query's unmetered loads lie about (service.engine.sparse.fitted_geometry); where the levels move each row
    # by its own (`level_rows`: loads on a profile), their mean move
    typical_shift: np.ndarray | None = None
    # (d,) there, how far the guesses as the levels moved them vary over the rows (None: as the guesses do)
    typical_spread: np.ndarray | None = None

    @property
    def tap_steps(self) -> np.ndarray:
        """(k,) the voltage step t - 1 of the tap fitted at the head of the branch into each output bus (0: none), in
        the recorded model's terms: with a relinearised fit, the two passes' steps in series."""
        if self.branches is None:
            return np.zeros(self.metered.shape[0])
        steps: np.ndarray = np.sqrt(np.maximum(1.0 + 2.0 * self.branches.tap_halves, 0.0)) - 1.0
        if self.relinearised is not None:
            steps = (1.0 + steps) * (1.0 + self.relinearised.fitted.tap_steps) - 1.0
        return steps


@dataclass(frozen=True)
class Relinearised:
    """network-fit about the network with a first fit's impedance errors, taps and set point applied (a Gauss-Newton
    step: its first order is taken where the feeder is, not where the model was), and its fit of the same context."""

    method: NetworkFitMethod
    fitted: NetworkFitted


@dataclass(frozen=True)
class FirstPass:
    """What a relinearised fit keeps of the first (`NetworkFitMethod`'s `first`): the taps' branches and penalties and
    the impedances' prior as that fit chose them, and the prior's centre in this network's terms: the recorded model,
    whose errors are the first fit's undone (centred on the first fit, the prior would count the readings twice and
    the posterior be narrower than its errors: a bus 3.3 of its stds off in 1 of 8 IEEE 33 regulator contexts)."""

    taps: np.ndarray
    prior: float
    centre: np.ndarray
    correlation: float


@dataclass(frozen=True)
class ImpedanceProbe:
    """The network with the fitted impedance errors (its voltage model) and this method fitted to its voltages."""

    model: VoltageModel
    fitted: NetworkFitted


class NetworkFitMethod(Method):
    """The network model's power flow plus a correction fitted on the context: one per branch
    shared by all buses below it, then what each bus still shows (module docstring)."""

    name = "network model + context correction"
    accepts_missing = True  # NaN in context x (unmetered load) and y (bus not read): see fit

    def __init__(
        self,
        voltage_model: VoltageModel,
        downstream: np.ndarray,
        load_positions: np.ndarray,
        impedance: np.ndarray,
        typical_loads: np.ndarray | None = None,
        shunts: np.ndarray | None = None,
        corrected: CorrectedNetwork | None = None,
        slack_vm_pu: float = 1.0,
        first: FirstPass | None = None,
    ):
        self.voltage_model = voltage_model
        self.first = first  # set on a relinearised fit's method (`_relinearised`): its branch stage's prior
        self.slack_vm_pu = float(slack_vm_pu)  # the network model's substation set point
        # the network with the fitted impedance errors applied, whose exact voltages the probe fits (None: no
        # such probe; the model-error term is then the linear probe's alone)
        self.corrected = corrected
        # (k,) complex: MW + j MVAr each output bus's shunts draw at 1 p.u. (line charging, transformer
        # magnetising, bus shunts), drawn through the branches above it at |V|^2; None: none
        self.shunts = None if shunts is None else np.asarray(shunts, dtype=np.complex128)
        self.downstream = np.asarray(downstream, dtype=np.float64)
        self.head_bus = head_buses(self.downstream)  # the output bus each branch leaves, -1: the substation
        self.load_positions = np.asarray(load_positions, dtype=np.int64)
        self.impedance = np.asarray(impedance, dtype=np.float64)
        self.typical_loads = None if typical_loads is None else np.asarray(typical_loads, dtype=np.float64)
        self.linear = BayesianLinearRegression()

    def complete(self, context_x: np.ndarray, typical_loads: np.ndarray | None = None) -> np.ndarray:
        """Context loads with every unmetered (NaN) value replaced by its typical one (`typical_loads` (d,),
        else the network's base loads: a pseudo-measurement)."""
        return complete_loads(context_x, self.typical_loads if typical_loads is None else typical_loads)

    def fit(
        self,
        context_x: np.ndarray,
        context_y: np.ndarray,
        typical_loads: np.ndarray | None = None,
        load_errors: np.ndarray | Sequence[np.ndarray] | None = None,
        level_columns: int | Sequence[int] | None = None,
        *,
        level_rows: np.ndarray | None = None,
        level_step: bool = True,
    ) -> NetworkFitted:
        """Fit on a context whose unmeasured values are NaN: a load never or not always metered takes
        its typical value (`complete`), a voltage not read is simply absent (the network model stands in).
        `load_errors`: how those typical values may err together, a column per unit-std error: blocks of such
        columns (models.typical_loads.class_errors, customer_errors), each widened as far as the readings show it
        erred more (models.pseudo_errors), or one matrix (d, c) taken as it is. The correction takes such an error up
        at the context rows and keeps it at every query (their loads are given), so the spread holds its effect on
        each bus. `level_columns`: how many leading columns of `load_errors` are context-wide levels, the same in every
        row (a class's utilisation), fitted beside the branch errors (`BranchCorrection.fit`'s `levels`) so that a level
        the metered loads do not show is not taken for the feeder's error; None: the first block's where blocks are
        given (class_errors comes first), else none. Where levels are fitted, the guesses are moved by them and the
        context fitted again once (`level_step`): their first order missed 1e-4 p.u. of a 0.5x level on IEEE 33.
        `level_rows` (n, levels): how far each level moves each row (a class's level where its guesses follow a
        profile: models.typical_loads.class_rows); None: the same in every row."""
        x, y = check_context(context_x, context_y, missing=True)
        guessed = bool(np.isnan(x).any())
        x = self.complete(x, typical_loads)
        read = ~np.isnan(y)
        if not read.any():
            raise InputValidationError("context.y", "no voltage is read in any row", "at least one reading")
        v = solved(self.voltage_model, x, "context.x")
        if v.shape != y.shape:
            raise InputValidationError("context.y", f"expected {v.shape[1]} buses per row, got {y.shape[1]}")
        # the guesses' errors as the readings size them: blocks widened as far as the readings show they erred more;
        # one matrix (a relinearised fit's: its network took up some of their error, the recorded one shows it) is
        # taken as it is. The fits below weigh the readings by them (`_fit`)
        pseudo = None
        if guessed and load_errors is not None:
            stated = isinstance(load_errors, np.ndarray)
            blocks = [load_errors] if isinstance(load_errors, np.ndarray) else list(load_errors)
            if level_columns is None:
                level_columns = 0 if stated else int(np.asarray(blocks[0]).reshape(x.shape[1], -1).shape[1])
            sizes = (level_columns,) if isinstance(level_columns, int) else tuple(level_columns)
            sizes = tuple(int(c) for c in sizes if c)
            pseudo = widened_by_readings(self.voltage_model, x, v, y, blocks, not stated, sizes)
            if level_rows is not None:
                pseudo = dataclasses.replace(pseudo, level_rows=np.asarray(level_rows, dtype=np.float64))
            if not level_step:  # the guesses were moved by a level found: what is left of it is taken as it shows
                pseudo = dataclasses.replace(pseudo, level_evidence=0.0)
        fitted, at_point, ratio = self._at_set_point(x, y, v, read, guessed, pseudo=pseudo)
        found = None if fitted.branches is None else fitted.branches.level_fit
        if level_step and pseudo is not None and found is not None:
            moved = x + pseudo.level_move(found)  # the guessed values only are taken (`complete`)
            try:
                second = self.fit(
                    context_x, context_y, moved, load_errors, level_columns, level_rows=level_rows, level_step=False
                )
                # the unmetered loads run where the levels put them: a query's are placed about them (typical_shift);
                # where the levels follow a profile, about their mean move and as far as they vary with it (IEEE 33 on
                # one profile, the unmetered half at 1.3x-1.5x the metered: 15-35 % of queries drawn like the context
                # were flagged about the guesses, 0 % about the moved loads)
                shift = pseudo.level_move(found)
                spread = None if shift.ndim == 1 else np.std(moved, axis=0)
                return dataclasses.replace(
                    second, levels_found=True, typical_shift=np.atleast_2d(shift).mean(axis=0), typical_spread=spread
                )
            except InputValidationError as unsolved:  # no power flow at the moved guesses: the first fit answers
                logger.debug("network-fit: the guesses not moved by the levels found (%s)", unsolved)
        if pseudo is not None and found is None:  # nor in the refits below: found at the model's fit or not at all
            pseudo = dataclasses.replace(pseudo, levels=())
        # a meter whose readings depart as no chance departure does is set aside: its pull on its neighbours' fit goes
        # with it (a 2e-3 p.u. bias had them cover 0.82), its bus is answered from the other meters, and its offset stays
        # in the spread (the meter may be right: a step only it sees). The fit redone without it is tested once more
        # (priors chosen anew, a second bias shows: two at once were named in 5 of 10 contexts without), and one more
        # fit sets aside what that names.
        aside, refit = fitted.reading_offsets != 0, None
        for last in (False, True):
            if not aside.any() or not (read & ~aside).any():
                break
            kept = read & ~aside[None, :]
            refit, at_point, ratio = self._at_set_point(
                x, np.where(kept, y, np.nan), v, kept, guessed, check=not last, pseudo=pseudo
            )
            named = refit.reading_offsets != 0
            if not named.any() or not (read & ~(aside | named)).any():
                break
            aside = aside | named
        if refit is not None:
            read = read & ~aside[None, :]
            # the offset as the readings depart from the answer without them (the fit took up part of it before),
            # named where it stands out of the meter's noise (one named only beside a biased one had a few 1e-5)
            departed = np.nanmean(y[:, aside] - self.at_queries(refit, x).mean[:, aside], axis=0)
            error = NAMED_Z * fitted.noise[aside] / np.sqrt(fitted.read_rows[aside])
            offsets, set_aside = np.zeros_like(fitted.reading_offsets), np.full(aside.shape, np.nan)
            offsets[aside] = np.where(np.abs(departed) > np.maximum(error, SUSPECT_FLOOR), departed, 0.0)
            set_aside[aside] = departed
            fitted = dataclasses.replace(refit, reading_offsets=offsets, set_aside=set_aside)
        v = at_point
        probe = self._impedance_probe(x, v, read, guessed, fitted, pseudo)
        fitted = dataclasses.replace(fitted, impedance_probe=probe, substation_vm_pu=ratio * self.slack_vm_pu)
        if pseudo is not None:
            fitted = dataclasses.replace(fitted, pseudo_var=pseudo.variance)
        parts = self.at_queries(fitted, _spread_rows(x))  # the posterior at a few context rows: both below read it
        fitted = dataclasses.replace(fitted, simultaneous=self._simultaneous(fitted, parts))
        return self._relinearised(context_x, context_y, typical_loads, fitted, parts, pseudo)

    def _relinearised(
        self,
        context_x: np.ndarray,
        context_y: np.ndarray,
        typical_loads: np.ndarray | None,
        fitted: NetworkFitted,
        parts: QueryParts,
        pseudo: PseudoErrors | None = None,
    ) -> NetworkFitted:
        """`fitted`, with this method fitted again about the network with its impedance errors, taps and set point
        applied (`Relinearised`, which then answers) where the impedance probe shows the first order missing more
        than the answer's branch posterior std on some read bus (RELINEARISE_Z): a Gauss-Newton step. Its branch
        stage keeps the first fit's taps and prior, centred on the recorded model (`FirstPass`). On IEEE 33 at
        readings noise 1e-5 a +1.25 % regulator's in-range MAE went 0.12-0.15x least squares' -> 0.07-0.09x and
        at 1.3-1.5x load 0.012x -> 0.001x; lines 0.7-1.3 off 0.18-0.32x -> 0.14-0.19x, 0.016-0.049x ->
        0.001-0.007x. Not taken on a second pass itself, nor where the model explains the readings (the probe's
        network is then the model's). `parts`: `fitted`'s at a few context rows (`_spread_rows`)."""
        branches, probe = fitted.branches, fitted.impedance_probe
        if self.first is not None or self.corrected is None or branches is None or probe is None:
            return fitted
        std = parts.branch_std(branches.posterior(parts.fp, parts.fq, parts.head)[1])
        std = np.maximum(np.sqrt(np.mean(np.square(std), axis=0)), SPREAD_FLOOR_PU)
        missed = (fitted.metered > 0) & (probe.fitted.branch_misfit > RELINEARISE_Z * std)
        if not missed.any():
            return fitted
        network = self.corrected.network_at(branches.theta, branches.tap_halves)
        network = dataclasses.replace(network, slack_vm_pu=self.slack_vm_pu * fitted.set_point)
        if not np.array_equal(np.asarray(network.output_buses), np.asarray(self.corrected.network.output_buses)):
            logger.debug("network-fit: the corrected network orders its buses otherwise; not relinearised")
            return fitted
        first = FirstPass(
            branches.taps,
            branches.prior,
            self.corrected.undone(branches.theta, branches.tap_halves),
            branches.correlation,
        )
        method = method_for(network, first=first)
        try:
            errors, levels = (None, ()) if pseudo is None else (pseudo.errors, pseudo.levels)
            rows = None if pseudo is None else pseudo.level_rows
            second = method.fit(context_x, context_y, typical_loads, errors, levels, level_rows=rows)
        except InputValidationError as error:  # the corrected network has no power flow at some context row
            logger.debug("network-fit: not relinearised (%s)", error)
            return fitted
        logger.debug(
            "network-fit: relinearised (the probe's misfit over the branch std: %.3g)",
            float(np.max(probe.fitted.branch_misfit / std)),
        )
        # the guesses' errors as the recorded model shows them stay in the spread: the corrected network took up part
        # of them, so the readings depart less from it (1-LV-rural1, a quarter of its load buses metered: a first fit
        # far off had the relinearised one's spread hold the worst bus on 0.22 of queries)
        second = dataclasses.replace(second, pseudo_var=np.maximum(second.pseudo_var, fitted.pseudo_var))
        return dataclasses.replace(
            fitted,
            relinearised=Relinearised(method, second),
            determined=second.determined,
            reading_offsets=second.reading_offsets,
            set_aside=second.set_aside,
            substation_vm_pu=second.substation_vm_pu,
        )

    def _at_set_point(
        self,
        x: np.ndarray,
        y: np.ndarray,
        v: np.ndarray,
        read: np.ndarray,
        guessed: bool,
        check: bool = True,
        pseudo: PseudoErrors | None = None,
    ) -> tuple[NetworkFitted, np.ndarray, float]:
        """`_fit` with the model's voltages v, refitted at the substation's set point the readings show (AtSetPoint,
        at most SET_POINT_PASSES times): the fit, the model's voltages at that set point and its ratio to the model's;
        `check`: test the meters (`_fit`)."""
        fitted = self._fit(x, y, v, read, guessed, check=check, pseudo=pseudo)
        ratio = 1.0
        if pseudo is not None and pseudo.level_count and (fitted.branches is None or fitted.branches.level_fit is None):
            # levels are found at the model's set point or not at all: at a set point moved by the offset, or about a
            # network with the first fit's errors applied, they were taken for its remainder (IEEE 33 lines 0.7-1.3
            # off, no level departing: 1.7e-3 p.u. off)
            pseudo = dataclasses.replace(pseudo, levels=())
        for _ in range(SET_POINT_PASSES):
            # the branch stage's offset c in |V|^2 / 2 is the substation's set point moved: (r V0)^2 = V0^2 + 2c
            slack = ratio * self.slack_vm_pu
            if (
                fitted.branches is None
                or abs(moved := _moved_set_point(slack, fitted.branches)) <= SET_POINT_TOLERANCE_PU
            ):
                break
            moved_ratio = (slack + moved) / self.slack_vm_pu
            if abs(moved_ratio - 1.0) > SET_POINT_RANGE:
                break
            model_v = np.asarray(at_set_point(self.voltage_model, moved_ratio)(x), dtype=np.float64)
            if not np.isfinite(model_v).all():  # heavier loads than the feeder carries: the set point stays
                break
            ratio, v = moved_ratio, model_v
            refitted = self._fit(x, y, v, read, guessed, ratio=ratio, check=check, pseudo=pseudo)
            fitted = dataclasses.replace(refitted, set_point=ratio)
        return fitted, v, ratio

    def _simultaneous(self, fitted: NetworkFitted, parts: QueryParts) -> float:
        """The epistemic std's factor for the interval to hold on all k buses at once (models.calibration.
        correlated_simultaneous_factor), from the posterior's own correlation across buses at SIMULTANEOUS_ROWS of the
        context's rows (`parts`, `_spread_rows`): the branch stage's error is shared by every bus below a branch (its offset by all), the
        per-bus stage's and an unread bus's floor are each bus's own."""
        rows = parts.fp.shape[0]
        cov = np.diag(parts.other.mean(axis=0))
        if fitted.branches is not None:
            unseen = (fitted.metered <= 0) & ~np.isfinite(fitted.set_aside)  # a meter set aside is read (predictive)
            along = fitted.branches.along(parts.fp, parts.fq, parts.head) / parts.corrected[..., None]
            along = along * np.where(unseen, fitted.branches.unseen, 1.0)[None, :, None]
            stacked = along.transpose(1, 0, 2).reshape(along.shape[1], -1)
            cov = cov + stacked @ stacked.T / rows
            floor = np.where(unseen, np.square(fitted.branches.unseen_floor / parts.corrected), 0.0)
            cov[np.diag_indices_from(cov)] += floor.mean(axis=0)
        # at FAMILY_LEVEL wherever the buses err, apart too: capped at Bonferroni's 95 % (what independent errors took
        # before), buses that each err on their own were held together in only ~95 % of contexts. Every bus read
        # under noise is such a case (each bus's level is its own readings' mean): IEEE 33, lines 0.7-1.3 off, noise
        # 1e-3 p.u., 7 of 100 contexts left a bus under 0.90, 2 now (bench seed 12: one meter's noise mean 3.4 of its
        # standard errors out, its bus covered 0.01-0.51 by the query set drawn), where a shared error was held in 99 %
        widen = float(norm.ppf(0.5 + FAMILY_LEVEL / 2.0) / norm.ppf(0.5 + CALIBRATION_LEVEL / 2.0))
        return widen * correlated_simultaneous_factor(cov, level=FAMILY_LEVEL)

    def _impedance_probe(
        self,
        x: np.ndarray,
        v: np.ndarray,
        read: np.ndarray,
        guessed: bool,
        fitted: NetworkFitted,
        pseudo: PseudoErrors | None = None,
    ) -> ImpedanceProbe | None:
        """This method fitted, on the same context loads and meters, to the exact voltages of the network with
        the fitted impedance errors applied (models.corrected_network); None without a branch stage, or where
        that network has no power flow at some context row."""
        if self.corrected is None or fitted.branches is None:
            return None
        model = at_set_point(self.corrected.at(fitted.branches.theta, fitted.branches.tap_halves), fitted.set_point)
        exact = np.asarray(model(x), dtype=np.float64)
        if not np.isfinite(exact).all():
            return None
        probe = self._fit(x, np.where(read, exact, np.nan), v, read, guessed, fitted, fitted.set_point, pseudo=pseudo)
        return ImpedanceProbe(model, probe)

    def _fit(
        self,
        x: np.ndarray,
        y: np.ndarray,
        v: np.ndarray,
        read: np.ndarray,
        guessed: bool,
        probing: NetworkFitted | None = None,
        ratio: float = 1.0,
        check: bool = True,
        pseudo: PseudoErrors | None = None,
    ) -> NetworkFitted:
        """The two stages on complete loads x, readings y (NaN where not `read`) and the model's voltages v.
        `probing`: the answer's own fit, when this is its impedance probe: the linear fit of v and `determined`
        are that fit's (the same loads, voltages and meters; `determined` costs a posterior std at every row); `ratio`: the
        substation's set point v was solved at, relative to the model's; `check`: test the meters for an offset the
        feeder does not explain (models.branch_correction._suspect_readings; not in the refit that sets them aside);
        `pseudo`: the guessed loads' errors, as the readings size them: the readings are weighed by their covariance
        across buses in the branch stage, and the per-bus stage is given what they leave (`PseudoErrors`); without,
        where loads are guessed, each bus's readings by their misfit (`_weights`)."""
        k = y.shape[1]
        r = np.where(read, y - v, 0.0)
        branches, shared = None, np.zeros_like(r)
        if k <= MAX_BRANCH_BUSES:
            fp, fq, head, losses = self.branch_inputs(x, v, ratio)
            half_square = np.where(read, (np.square(np.where(read, y, v)) - np.square(v)) / 2.0, 0.0)
            # the taps are the answer's own where this is its probe (the same feeder, its voltages without them)
            # and regularised as the answer's fit was: what that fit misses through its priors (chosen at the readings'
            # noise) is what the probe must show
            mimic = probing.branches if probing is not None else None
            taps, prior = (None, None) if mimic is None else (mimic.taps, mimic.prior)
            correlation = 0.0 if mimic is None else mimic.correlation
            if mimic is None and self.first is not None:  # a relinearised fit: the first fit's taps and prior
                taps, prior, correlation = self.first.taps, self.first.prior, self.first.correlation
            centre = None if self.first is None else self.first.centre
            precision = None if pseudo is None else pseudo.precision(np.all(read, axis=0), v.mean(axis=0))
            # the guesses' levels beside the branches (a probe fits a network's exact voltages at these very loads: no
            # level departs there)
            levels: dict[str, Any] = {}
            if pseudo is not None and probing is None and pseudo.level_count:
                levels = {
                    "levels": pseudo.level_moves(v.mean(axis=0)),
                    "level_evidence": pseudo.level_margin,
                    "level_groups": pseudo.level_groups(),
                    "level_rows": pseudo.level_rows,
                }
            branches = BranchCorrection.fit(
                fp,
                fq,
                head,
                half_square,
                self.downstream,
                self.impedance,
                read,
                False,
                taps=taps,
                prior=prior,
                weights=precision,
                centre=centre,
                correlation=correlation,
                **levels,
            )
            weights = precision
            if weights is None and guessed:
                weights = _weights(branches, fp, fq, head, half_square, read)
            for _ in range(LOSS_PASSES):  # the losses an impedance error changes move every bus above them
                moved = np.where(read, self.moved_losses(branches.theta, losses), 0.0)
                branches = BranchCorrection.fit(
                    fp,
                    fq,
                    head,
                    half_square - moved,
                    self.downstream,
                    self.impedance,
                    read,
                    weights=weights,
                    taps=branches.taps,
                    prior=prior,
                    check_readings=check and probing is None and not guessed,
                    centre=centre,
                    correlation=correlation,
                    **levels,
                )
            shared = self._corrected(branches, v, fp, fq, head, losses) - v
            if branches.level_shift is not None:  # the levels moved the context rows only: no query carries them
                shared = shared + branches.level_shift / v
        features = self._features(x)
        left = np.where(read, r - shared, 0.0)
        if pseudo is not None:  # a fit of what the guesses moved would follow the guesses, wrong at every query
            left = pseudo.without_guesses(left, np.all(read, axis=0))
        per_bus = self.linear.fit(features, left)
        count = np.maximum(read.sum(axis=0), 1)
        branch_misfit = np.sqrt(np.where(read, np.square(r - shared), 0.0).sum(axis=0) / count)
        # linear in the loads: its miss measures the nonlinearity a correction must follow
        probe = self.linear.fit(x, v) if probing is None else probing.probe
        own = posterior(per_bus, features, readings=False)
        odds, keep = _positive_part(own.mean, own.sigma, read, branches is not None)
        fitted_r = shared + keep * own.mean
        centre = np.where(read, fitted_r, 0.0).sum(axis=0) / count
        spread_r = np.sqrt(np.where(read, np.square(fitted_r - centre), 0.0).sum(axis=0) / count)
        # a context whose loads barely move shows nothing of the feeder's response: share taken as at most
        # SHARE_CAP, its response as at least RESPONSE_FLOOR_PU (identical rows would divide by 0)
        response = np.maximum(v.std(axis=0), RESPONSE_FLOOR_PU)
        share = np.minimum(spread_r / response, SHARE_CAP)
        own_r = np.where(read, keep * own.mean, 0.0)
        own_spread = np.sqrt(np.where(read, np.square(own_r - own_r.sum(axis=0) / count), 0.0).sum(axis=0) / count)
        # as in _per_bus_variance: the kept part is signal with odds keep (its std in the mixture sqrt(keep)), but
        # with loads guessed what it fitted moves with them and counts whole
        in_mixture = np.ones_like(keep) if guessed else np.sqrt(keep)
        metered = read.mean(axis=0)
        if probing is not None:
            determined = probing.determined
        elif branches is not None:
            determined = branches.determined(fp, fq, head, metered)
        else:
            determined = np.where(metered > 0, 1.0, 0.0)
        offsets = np.zeros(k)
        if branches is not None and branches.suspect is not None:  # in s = |V|^2 / 2: over the bus's own |V|
            offsets = branches.suspect / np.maximum(np.where(read, y, 0.0).sum(axis=0) / count, READING_FLOOR_PU)
        # every bus's losses flow through the branches above it: the largest share anywhere counts everywhere
        return NetworkFitted(
            branches,
            per_bus,
            keep,
            odds,
            probe,
            float(share.max()),
            np.minimum(in_mixture * own_spread / response, SHARE_CAP),
            simultaneous_factor(k),
            metered,
            determined,
            branch_misfit,
            per_bus.noise_std,
            count,
            guessed,
            offsets,
            np.full(k, np.nan),
            per_bus_reach=np.max(np.abs(np.where(read, keep * own.mean, 0.0)), axis=0),
        )

    def moved_losses(self, theta: np.ndarray, losses: np.ndarray) -> np.ndarray:
        """(n, k) what relative impedance errors -theta move |V|^2 / 2 by through the losses they change
        (each branch's loss grows with its error and is drawn through every branch above it)."""
        k = self.downstream.shape[0]
        through = (theta[:k] * losses[:, :k]) @ self.downstream.T * self.impedance[:k]
        through += (theta[k : 2 * k] * losses[:, k:]) @ self.downstream.T * self.impedance[k:]
        moved: np.ndarray = through @ self.downstream
        return moved

    def branch_inputs(
        self, x: np.ndarray, v: np.ndarray, ratio: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(n, k) each the branch stage's P and Q inputs at loads x and the model's voltages v: the flows
        with every branch's losses (from the lossless flows) drawn through the branches above it, less
        the loss term's own share (d/d error of |z|^2 S^2 / 2V^2 is each branch's own loss); |V|^2 at each
        branch's head (what a tap there scales; the substation at `ratio` times its set point); and (n, 2k) the
        branches' losses."""
        k = self.downstream.shape[0]
        fp, fq = flows(x, self.downstream, self.load_positions)
        if self.shunts is not None:
            fp = fp + (np.square(v) * self.shunts.real) @ self.downstream.T
            fq = fq + (np.square(v) * self.shunts.imag) @ self.downstream.T
        apparent = (np.square(fp) + np.square(fq)) / np.square(v)
        lp, lq = apparent * self.impedance[:k], apparent * self.impedance[k:]
        fp, fq = fp + lp @ self.downstream.T, fq + lq @ self.downstream.T
        apparent = (np.square(fp) + np.square(fq)) / np.square(v)
        lp, lq = apparent * self.impedance[:k], apparent * self.impedance[k:]
        head = np.concatenate([np.full((len(v), 1), ratio * self.slack_vm_pu), v], axis=1)[:, self.head_bus + 1]
        return fp - lp, fq - lq, np.square(head), np.concatenate([lp, lq], axis=1)

    def _features(self, x: np.ndarray) -> np.ndarray:
        """The per-bus stage's inputs: the loads and every branch's squared flows (DistFlow's
        second-order terms, from the network's own tree), so a correction may bend as the losses do."""
        fp, fq = flows(x, self.downstream, self.load_positions)
        return np.concatenate([x, fp * fp, fq * fq, fp * fq], axis=1)

    def answering(self, fitted: NetworkFitted) -> tuple[NetworkFitMethod, NetworkFitted]:
        """The method and fit whose branch stage answers for `fitted`: its relinearised pair where it has one (its
        voltage model, branch inputs and posterior are that network's), else this method and `fitted`."""
        if fitted.relinearised is None:
            return self, fitted
        return fitted.relinearised.method, fitted.relinearised.fitted

    def as_recorded(self) -> NetworkFitMethod:
        """This method with the feeder held as recorded: every impedance at the grid's strongest prior about its
        recorded value, no tap, so that what the readings depart by is the guesses' levels' (and each bus's own): the
        other reading of a context where such levels and impedance errors explain the readings alike (`hedged`)."""
        k = self.downstream.shape[0]
        held = copy.copy(self)  # the same network's parts; only the branch stage's prior differs
        held.first = FirstPass(np.full(k, np.inf), BRANCH_PRIOR_GRID[-1], np.zeros(3 * k + 1), 0.0)
        return held

    def hedged(self, fitted: NetworkFitted, levels: NetworkFitted, recorded: NetworkFitted) -> NetworkFitted:
        """The answer where a context's loads follow a profile, from three fits of it: `fitted` (the feeder's
        errors fitted, the guesses' levels not), `levels` (with levels that follow the guesses' profile, the
        guesses moved by those found and fitted again) and `recorded` (the feeder held as recorded, the levels
        fitted: `as_recorded`). Such a level and the impedance errors explain the readings alike (both move a
        row as its flows run), so no one fit is right throughout: the answer is `recorded`'s where it misfits
        the readings at most RECORDED_ANSWERS times `fitted`'s (with fewer unknowns it explains them as well),
        else `fitted`'s, and its spread holds how far each other fit answers from it (`predict`) that the
        readings do not refute (misfitting at most RECORDED_MISFIT times the answer's and, where `recorded`
        answers, with a log evidence at most HEDGE_EVIDENCE below its; `levels` only where it found a level,
        and beside `fitted` wherever it did). Answered alone, `levels` held the worst bus on
        0.00-0.58 of queries in 4 of 24 half- or quarter-metered SimBench contexts read exactly (1-LV-rural1,
        seed 4: a 7.5 sigma reactive level and reactances 30 % up; in process), and `fitted`, where the
        unmetered customers ran at 1.3x or 0.5x the metered ones, on 0.63-0.89 in 4 of 12
        (bench/partial_metering.py). On IEEE 33 on one profile with the unmetered half at 1.5x, read exactly,
        `levels` was 3e-2 p.u. off on 4 of 8 seeds (impedance errors taken beside the level where the evidence
        chose a weak prior), `fitted` 7e-3-2e-2, `recorded` 3e-8-1e-7."""
        misfit, evidence = {}, {}
        for name, fit in (("fitted", fitted), ("levels", levels), ("recorded", recorded)):
            branches = self.answering(fit)[1].branches
            misfit[name] = np.inf if branches is None else float(np.sqrt(branches.noise_var))
            evidence[name] = np.nan if branches is None else branches.evidence
        found = levels.levels_found or (levels.branches is not None and levels.branches.level_fit is not None)
        if np.isfinite(misfit["recorded"]) and misfit["recorded"] <= RECORDED_ANSWERS * misfit["fitted"]:
            candidates = (("levels", levels, found), ("fitted", fitted, True))
            others = [
                fit
                for name, fit, eligible in candidates
                if eligible
                and misfit[name] <= RECORDED_MISFIT * misfit["recorded"]
                and not evidence[name] < evidence["recorded"] - HEDGE_EVIDENCE
            ]
            return dataclasses.replace(recorded, hedges=tuple(others))
        kept = [levels] if found else []
        if np.isfinite(misfit["fitted"]) and misfit["recorded"] <= RECORDED_MISFIT * misfit["fitted"]:
            kept.append(recorded)
        return dataclasses.replace(fitted, hedges=tuple(kept))

    def predict(self, fitted: NetworkFitted, query_x: np.ndarray) -> GaussianPredictive:
        """The answer at `query_x`; with hedges (`hedged`), its spread also holds the largest gap to their answers."""
        answer = self._predict(fitted, query_x)
        if not fitted.hedges:
            return answer
        gap = np.zeros_like(answer.mean)
        for other in fitted.hedges:  # their means only: no posterior std needed
            method, hedge = self.answering(other)
            gap = np.maximum(gap, np.abs(method.at_queries(hedge, query_x).mean - answer.mean))
        return GaussianPredictive(answer.mean, np.sqrt(np.square(answer.std) + np.square(gap)))

    def _predict(self, fitted: NetworkFitted, query_x: np.ndarray) -> GaussianPredictive:
        method, fitted = self.answering(fitted)
        if method is not self:
            return method._predict(fitted, query_x)
        parts = self.at_queries(fitted, query_x)
        std = (
            parts.branch_std(fitted.branches.posterior(parts.fp, parts.fq, parts.head)[1]) if fitted.branches else None
        )
        return parts.predictive(fitted, std, fitted.metered)

    def refuse_unsolved(self, fitted: NetworkFitted, query_x: np.ndarray, extrapolation: np.ndarray) -> None:
        """RowsRefused naming the queries without a power flow: every answer reads it (`at_queries`)."""
        method, fitted = self.answering(fitted)
        model = at_set_point(method.voltage_model, fitted.set_point)
        solved(model, check_queries(query_x, d=self.load_positions.shape[0] * 2), "queries")

    def at_queries(self, fitted: NetworkFitted, query_x: np.ndarray) -> QueryParts:
        """Everything the predictive at `query_x` needs but the branch posterior's std (models.meter_placement
        swaps in the std a meter more would leave). A relinearised fit's are its own network's (`answering`)."""
        method, fitted = self.answering(fitted)
        if method is not self:
            return method.at_queries(fitted, query_x)
        q = check_queries(query_x, d=self.load_positions.shape[0] * 2)
        v = solved(at_set_point(self.voltage_model, fitted.set_point), q, "queries")
        at = self._inputs(q, v, fitted.branches is not None, fitted.set_point)
        corrected = self._corrected_at(fitted, at)
        r = posterior(fitted.per_bus, at.features, readings=False)
        linear_miss = _bounded_miss(fitted.probe, posterior(fitted.probe, q, readings=False).mean, at.v)
        kept, other = fitted.keep * r.mean, self._per_bus_variance(fitted, r.mean, r.sigma)
        if fitted.per_bus_reach is not None:
            # a per-bus correction far beyond any the context took is the stage's extrapolation, no feeder's: the
            # network model and branches answer, as uncertain as the largest correction credible (metered loads sent
            # 1e-6x too small: means of +-1e9 p.u.)
            reach = np.maximum(PER_BUS_REACH * fitted.per_bus_reach, PER_BUS_LIMIT_PU)
            wild = (np.abs(kept) > reach) | (other > np.square(reach))
            kept, other = np.where(wild, 0.0, kept), np.where(wild, np.square(reach), other)
        return QueryParts(
            mean=corrected + kept,
            corrected=corrected,
            fp=at.fp,
            fq=at.fq,
            head=at.head,
            other=other,
            model_error=self._model_error(fitted, at, linear_miss, kept),
        )

    def _inputs(self, q: np.ndarray, v: np.ndarray, branches: bool, ratio: float) -> QueryInputs:
        """What both stages read at queries q (their model voltages v), for any fit of this network."""
        if not branches:
            zeros = np.zeros_like(v)
            return QueryInputs(q, v, zeros, zeros, zeros, None, self._features(q))
        fp, fq, head, losses = self.branch_inputs(q, v, ratio)
        return QueryInputs(q, v, fp, fq, head, losses, self._features(q))

    def _corrected_at(self, fitted: NetworkFitted, at: QueryInputs) -> np.ndarray:
        """(m, k) the model's voltages at the queries with `fitted`'s branch correction."""
        if fitted.branches is None or at.losses is None:
            return at.v
        return self._corrected(fitted.branches, at.v, at.fp, at.fq, at.head, at.losses)

    def _corrected(
        self,
        branches: BranchCorrection,
        v: np.ndarray,
        fp: np.ndarray,
        fq: np.ndarray,
        head: np.ndarray,
        losses: np.ndarray,
    ) -> np.ndarray:
        """(n, k) voltages v with the branch correction: |V|^2 / 2 moved by the branches' errors times their
        flows, the taps at their heads, and the losses they move (kept above 0.1 v: a wild fit cannot take |V|
        to 0)."""
        half_square = branches.posterior(fp, fq, head, with_std=False)[0]
        half_square = half_square + self.moved_losses(branches.theta, losses)
        corrected: np.ndarray = np.sqrt(np.maximum(np.square(v) + 2.0 * half_square, 0.01 * np.square(v)))
        return corrected

    @staticmethod
    def _per_bus_variance(fitted: NetworkFitted, mean: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        """(m, k) the per-bus stage's epistemic variance about the answer's keep * mean. With every load read,
        the positive-part factor (`signal_odds`, p) is the odds that the stage fitted signal rather than reading
        noise: the variance of that mixture (signal with its posterior, or nothing) about a share a of the mean is
        p (sigma^2 + (1 - a)^2 mean^2) + (1 - p) (a mean)^2; p (sigma^2 + (1 - p) mean^2) where the answer takes
        a = p, p (sigma^2 + mean^2) where it takes none (`_positive_part`: a bus whose fit does not stand out of
        the noise beyond chance keeps it in its spread, not its mean). With loads guessed, what it fitted beyond
        the signal is the guesses' error, which moves with the loads and is not in the posterior: its posterior
        and the part left out count whole."""
        a = fitted.keep
        if fitted.loads_guessed:
            variance: np.ndarray = np.square(sigma) + np.square((1.0 - a) * mean)
            return variance
        p = fitted.signal_odds
        variance = p * (np.square(sigma) + np.square((1.0 - a) * mean)) + (1.0 - p) * np.square(a * mean)
        return variance

    def _model_error(
        self, fitted: NetworkFitted, at: QueryInputs, linear_miss: np.ndarray, kept: np.ndarray
    ) -> np.ndarray:
        """(m, k) what the correction misses at the queries beyond its posterior (module docstring): with an
        impedance probe, its miss on the network with the fitted errors (the branch stage's nonlinear part)
        beside the linear probe's miss scaled by the per-bus stage's share; else the linear probe's by the
        whole correction's share. Where the probe's network has no power flow, the latter stands."""
        whole: np.ndarray = MODEL_ERROR_GAIN * fitted.share * np.abs(linear_miss)
        probe = fitted.impedance_probe
        if probe is None:
            return whole
        exact = np.asarray(probe.model(at.q), dtype=np.float64)
        probe_corrected = self._corrected_at(probe.fitted, at)
        probe_mean = probe_corrected + probe.fitted.keep * posterior_mean(probe.fitted.per_bus, at.features)
        # the probe's branch stage misfits its exact readings in the context by a little (the linearisation), which
        # its per-bus stage follows; the user's per-bus stage can follow it only where the readings' noise leaves
        # it visible: its n readings resolve a misfit s over noise sigma in p features when n s^2 > p sigma^2
        p = probe.fitted.per_bus.w.shape[0]
        hidden = p * np.square(fitted.noise) / (fitted.read_rows * np.square(probe.fitted.branch_misfit) + 1e-300)
        resolved = np.clip(1.0 - hidden, 0.0, 1.0)
        miss = resolved * np.abs(probe_mean - exact) + (1.0 - resolved) * np.abs(probe_corrected - exact)
        own = MODEL_ERROR_GAIN * fitted.own_share * np.abs(linear_miss)
        # and where the misfit is hidden, what the per-bus stage kept (`kept`, m x k) is the noise it fitted
        error = np.sqrt(np.square(own) + np.square(MODEL_ERROR_GAIN * miss) + np.square((1.0 - resolved) * kept))
        solvable = np.isfinite(exact).all(axis=1, keepdims=True)
        out: np.ndarray = np.where(solvable, error, whole)
        return out


@dataclass(frozen=True)
class QueryInputs:
    """What network-fit's stages read at some queries q (m, d): the same for an answer and its probe."""

    q: np.ndarray
    v: np.ndarray  # (m, k) the network model's voltages
    fp: np.ndarray  # (m, k) the branch stage's P and Q inputs (zeros without a branch stage)
    fq: np.ndarray
    head: np.ndarray  # (m, k) |V|^2 at each branch's head
    losses: np.ndarray | None  # (m, 2k) the branches' losses (None without a branch stage)
    features: np.ndarray  # the per-bus stage's inputs


@dataclass(frozen=True)
class QueryParts:
    """network-fit's predictive at some queries (m, k each), its branch stage's std left to be given."""

    mean: np.ndarray
    corrected: np.ndarray  # the model's voltages with the branch correction: |V|^2 / 2's std over it is |V|'s
    fp: np.ndarray  # the branch stage's inputs (m, k) at the queries
    fq: np.ndarray
    head: np.ndarray
    other: np.ndarray  # the per-bus stage's epistemic variance
    model_error: np.ndarray  # what a linear correction misses off the context

    def branch_std(self, half_square_std: np.ndarray) -> np.ndarray:
        """The branch stage's std of |V| from that of |V|^2 / 2 (first order: d|V| = d(|V|^2 / 2) / |V|)."""
        std: np.ndarray = half_square_std / self.corrected
        return std

    def predictive(
        self, fitted: NetworkFitted, branch_std: np.ndarray | None, metered: np.ndarray
    ) -> GaussianPredictive:
        """The predictive with this branch std (None: no branch stage); `metered` (k,): the buses read."""
        epistemic = self.other + fitted.pseudo_var
        aside = np.isfinite(fitted.set_aside)
        if branch_std is not None and fitted.branches is not None:
            # a bus no meter reads: its branch correction is as uncertain as held-out meters' errors say, and at
            # least as uncertain as the linearisation (models.branch_correction); a meter set aside is read, and how
            # far its readings depart from this answer is measured (below)
            unseen = np.hypot(branch_std * fitted.branches.unseen, fitted.branches.unseen_floor / self.corrected)
            epistemic = epistemic + np.square(np.where((metered > 0) | aside, branch_std, unseen))
        # a meter set aside: the answer there is the other meters' and the network model's, and the spread holds its
        # readings' departure from it (the meter may be right: a step only it sees)
        spread = np.sqrt(
            np.square(fitted.simultaneous) * epistemic
            + np.square(self.model_error)
            + np.square(np.where(aside, fitted.set_aside, 0.0))
        )
        return GaussianPredictive(self.mean, np.maximum(spread, SPREAD_FLOOR_PU))


def _bounded_miss(probe: LinearFit, linear: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(m, k) the linear probe's miss `linear` - `v` at queries, at most as far as the model's voltages v moved from
    the context's mean, beyond three of the probe's residual stds there. Along directions the context barely spans the
    probe extrapolates without bound: unmetered loads guessed alike in every row are near-collinear columns (1-LV-rural1
    half unmetered, the true means given as typical values: standardised coefficients of 1e5, a miss of 8,000 p.u.,
    and intervals [-4049, 4051] p.u. wide on buses read in every row; a user trial)."""
    miss = linear - v
    reach = np.abs(v - probe.y_mean) + 3.0 * probe.y_scale * np.sqrt(probe.noise_var)
    out: np.ndarray = np.clip(miss, -reach, reach)
    return out


def _spread_rows(x: np.ndarray) -> np.ndarray:
    """SIMULTANEOUS_ROWS of the context's rows x, spread over it: where the posterior's spread is taken."""
    rows: np.ndarray = x[np.unique(np.linspace(0, len(x) - 1, SIMULTANEOUS_ROWS).astype(int))]
    return rows


def _moved_set_point(slack: float, branches: BranchCorrection) -> float:
    """How far (p.u.) the branch stage's offset moves the substation's set point from `slack`."""
    offset = float(branches.theta[-1] * branches.scale[-1])
    return float(np.sqrt(max(slack**2 + 2.0 * offset, 0.0))) - slack


def _weights(
    branches: BranchCorrection,
    fp: np.ndarray,
    fq: np.ndarray,
    head: np.ndarray,
    half_square: np.ndarray,
    read: np.ndarray,
) -> np.ndarray:
    """(k,) each bus's readings' precision relative to the others', from their misfit to a first fit: where
    loads are guessed (unmetered, at typical values) a bus whose path carries more of them reads more of
    their spread, so readings near the substation are trusted more than those at the feeder's ends."""
    misfit = np.where(read, np.square(half_square - branches.posterior(fp, fq, head, with_std=False)[0]), 0.0)
    var = misfit.sum(axis=0) / np.maximum(read.sum(axis=0), 1)
    seen = read.any(axis=0) & (var > 0)
    if not seen.any():
        return np.ones(read.shape[1])
    typical = float(np.mean(var[seen]))
    weights: np.ndarray = np.clip(
        np.where(seen, typical / np.maximum(var, typical * WEIGHT_RANGE), 1.0), WEIGHT_RANGE, 1.0 / WEIGHT_RANGE
    )
    return weights


def _positive_part(
    fitted: np.ndarray, std: np.ndarray, read: np.ndarray, shared: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(k,) each the odds that each bus's fitted values (n, k) are signal, and the share of them the answer takes.
    The odds: 1 - (their posterior variance) / (their mean square) over the rows where it is read, at least 0 (0
    where never read): a per-bus stage fitted to meter noise alone (the model is right there) is dropped instead of
    adding its intercept's sigma / sqrt(n) error; one fitted to a real mismatch is kept whole. Beside a branch stage
    (`shared`: what the buses share is fitted there), where the buses' signal / noise ratios together stay within
    what noise alone gives (their sum within chi2(k) at PER_BUS_FALSE_KEEP), the answer takes a bus's fit only where
    it stands out more than noise alone would on any of the k buses (its ratio taken as chi2(1): an intercept's z^2;
    conservative, the fits of noise alone stayed below 6.2 of 32 buses x 10 draws against a limit of 10); elsewhere
    the odds stay in its spread (`_per_bus_variance`). Where they together show more (lines off), every bus as
    before. Bus by bus, a few of 32 had kept a fit of
    noise at 1.5-2.5 sigmas and erred by it (IEEE 33, model right, noise 1e-3 p.u.: error 3.1e-5 -> 1.2e-5 p.u. at
    1.3-1.5x load)."""
    count = np.maximum(read.sum(axis=0), 1)
    signal = np.where(read, np.square(fitted), 0.0).sum(axis=0) / count
    noise = np.where(read, np.square(std), 0.0).sum(axis=0) / count
    odds = np.clip(1.0 - noise / np.maximum(signal, np.finfo(np.float64).tiny), 0.0, 1.0)
    odds = np.where(read.any(axis=0), odds, 0.0)
    ratio = np.where(read.any(axis=0), signal / np.maximum(noise, np.finfo(np.float64).tiny), 0.0)
    buses = max(int(read.any(axis=0).sum()), 1)
    # every bus's fit as far as its odds say where the buses together show more than noise alone would (a mismatch
    # the branch stage leaves on many buses: lines off), else only a bus standing out beyond chance on its own
    if not shared or ratio.sum() > chi2.isf(PER_BUS_FALSE_KEEP, buses):
        return odds, odds
    return odds, np.where(ratio > chi2.isf(PER_BUS_FALSE_KEEP / buses, 1), odds, 0.0)


def complete_loads(context_x: np.ndarray, typical_loads: np.ndarray | None) -> np.ndarray:
    """Context loads (n, d) with every unmetered (NaN) value replaced by its typical one (`typical_loads` (d,), or
    (n, d): one per row): the pseudo-measurement network-fit solves the network model at, as does the service's check
    of the readings (service.engine.readings)."""
    x = np.asarray(context_x, dtype=np.float64)
    unmetered = np.isnan(x)
    if not unmetered.any():
        return x
    typical = None if typical_loads is None else np.asarray(typical_loads, dtype=np.float64)
    if typical is None or typical.shape not in ((x.shape[1],), x.shape):
        raise InputValidationError("context.x", "a load is not metered (null) and no typical values are known")
    return np.where(unmetered, typical if typical.ndim == 2 else typical[None, :], x)


def general_card(max_context: int) -> dict[str, Any]:
    return width_free_card(
        NAME,
        "the network's own AC power flow plus a correction fitted on the context: one per branch (DistFlow, a "
        "relative impedance error each), shared by every bus below it, then per bus (Bayesian linear, maximum "
        "evidence); contexts may leave voltages and loads unmetered (null); the spread is the correction's "
        "posterior (for all buses at once) plus the network-model error a linear correction misses, which "
        "grows off the context (models.network_fit)",
        "network power flow",
        max_context,
    )


def card_for(network: Any, max_context: int) -> dict[str, Any]:
    return on_network(general_card(max_context), network)


def branch_impedance(network: Any, below: np.ndarray) -> np.ndarray:
    """(2k,) the voltage drop (p.u.) per MW, then per MVAr, through the branch into each output bus.

    On a radial feeder the reduced impedance matrix's diagonal sums the branches from the substation,
    so a branch's own impedance is its bus's entry less its parent's (transformers and lines alike)."""
    z = np.asarray(network.zbus()[0].numpy()).diagonal()
    depth = below.sum(axis=0)
    parent = np.where(below, depth[:, None], -1)
    np.fill_diagonal(parent, -1)
    own = z - np.where(parent.max(axis=0) > 0, z[parent.argmax(axis=0)], 0.0)
    return np.concatenate([np.abs(own.real), np.abs(own.imag)]) / float(network.sn_mva)


def method_for(network: Any, voltages: Any | None = None, first: FirstPass | None = None) -> NetworkFitMethod:
    """network-fit on `network`; `voltages`: its power-flow model (gridsim.api.VoltageModel) where the caller has
    one built (the off-context guard's: one impedance reduction per network, not two); `first`: a relinearised
    fit's (`NetworkFitMethod._relinearised`)."""
    from gridsim.api import VoltageModel as NetworkVoltages
    from gridsim.tree import downstream

    below = downstream(network)
    impedance = branch_impedance(network, below)
    return NetworkFitMethod(
        NetworkVoltages(network) if voltages is None else voltages,
        below,
        network.load_positions,
        impedance,
        network.base_x,
        bus_shunts(network),
        CorrectedNetwork(network, below),
        network.slack_vm_pu,
        first,
    )


def bus_shunts(network: Any) -> np.ndarray:
    """(k,) complex MW + j MVAr that each output bus's shunts draw at 1 p.u.: half of each line's charging and
    each transformer's magnetising at either end (pi model), and bus shunts (a capacitance draws -j B)."""
    index = {int(b): i for i, b in enumerate(network.output_buses)}
    drawn = np.zeros(len(index), dtype=np.complex128)

    def add(buses: Any, admittance: np.ndarray) -> None:
        for bus, y in zip(np.asarray(buses).tolist(), admittance.tolist(), strict=True):
            if int(bus) in index:  # at the slack it changes no flow
                drawn[index[int(bus)]] += np.conj(y) * network.sn_mva

    for ends, g, b in (
        ((network.from_bus, network.to_bus), network.line_g_pu, network.line_b_pu),
        ((network.trafo_hv_bus, network.trafo_lv_bus), network.trafo_g_pu, network.trafo_b_pu),
    ):
        count = len(ends[0])
        half = (np.resize(np.asarray(g, dtype=np.float64), count) if len(g) else np.zeros(count)) / 2.0
        half = half + 1j * (np.resize(np.asarray(b, dtype=np.float64), count) if len(b) else np.zeros(count)) / 2.0
        for side in ends:
            add(side, half)
    add(network.shunt_bus, np.asarray(network.shunt_y_pu, dtype=np.complex128))
    return drawn

"""A context's voltage readings held to its network model: each within READING_TOLERANCE_PU of the network
model's power flow at its row's loads, and scattering around a smooth function of the loads no more than
READING_SCATTER_PU.

A reading within [0.5, 1.5] p.u. (service.engine.checks) can still be no measurement of the feeder the context
names: 0.5 p.u. at the substation's neighbour while every other bus reads 0.99, or numbers drawn at random. The
models fit such a context as it is and answered -120..3.5 p.u. at its queries. The network model knows what
the feeder can read: every row's loads are solved on it (the batched power flow, in blocks of CHECK_BLOCK
rows), and a reading farther than READING_TOLERANCE_PU from its voltage there is refused by cell
(ReadingsRefused); a row the network model cannot solve is refused as every model refuses one
(models.network_voltages.solved: UnsolvedRows), the rows of the first block holding one. Unmetered loads take
their typical values, as network-fit solves them (models.network_fit.complete_loads); a voltage not read (NaN)
is compared with nothing.

Readings inside the tolerance can still scatter like no meter does (the network model's voltage plus 0.1 p.u. at
random): physics-fit answered -14..19 p.u. at 1.5x load off such a context. Their departure from the network
model is smooth in the loads for a legitimate feeder (a wrong impedance, a tap, load growth), so a Bayesian linear
fit of it on the loads (models.linear.BayesianLinearRegression, as models.off_context.reading_noise fits it) leaves
the meters' noise, and a bus whose noise std is over READING_SCATTER_PU is refused (ScatteredReadings, naming the
bus). One reading can be off by itself (a meter glitch, a reading from another time): among exact readings it is no
noise, and the models fitted it. Each reading is held to what the fit of the OTHER readings predicts at its row (its
leave-one-out residual under the Bayesian fit, `held_out`: a fit of 64 rows on IEEE 33's 64 loads took a 0.15 p.u.
glitch into itself), less its row's median over the buses (a tap moves them all), in that distance's std (a robust
noise std of its bus, which a few glitches do not inflate, times the row's leave-one-out factor); a reading over
READING_GLITCH_PU and GLITCH_Z of those stds is refused (GlitchedReading, naming the cell), the readings over
READING_GLITCH_PU having been left out of a second fit (`glitch_scores`). Rows whose readings all stand off the
other rows' by one shared step (a substation tap or set point that moved) are refused too (SteppedRows). The fit
takes the rows that read some bus and leave at most UNMETERED_SHARE of their typical load unmetered, those loads at
their typical values: an unmetered load's departure from that is no function of the reported loads (no load metered:
0.036 p.u. "noise" on IEEE 33 at 0.3-1.6x load), a little more noise where its share is small. Under
SCATTER_MIN_ROWS such rows the noise cannot be told from the fit and the check is skipped; over SCATTER_MAX_ROWS,
evenly spaced ones are fitted and every row is held to that fit.

Checked once per context id in each process (an inline context sent with every request pays it once), in the
worker pool. A simulated context (POST /v1/context-sets `simulate`) is the network model's own power flow and is
not checked.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from models.errors import ROWS_SHOWN, RowsRefused, rows_text
from models.limits import (
    MIN_CONTEXT_ROWS,
    READING_GLITCH_PU,
    READING_MAX_PU,
    READING_MIN_PU,
    READING_SCATTER_PU,
    READING_TOLERANCE_PU,
)
from service.engine import sparse
from service.engine.context_sets import ContextSet
from service.engine.errors import InvalidInput

if TYPE_CHECKING:
    from models.linear import LinearFit
    from models.predictive import GaussianPredictive

CHECKED_KEEP = 256  # context ids whose readings this process has found consistent
# The rows are solved in blocks of this many, and the check stops at the first block holding a row the network
# model cannot solve: such a row iterates to the solver's limit, and a context of 10,000 of them on an uploaded
# 500-bus feeder held a worker for 45-73 s (an attacker pass); one block costs ~1/40 of that, as much as solving
# a legitimate context of 10,000 rows on that feeder (3.5 s).
CHECK_BLOCK = 256
MODELS_KEEP = 16  # networks whose power-flow model is kept built (as service.engine.networks keeps uploads)
# The scatter check's rows (those reading every metered bus and metering every load): below SCATTER_MIN_ROWS the
# Bayesian fit's noise is not told apart from its fit (the models' own smallest context); above SCATTER_MAX_ROWS
# evenly spaced ones, so a 10,000-row context's fit costs about its power flow (bench/readings_check_cost.py, a
# busy 2-core host: 300 buses, 1.1 s beside 1.4 s; 500 buses, 3.4 s beside 3.9 s).
SCATTER_MIN_ROWS = MIN_CONTEXT_ROWS
SCATTER_MAX_ROWS = 2000
# Fits of the scatter check where some row misses a reading, each filling it with the last fit's value (the first:
# its bus's mean departure): IEEE 33, lines 1.3x (not told), 1.3-1.6x load, readings noise 2e-3, 500 rows infer
# 2.3e-3 complete and 2.2-2.5e-3 with 3-66 % of the readings missing at random after three (scratch, this VM).
IMPUTATION_PASSES = 3
# A reading is a glitch (GlitchedReading) where it lies over READING_GLITCH_PU off what the scatter fit of the other
# readings predicts at its row and over this many of that distance's stds (`glitch_scores`): a normal reading is that
# far out with probability 1e-15. Its score min(distance / READING_GLITCH_PU, stds / GLITCH_Z) is refused over 1; over
# 4,464 legitimate contexts (SimBench development years, IEEE 33 with the model right, every line x0.7 or x1.3, each
# line its own 0.7-1.3 factor, the substation at 1.03, at loads +-10 %, grown 1.3-1.6x, 0.3-1.6x, with PV export; 16
# to 5,000 rows, meter noise 0-2e-3, load noise 2 %, none, 30 % or 67 % of the readings missing or 3 buses read in a
# few rows) the highest was 0.50 (IEEE 33 every line x1.3, 0.3-1.6x load, 32 rows, 2/3 missing: 1.65e-2 p.u., 4.0
# stds; SimBench 0.36: 1.08e-2 p.u.), 0.52 with the substation 1-3 taps off on 1 % of the rows (the in-sample check
# refused 4 such small contexts as glitches; the step test, SteppedRows, now refuses those it can tell), and 0.97 with a regulator mid-feeder 2 taps off on a lateral under half the buses
# (2.9e-2 p.u.: as before; 3 taps, 3.7e-2 p.u., are refused, as before).
GLITCH_Z = 8.0
# A row whose readings sit off the other rows' by one shared step (its median departure over the buses, held out as
# a glitch is) is a set point or a substation tap that moved during the context (SteppedRows): every model takes one
# set point for the whole context and answers between the two; a user trial put 25 of 500 IEEE 33 rows one 0.625 %
# tap up, and network-fit answered every bus 1.2-3.2e-4 p.u. off at 10-20 of its stds (0 % held; the checkpoints at
# noise 1e-3, leaning on it, too). Refused where that median stands more than STEP_PU and STEP_Z of the rows' robust
# scale (GLITCH_MAD x their median absolute deviation) off the rows' median, in a context of STEP_MIN_ROWS or more:
# 0.7 of a regulator's 0.625 % step (caught: every context of 100 rows or more with the substation 1-3 taps off on
# 1 % of the rows, 72 of 72). A feeder unlike its model leaves rows a shared misfit of the linear fit too: at most
# 0.82 of the threshold (3.7e-3 p.u.) over the legitimate contexts of 100-5,000 rows of helper-61's grid (SimBench
# development years; IEEE 33 right, lines 0.7x, 1.3x or each 0.7-1.3x, set point 1.03, at +-10 %, 1.3-1.6x and
# 0.3-1.6x load and PV export; noise 0-2e-3, load noise 2 %, 30 % missing), but 4.2e-3 in 16-64 rows of exact readings
# at 0.3-1.6x load with lines 1.3x: under STEP_MIN_ROWS the test cannot tell a tap's step from that, and holds the
# rows to READING_GLITCH_PU instead (a user trial offset one row of 16-99 by 0.1 p.u., and it passed every check). A
# regulator behind 10 of 32 buses 2 taps off on 1 % of 5,000 rows with 30 % of the readings missing is refused too
# (a row reading few others: its median moved), rightly: it moved during the context.
STEP_PU = 4.5e-3
STEP_Z = 8.0
STEP_MIN_ROWS = 100
# The robust noise std a glitch's distance is in: this times its bus's median absolute distance in leave-one-out stds
# (a normal's std). The fit's own noise std counted the glitches: 8 of 500 exact readings 0.05 p.u. off on one bus
# made it 6.2e-3, and they passed under GLITCH_Z of it; they are 39 robust stds off (139 after the second fit).
GLITCH_MAD = 1.4826
# At most this share of a bus's readings are left out of the second fit (`glitch_scores`): a bus with more of them
# far off is no bus with a few glitches, and the median above holds under half.
GLITCH_LEFT_OUT = 0.25
# A bus holding a suspect and read in under half the fitted rows is fitted again on its own readings (`_sparse`): at
# most this many such buses (each one more fit, on fewer rows), and only one read in this many other rows.
GLITCH_OWN_FITS = 4
GLITCH_OWN_MIN = 4
# A glitch's distance is in stds of at least this (p.u.): readings as exact as the solver (the network model right,
# no noise) put the std at ~1e-16, and a distance in such stds says no more than the distance itself.
NOISE_FLOOR_PU = 1e-9
# A row whose unmetered loads (null, taken at their typical values) carry at most this share of the row's typical
# load (sum of |P| and |Q|) is held to the scatter, glitch and step tests too: their departure from the typical
# values is a little more noise. Above it the row is left to the power-flow tolerance alone (no load metered at
# 0.3-1.6x base load: 0.036 p.u. of "noise" on IEEE 33). A user trial's one load never metered turned every test
# off for the whole context.
UNMETERED_SHARE = 0.05
# What a meter's noise is at most (the product's supported range), quoted in the refusal's expectation.
METER_NOISE_PU = 2e-3


@dataclass(frozen=True)
class FarReading:
    """One reading farther than READING_TOLERANCE_PU from the network model: its row (0-based, in the context)
    and bus (the output's index), the reading and the network model's voltage there; `typical`: the row has
    unmetered loads, solved at their typical values (a reading far from that may be loads far from typical)."""

    row: int
    bus: int
    reading: float
    model: float
    typical: bool = False

    @property
    def message(self) -> str:
        unmetered = (
            "; this row's unmetered loads are taken at their typical values (typical_loads, else their rating times "
            "what the metered loads of their class run at): if they were far from those, meter them or send the row "
            "without this reading"
        )
        return (
            f"is {self.reading:g}, {abs(self.reading - self.model):.3f} p.u. from the network model's power flow "
            f"at this row's loads ({self.model:.4f} p.u.){unmetered if self.typical else ''}"
        )

    @property
    def expected(self) -> str:
        low = max(self.model - READING_TOLERANCE_PU, READING_MIN_PU)
        high = min(self.model + READING_TOLERANCE_PU, READING_MAX_PU)
        return (
            f"a reading within {READING_TOLERANCE_PU:g} p.u. of the network model's voltage at this row's loads: "
            f"[{low:.4f}, {high:.4f}] p.u. (or null if not read)"
        )


class ReadingsRefused(InvalidInput):
    """Readings of `field`.y farther than READING_TOLERANCE_PU from the network model: an entry for each of the
    first ROWS_SHOWN rows holding one (its first such reading, `far`), the detail counting them all."""

    def __init__(self, field: str, far: list[FarReading], rows: int, readings: int) -> None:
        first = far[0]
        super().__init__(f"{field}.y[{first.row}][{first.bus}]", first.message, first.expected)
        self.detail = (
            f"{field}.y: {summary(readings, rows)} (rows {rows_text([c.row for c in far], total=rows)}); "
            f"{field}.y[{first.row}][{first.bus}] {first.message}"
        )
        self.entries = [
            {"location": "body", "field": f"{field}.y[{c.row}][{c.bus}]", "message": c.message, "expected": c.expected}
            for c in far
        ]
        self.far, self.rows, self.readings = far, rows, readings


class UnsolvedRows(InvalidInput):
    """Context rows (`rows`, 0-based) the network model has no power flow at: their readings cannot be held to it,
    and no model that consults it could use them (models.network_voltages)."""

    def __init__(self, field: str, refused: RowsRefused) -> None:
        super().__init__(field, refused.message, refused.expected)
        self.rows, self.reason, self.expected = refused.rows, refused.reason, refused.expected


SCATTER_EXPECTED = (
    f"readings whose scatter around a smooth function of the loads is at most {READING_SCATTER_PU:g} p.u.: a "
    f"meter's noise is below {METER_NOISE_PU:g} p.u."
)


class ScatteredReadings(InvalidInput):
    """Readings of `field`.y that scatter more than READING_SCATTER_PU around a smooth function of the loads: the
    noise std (`noise`) a Bayesian linear fit of their departure from the network model leaves at the worst bus
    (`bus`, the output's index; `column`, its name where known), over `rows` context rows."""

    def __init__(self, field: str, bus: int, noise: float, rows: int, column: str | None = None) -> None:
        self.bus, self.noise, self.rows, self.column, self.expected = bus, noise, rows, column, SCATTER_EXPECTED
        where = f"output {bus}" + (f" ({column})" if column else "")
        super().__init__(f"{field}.y", self.describe(where), SCATTER_EXPECTED)

    def describe(self, where: str) -> str:
        """The refusal with the bus named as `where` (the page names it by the file's column)."""
        return (
            f"readings at {where} scatter by {self.noise:.4f} p.u. (noise std) around a smooth function of the "
            f"loads, more than {READING_SCATTER_PU:g} p.u.: no meter scatters so (what a Bayesian linear fit on the "
            f"loads leaves of their departure from the network model's power flow, over the {self.rows} rows that "
            "read every metered bus and meter every load)"
        )


@dataclass(frozen=True)
class Scatter:
    """What `reading_scatter` finds: (k,) the readings' noise std per bus (NaN at a bus never read), the rows held
    to it, and the one reading likeliest a glitch (the highest `GlitchScores.score`): its row (0-based, in the
    context), bus, distance (p.u.) from what the fit of the other readings predicts there, that distance in its std
    (`far_z`), and that std (`far_spread`, p.u.); the rows whose readings all stand off the others' by one step
    (`stepped`, 0-based in the context, `stepped_rows`) and that step's median (`step_pu`, p.u.); (k,) the robust
    noise std per bus the glitch test holds readings to (`robust`, p.u., NaN at a bus never read)."""

    noise: np.ndarray
    rows: int
    far_row: int
    far_bus: int
    far_pu: float
    far_z: float
    far_spread: float
    stepped: np.ndarray
    step_pu: float
    robust: np.ndarray


STEP_EXPECTED = (
    "rows at one substation set point and tap position: drop the rows whose voltages all stepped (or the others), or "
    "split the context at the step"
)


class SteppedRows(InvalidInput):
    """Context rows whose every reading stands off what the other rows' follow by one shared step (a substation tap
    or set point that moved during the context): `rows` (0-based, in the context; every one), the step (p.u.), and
    the `reason` without the rows (the page's upload names its file rows)."""

    def __init__(self, field: str, rows: list[int], step: float) -> None:
        self.rows, self.step, self.expected = rows, step, STEP_EXPECTED
        self.reason = (
            f"read their buses about {step:+.4f} p.u. (the median over the row's buses) off what the other rows' "
            "readings follow at their loads: the substation's voltage (a tap or its set point) or a regulator stepped "
            "during the context, and every model takes them fixed for the whole context (it would answer between the "
            "two, off the truth at either)"
        )
        super().__init__(f"{field}.y[{rows[0]}]", f"{len(rows)} row(s) {rows_text(rows)} {self.reason}", STEP_EXPECTED)


GLITCH_EXPECTED = (
    f"each reading within {READING_GLITCH_PU:g} p.u. of the smooth function of the loads its bus's other readings "
    "follow: drop a glitched reading's row (or send the reading as null to network-fit, which takes gaps)"
)


class GlitchedReading(InvalidInput):
    """One reading far off the smooth function of the loads that its bus's other readings follow (a meter glitch, a
    reading from another time): every context-only model fits it as a voltage the feeder had and carries it to its
    answers (IEEE 33, exact readings but one 0.05 p.u. off: physics-fit 0.79x least squares, worst bus 0.93)."""

    def __init__(self, field: str, scatter: Scatter, column: str | None = None) -> None:
        self.row, self.bus, self.distance = scatter.far_row, scatter.far_bus, scatter.far_pu
        self.z, self.noise, self.expected = scatter.far_z, scatter.far_spread, GLITCH_EXPECTED
        where = f"output {self.bus}" + (f" ({column})" if column else "")
        super().__init__(
            f"{field}.y[{self.row}][{self.bus}]",
            f"the reading at row {self.row}, {where} lies {self.distance:.4f} p.u. off the smooth function of the "
            f"loads that its bus's other readings follow ({self.z:.3g} times that distance's std there, "
            f"{self.noise:.2g} p.u.), more than {READING_GLITCH_PU:g} p.u.: a glitch, no measurement of the feeder at "
            "that row",
            GLITCH_EXPECTED,
        )


def scatter_rows(x: np.ndarray, y: np.ndarray, typical: np.ndarray | None = None) -> np.ndarray:
    """The context rows the scatter check holds (0-based): those reading some bus and metering every load (no NaN
    in `x`), or, given the `typical` loads, leaving unmetered at most UNMETERED_SHARE of the row's typical load. A row
    that misses some bus's reading is held on the buses it reads (an attacker pass left one reading out of every
    row, and the check, which took only rows reading every metered bus, then took none)."""
    unmetered = np.isnan(x)
    if typical is None:
        loads_ok = ~unmetered.any(axis=1)
    else:
        size = np.abs(np.asarray(typical, dtype=np.float64))
        loads_ok = (unmetered * size).sum(axis=1) <= UNMETERED_SHARE * max(float(size.sum()), np.finfo(float).tiny)
    rows: np.ndarray = np.flatnonzero(~np.isnan(y).all(axis=1) & loads_ok)
    return rows


def fitted_rows(rows: np.ndarray) -> np.ndarray:
    """The rows of `rows` the scatter fit is made on: all of them, or SCATTER_MAX_ROWS evenly spaced."""
    if rows.size <= SCATTER_MAX_ROWS:
        return rows
    picked: np.ndarray = rows[np.linspace(0, rows.size - 1, SCATTER_MAX_ROWS).round().astype(np.int64)]
    return picked


def reading_scatter(x: np.ndarray, y: np.ndarray, v: np.ndarray, typical: np.ndarray | None = None) -> Scatter | None:
    """The readings' noise std per bus as the check infers it (`x` the reported loads, NaN where not metered; `y` the
    readings; `v` the network model's voltages at the rows' loads; `typical` the loads an unmetered one is taken at,
    None: only rows metering every load are held), the rows held to it and the reading likeliest a glitch
    (`Scatter`); None when fewer than SCATTER_MIN_ROWS rows qualify (`scatter_rows`).

    A Bayesian linear fit of the readings' departure from the network model on the loads, made on `fitted_rows`,
    gives the noise; every qualifying row is then held to that fit, and where their mean squared residual less the
    fit's own variance there is larger, its root is the answer: rows the fit did not take are checked too (an
    attacker pass hid 8,000 random rows of a 10,000-row context between the 2,000 evenly spaced ones the fit took:
    it was accepted). The glitch is judged on what the fit of the other readings predicts (`glitch_scores`)."""
    from models.linear import BayesianLinearRegression, posterior
    from models.network_fit import complete_loads

    rows = scatter_rows(x, y, typical)
    if rows.size < SCATTER_MIN_ROWS:
        return None
    metered = ~np.isnan(y[rows]).all(axis=0)
    departure = (y - v)[rows][:, metered]
    read = ~np.isnan(departure)
    fitted = np.zeros(rows.size, dtype=bool)
    fitted[np.searchsorted(rows, fitted_rows(rows))] = True
    loads = x[rows] if typical is None else complete_loads(x[rows], typical)
    # a reading a row misses takes the fit's value there (first its bus's mean departure), fitted again
    mean = np.where(read, departure, 0.0).sum(axis=0) / np.maximum(read.sum(axis=0), 1)
    filled = np.where(read, departure, mean)
    for _ in range(1 if read.all() else IMPUTATION_PASSES):
        inputs = filled
        fit = BayesianLinearRegression().fit(loads[fitted], inputs[fitted])
        at = posterior(fit, loads, readings=False)  # the fit's own uncertainty there is no reading's noise
        filled = np.where(read, departure, at.mean)
    # held on the readings taken only (an imputed one sits on the fit)
    excess = np.where(read, np.square(filled - at.mean) - np.square(at.std), 0.0)
    held = excess.sum(axis=0) / np.maximum(read.sum(axis=0), 1)
    noise = np.full(y.shape[1], np.nan)
    noise[metered] = np.maximum(fit.noise_std, np.sqrt(np.maximum(held, 0.0)))
    scores = glitch_scores(loads, departure, read, fitted, fit, inputs, at)
    row, bus = np.unravel_index(int(np.argmax(scores.score)), scores.score.shape)
    far_bus = int(np.flatnonzero(metered)[bus])
    # the step test holds the rows metered alike (every load, or all but those never metered): a row that leaves a
    # load it meters elsewhere at its typical value moves by that load's departure from it (a PV bus exporting,
    # taken at its typical draw, moved rows 5-8e-3 p.u. and was refused as a step)
    never = np.isnan(x).all(axis=0)
    alike = np.flatnonzero((np.isnan(x[rows]) == never).all(axis=1))
    floor = STEP_PU if alike.size >= STEP_MIN_ROWS else READING_GLITCH_PU
    stepped = alike[stepped_rows(scores.shared[alike], floor)] if alike.size else alike
    robust = np.full(y.shape[1], np.nan)
    robust[metered] = scores.noise
    return Scatter(
        noise,
        int(rows.size),
        int(rows[row]),
        far_bus,
        float(np.abs(scores.distance[row, bus])),
        float(scores.z[row, bus]),
        float(scores.spread[row, bus]),
        rows[stepped],
        float(np.median(scores.shared[stepped] - np.median(scores.shared))) if stepped.size else 0.0,
        robust,
    )


def stepped_rows(shared: np.ndarray, floor: float) -> np.ndarray:
    """The rows (indices into `shared`, each row's median held-out departure over its buses) standing more than
    `floor` (p.u.) and STEP_Z robust scales off the rows' median: a set point or tap that moved for them
    (SteppedRows)."""
    deviation = shared - np.median(shared)
    scale = GLITCH_MAD * float(np.median(np.abs(deviation)))
    out: np.ndarray = np.flatnonzero(np.abs(deviation) > max(floor, STEP_Z * scale))
    return out


@dataclass(frozen=True)
class GlitchScores:
    """Per reading (n, k): its distance (p.u.) from what the fit of the other readings predicts at its row, less the
    row's median such distance over its buses; that distance's std (`spread`, p.u.: its bus's robust noise std
    times its leave-one-out factor, inf where the others say nothing there); the distance in that std (`z`); and the
    glitch score min(|distance| / READING_GLITCH_PU, z / GLITCH_Z), over 1 for a glitch (-inf where not read)."""

    distance: np.ndarray
    z: np.ndarray
    score: np.ndarray
    spread: np.ndarray
    shared: np.ndarray  # (n,) each row's median held-out departure over its buses (what a moved set point shifts)
    noise: np.ndarray  # (k,) each bus's robust noise std (p.u.): GLITCH_MAD x its median held-out distance


def held_out(
    fit: LinearFit, loads: np.ndarray, fitted: np.ndarray, inputs: np.ndarray, at: GaussianPredictive
) -> tuple[np.ndarray, np.ndarray]:
    """Each value's distance from what the fit of the other rows predicts at its row (n, k), and that distance's std
    in noise stds: the glitch is held to what it did not shape.

    The fit is ridge on the standardised, centred loads (thin SVD U S V', m fitted rows) with penalty g = lam / alpha
    per bus (its prior precision over its noise precision; the intercept flat). Its hat is 11'/m + U diag(s^2 / (s^2 +
    g)) U', so a fitted row's leave-one-out residual is e_i / (1 - h_i), with
        1 - h_i = (1 - 1/m - sum_j u_ij^2) + sum_j u_ij^2 g / (s_j^2 + g)
        e_i = (y - U U'y)_i + sum_j u_ij (U'y)_j g / (s_j^2 + g)
    (the first terms 0 where the centred rows span all m - 1 directions: never 1 - (almost 1), so a nearly
    interpolating fit keeps its finite minimum-norm limit), and its predictive variance is sigma^2 / (1 - h_i)
    (Sherman-Morrison: sigma^2 (1 + x'(A - xx')^-1 x) with x'A^-1 x = h_i): std 1 / sqrt(1 - h_i) noise stds. A row
    the fit did not take is held out already: e_i, std sqrt(1 + var_f / sigma^2). A row with h_i near 1 is alone
    along some direction of the loads: the others' guess there carries nothing, its std is unbounded (infinite at
    h_i = 1), and it is never far in stds."""
    e = inputs - at.mean
    std = np.sqrt(1.0 + np.square(at.std / fit.noise_std))
    proj = ((loads[fitted] - fit.x_mean) / fit.x_scale) @ fit.vt.T  # (m, r): U S
    m, r = proj.shape
    s = np.sqrt(np.square(proj).sum(axis=0))
    u = proj / np.where(s > 0.0, s, 1.0)
    assert fit.lam is not None  # a Bayesian fit's prior precision
    damp = fit.lam[None, :] / fit.param_prec  # g / (s^2 + g) = lam / (alpha s^2 + lam), per direction and bus
    if r >= m - 1:  # nearly interpolating: the residual from its parts, never (almost y) - (almost y)
        along = u.T @ ((inputs[fitted] - fit.y_mean) / fit.y_scale)
        resid, one_less = u @ (damp * along) * fit.y_scale, np.square(u) @ damp
    else:  # the in-sample residual is exact enough (1e-15 p.u.), and three (m, r) x (r, k) products cheaper
        outside = np.clip(1.0 - 1.0 / m - np.square(u).sum(axis=1, keepdims=True), 0.0, None)
        resid, one_less = e[fitted], outside + np.square(u) @ damp
    info = one_less > 0.0
    one_less = np.where(info, one_less, 1.0)
    e[fitted] = np.where(info, resid / one_less, 0.0)
    std[fitted] = np.where(info, 1.0 / np.sqrt(one_less), np.inf)
    return e, std


def glitch_scores(
    loads: np.ndarray,
    departure: np.ndarray,
    read: np.ndarray,
    fitted: np.ndarray,
    fit: LinearFit,
    inputs: np.ndarray,
    at: GaussianPredictive,
) -> GlitchScores:
    """`GlitchScores` of the readings' departures (`read` where taken) under the scatter fit (`fit`, made on the
    `fitted` rows' `inputs`, its function `at` every row).

    Each reading is held to what the fit of the OTHER readings predicts (`held_out`): a fit that nearly interpolates
    (64 rows of IEEE 33's 64 loads) absorbs a glitch into its own residual (a 0.15 p.u. one passed). Its std is in a
    robust noise std per bus (GLITCH_MAD x the median absolute standardised distance), not the fit's: 8 readings of
    500 0.05 p.u. off on one bus made its fitted noise std 6.2e-3 and passed under GLITCH_Z of it. The readings
    over READING_GLITCH_PU (at most GLITCH_LEFT_OUT of a bus's) are then left out of a second fit, where they take
    what the first predicted there, and every reading is judged again: a glitch pulls its bus's prior and noise
    towards itself (16 rows: a 0.05 p.u. glitch is 10 of its stds off the first fit, 22-68 off the second)."""
    from models.linear import BayesianLinearRegression, posterior

    complete = bool(read.all())
    with _blas().limit(limits=1, user_api="blas"):  # small products: one thread is fastest, as models.linear finds
        raw, std = held_out(fit, loads, fitted, inputs, at)
        raw = raw if complete else np.where(read, raw, np.nan)
        shared = _row_median(raw, read)
        distance = raw - shared
        suspect = _suspects(distance, read)
        if suspect.any():
            guess = np.where(suspect, departure - raw, inputs)  # what the fit of the others predicted there
            fit = BayesianLinearRegression().fit(loads[fitted], guess[fitted])
            at = posterior(fit, loads, readings=False)
            raw, std = held_out(fit, loads, fitted, guess, at)
            raw = np.where(suspect, raw + departure - guess, raw)
            for bus in _sparse(suspect, read, fitted, raw):
                own = read[:, bus]
                taken = own & fitted & ~suspect[:, bus]
                alone = BayesianLinearRegression().fit(loads[taken], departure[taken, bus : bus + 1])
                there = posterior(alone, loads[own], readings=False)
                held, spread = held_out(alone, loads[own], taken[own], departure[own, bus : bus + 1], there)
                raw[own, bus], std[own, bus] = held[:, 0], spread[:, 0]
            raw = raw if complete else np.where(read, raw, np.nan)
            shared = _row_median(raw, read)
            distance = raw - shared
    far = np.abs(distance)  # NaN where not read
    unit = far / std
    # the fitted rows' median (a scale: SCATTER_MAX_ROWS of them tell it), over every reading: a few glitches barely
    # move it, and leaving the suspects out would halve a noisy bus's
    typical = np.median(unit[fitted], axis=0) if complete else np.nanmedian(unit[fitted], axis=0)
    spread = np.maximum(GLITCH_MAD * np.nan_to_num(typical, nan=np.inf) * std, NOISE_FLOOR_PU)  # inf: no guess there
    z = far / spread
    score = np.minimum(far / READING_GLITCH_PU, z / GLITCH_Z if GLITCH_Z > 0 else np.inf)
    scored = score if complete else np.where(read, score, -np.inf)
    return GlitchScores(distance, z, scored, spread, shared[:, 0], GLITCH_MAD * typical)


@functools.cache
def _blas() -> Any:
    """The process's BLAS libraries, found once (threadpool_limits looks them up at every call: 1.5 ms)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _row_median(values: np.ndarray, read: np.ndarray) -> np.ndarray:
    """(n, 1) each row's median over the buses it reads (0 under 3 buses), taken out of its readings' distances: a
    tap or regulator stepping for a few rows moves every bus below it alike (2 steps on 5 of 500 IEEE 33 rows were
    refused as a glitch; helper-60), a glitch moves one."""
    if values.shape[1] < 3:
        return np.zeros((values.shape[0], 1))
    median: np.ndarray = (
        np.median(values, axis=1, keepdims=True) if read.all() else np.nanmedian(values, axis=1, keepdims=True)
    )
    return median


def _sparse(suspect: np.ndarray, read: np.ndarray, fitted: np.ndarray, raw: np.ndarray) -> list[int]:
    """The buses holding a suspect read in under half the fitted rows (and in GLITCH_OWN_MIN others), at most
    GLITCH_OWN_FITS of them, farthest suspect first: each is fitted again on its own readings, the suspects left out.
    Imputed, the readings it misses sit on a fit three passes could not pull from its mean: a bus read in 10 of 500
    rows scattered 6-8e-3 p.u. around it, a 0.05 p.u. glitch 5-7 of those stds off; on its own, 1-3e-3 and 17-39."""
    taken = (read & fitted[:, None] & ~suspect).sum(axis=0)
    sparse = suspect.any(axis=0) & (2 * (read & fitted[:, None]).sum(axis=0) < fitted.sum()) & (taken >= GLITCH_OWN_MIN)
    far = np.where(suspect, np.abs(raw), 0.0).max(axis=0)
    return [int(b) for b in np.flatnonzero(sparse)[np.argsort(-far[sparse])][:GLITCH_OWN_FITS]]


def _suspects(distance: np.ndarray, read: np.ndarray) -> np.ndarray:
    """The readings over READING_GLITCH_PU from the fit of the others, at most GLITCH_LEFT_OUT of each bus's (its
    farthest): those a second fit leaves out."""
    far = np.abs(distance)  # NaN where not read: no suspect
    suspect: np.ndarray = far > READING_GLITCH_PU
    if not suspect.any():
        return suspect
    far = np.nan_to_num(far, nan=0.0)
    cap = np.floor(GLITCH_LEFT_OUT * read.sum(axis=0)).astype(np.int64)
    for bus in np.flatnonzero(suspect.sum(axis=0) > cap):
        keep = np.argsort(-far[:, bus])[: cap[bus]]
        suspect[:, bus] = False
        suspect[keep, bus] = True
    return suspect


def _solves(voltage_model: Callable[[np.ndarray], np.ndarray], loads: np.ndarray) -> bool:
    """Whether the network model has a power flow at every row of `loads`."""
    return bool(np.isfinite(np.asarray(voltage_model(loads), dtype=np.float64)).all())


def summary(readings: int, rows: int) -> str:
    return (
        f"{readings} reading(s) in {rows} row(s) lie farther than {READING_TOLERANCE_PU:g} p.u. from the network "
        "model's power flow at their row's loads: no measurement of this feeder"
    )


def check_readings(
    voltage_model: Callable[[np.ndarray], np.ndarray],
    ctx: ContextSet,
    typical: np.ndarray,
    field: str,
    outputs: Sequence[str] = (),
    own: np.ndarray | None = None,
) -> None:
    """ReadingsRefused naming the context's readings farther than READING_TOLERANCE_PU from the network model,
    UnsolvedRows naming its rows without a power flow, ScatteredReadings naming the bus whose readings scatter
    more than READING_SCATTER_PU (by its name in `outputs` too, where given), GlitchedReading naming one reading off
    what the others predict; nothing when every reading is consistent. `typical`: the loads an unmetered one is
    taken at where the context gives none (service.engine.sparse.typical_loads: as network-fit takes them); `own`:
    the service's own guess of them where the context gives its typical_loads, which are named where rows have a power
    flow at that guess and none at the values given (a units slip: 100x its loads was refused as `field`.x, which the
    user had sent right)."""
    from models.network_fit import complete_loads
    from models.network_voltages import solved

    typical = np.asarray(typical if ctx.typical_loads is None else ctx.typical_loads, dtype=np.float64)
    loads = complete_loads(ctx.x, typical)
    v = np.empty_like(ctx.y)
    for start in range(0, len(loads), CHECK_BLOCK):
        stop = min(start + CHECK_BLOCK, len(loads))
        try:
            v[start:stop] = solved(voltage_model, loads[start:stop], f"{field}.x")
        except RowsRefused as exc:  # named in the context's numbering; the rows after this block are not solved
            unchecked = f" (rows from {stop} on not solved)" if stop < len(loads) else ""
            refused = RowsRefused(exc.field, [start + r for r in exc.rows], exc.reason + unchecked, exc.expected)
            # the refused rows (this block's only: such a row iterates to the solver's limit) at the service's own guess
            at_own = None if own is None else complete_loads(ctx.x[start:stop][exc.rows], own)
            if at_own is not None and np.isnan(ctx.x).any() and _solves(voltage_model, at_own):
                reason = (
                    f"{exc.reason} with the unmetered loads at typical_loads (at the service's own guess, it does)"
                    f"{unchecked}"
                )
                expected = "each load input's typical value in x's units (MW, Mvar) and order, or none"
                given = RowsRefused(exc.field, refused.rows, reason, expected)
                raise UnsolvedRows(f"{field}.typical_loads", given) from exc
            raise UnsolvedRows(f"{field}.x", refused) from exc
    off = np.abs(ctx.y - v) > READING_TOLERANCE_PU  # a reading not taken (NaN) compares False
    if off.any() and own is not None and np.isnan(ctx.x).any():
        # near the model at the service's own guess of the unmetered loads: the values given are what is off (a
        # user's typical_loads at -100x were refused as context.y, read right)
        far = off.any(axis=1)  # only those rows: the others lie near the model at the values given
        at_own = np.asarray(voltage_model(complete_loads(ctx.x[far], own)), dtype=np.float64)
        if np.isfinite(at_own).all() and not (np.abs(ctx.y[far] - at_own) > READING_TOLERANCE_PU).any():
            raise InvalidInput(
                f"{field}.typical_loads",
                f"{int(off.sum())} reading(s) in {int(off.any(axis=1).sum())} row(s) lie farther than "
                f"{READING_TOLERANCE_PU:g} p.u. from the network model's power flow with the unmetered loads at these "
                "values (at the service's own guess, none does)",
                "each load input's typical value in x's units (MW, Mvar) and order, or none",
            )
    if off.any():
        rows = np.flatnonzero(off.any(axis=1))
        # each row's first far reading, as a row of numbers stops at its first bad cell
        first = off[rows].argmax(axis=1)
        far = [
            FarReading(int(r), int(b), float(ctx.y[r, b]), float(v[r, b]), bool(np.isnan(ctx.x[r]).any()))
            for r, b in zip(rows[:ROWS_SHOWN], first[:ROWS_SHOWN], strict=True)
        ]
        raise ReadingsRefused(field, far, int(rows.size), int(off.sum()))
    scatter = reading_scatter(ctx.x, ctx.y, v, typical)
    if scatter is None:
        return
    glitched = scatter.far_pu > READING_GLITCH_PU and scatter.far_z > GLITCH_Z
    worst = int(np.nanargmax(scatter.noise))
    # a bus whose readings scatter only through a few of them (its robust noise within the limit) is named by those:
    # the stepped rows, or the glitch's cell (a user trial's one 0.15 p.u. reading in 16 rows was refused as the
    # whole bus's scatter, a bad meter)
    few = scatter.robust[worst] <= READING_SCATTER_PU and (
        scatter.stepped.size > 0 or (glitched and worst == scatter.far_bus)
    )
    if scatter.noise[worst] > READING_SCATTER_PU and not few:
        column = outputs[worst] if worst < len(outputs) else None
        raise ScatteredReadings(field, worst, float(scatter.noise[worst]), scatter.rows, column)
    if scatter.stepped.size:
        raise SteppedRows(field, [int(r) for r in scatter.stepped], scatter.step_pu)
    if glitched:
        bus = scatter.far_bus
        column = outputs[bus] if bus < len(outputs) else None
        raise GlitchedReading(field, scatter, column)


class Readings:
    """The check, run in the worker pool (`run`) once per context id and kept; a power-flow model per network."""

    def __init__(self, run: Callable[..., Awaitable[Any]]) -> None:
        self.run = run
        self.consistent: OrderedDict[str, None] = OrderedDict()
        self.models: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # the models are built in worker threads

    async def checked(self, ctx: ContextSet, net: Any, field: str) -> ContextSet:
        """`ctx` once its readings are consistent with the network `net` (a gridsim Network); ReadingsRefused,
        UnsolvedRows or ScatteredReadings naming `field`'s cells, rows or bus otherwise."""
        if ctx.id in self.consistent:
            self.consistent.move_to_end(ctx.id)
            return ctx
        await self.run(self._check, ctx, net, field)
        self.consistent[ctx.id] = None
        while len(self.consistent) > CHECKED_KEEP:
            self.consistent.popitem(last=False)
        return ctx

    def _check(self, ctx: ContextSet, net: Any, field: str) -> None:
        typical = sparse.typical_loads(ctx.typical_loads, net, ctx.x)  # as network-fit takes the unmetered loads
        own = None if ctx.typical_loads is None else sparse.typical_loads(None, net, ctx.x)
        check_readings(self._model(net), ctx, typical, field, net.output_names, own)

    def _model(self, net: Any) -> Any:
        """The network's power-flow model (gridsim.api.VoltageModel: its impedance matrix reduced once)."""
        from gridsim.api import VoltageModel

        with self._lock:
            model = self.models.get(net.name)
            if model is None:
                model = self.models[net.name] = VoltageModel(net)
                while len(self.models) > MODELS_KEEP:
                    self.models.popitem(last=False)
            self.models.move_to_end(net.name)
            return model

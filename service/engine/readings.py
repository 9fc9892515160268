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
bus); so is one reading farther than READING_GLITCH_PU and GLITCH_Z noise stds off that fit (GlitchedReading, naming
the cell: a glitch among exact readings is no noise, and the models fitted it). The fit takes the rows that read every
metered bus (a bus read in some row) and meter every load: an unmetered load is solved at its typical value, and
its departure from that is no function of the reported loads (no load metered: 0.036 p.u. "noise" on IEEE 33 at
0.3-1.6x load). Under SCATTER_MIN_ROWS such rows the noise cannot be told from the fit and the check is skipped;
over SCATTER_MAX_ROWS, evenly spaced ones are fitted and every row is held to that fit.

Checked once per context id in each process (an inline context sent with every request pays it once), in the
worker pool. A simulated context (POST /v1/context-sets `simulate`) is the network model's own power flow and is
not checked.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
from service.engine.context_sets import ContextSet
from service.engine.errors import InvalidInput

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
# A reading is a glitch (GlitchedReading) where it lies over READING_GLITCH_PU off the scatter fit and over this many
# of its bus's noise stds (its own included): a normal reading is that far out with probability 1e-15.
GLITCH_Z = 8.0
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
            "; this row's unmetered loads are taken at their typical values (typical_loads, else the network's "
            "base loads): if they were far from those, meter them or send the row without this reading"
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
    to it, and the one reading farthest from the fit: its row (0-based, in the context), bus and distance (p.u.)."""

    noise: np.ndarray
    rows: int
    far_row: int
    far_bus: int
    far_pu: float


GLITCH_EXPECTED = (
    f"each reading within {READING_GLITCH_PU:g} p.u. of the smooth function of the loads its bus's other readings "
    "follow: drop a glitched reading's row (or send the reading as null to network-fit, which takes gaps)"
)


class GlitchedReading(InvalidInput):
    """One reading far off the smooth function of the loads that its bus's other readings follow (a meter glitch, a
    reading from another time): every context-only model fits it as a voltage the feeder had and carries it to its
    answers (IEEE 33, exact readings but one 0.05 p.u. off: physics-fit 0.79x least squares, worst bus 0.93)."""

    def __init__(self, field: str, scatter: Scatter, noise: float, column: str | None = None) -> None:
        self.row, self.bus, self.distance = scatter.far_row, scatter.far_bus, scatter.far_pu
        self.expected = GLITCH_EXPECTED
        where = f"output {self.bus}" + (f" ({column})" if column else "")
        super().__init__(
            f"{field}.y[{self.row}][{self.bus}]",
            f"the reading at row {self.row}, {where} lies {self.distance:.4f} p.u. off the smooth function of the "
            f"loads that its bus's other readings follow (their noise std {noise:.2g} p.u.), more than "
            f"{READING_GLITCH_PU:g} p.u.: a glitch, no measurement of the feeder at that row",
            GLITCH_EXPECTED,
        )


def scatter_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The context rows the scatter check holds (0-based): those metering every load (no NaN in `x`) and reading
    some bus. A row that misses some bus's reading is held on the buses it reads (an attacker pass left one
    reading out of every row, and the check, which took only rows reading every metered bus, then took none)."""
    rows: np.ndarray = np.flatnonzero(~np.isnan(y).all(axis=1) & ~np.isnan(x).any(axis=1))
    return rows


def fitted_rows(rows: np.ndarray) -> np.ndarray:
    """The rows of `rows` the scatter fit is made on: all of them, or SCATTER_MAX_ROWS evenly spaced."""
    if rows.size <= SCATTER_MAX_ROWS:
        return rows
    picked: np.ndarray = rows[np.linspace(0, rows.size - 1, SCATTER_MAX_ROWS).round().astype(np.int64)]
    return picked


def reading_scatter(x: np.ndarray, y: np.ndarray, v: np.ndarray) -> Scatter | None:
    """The readings' noise std per bus as the check infers it (`x` the reported loads, NaN where not metered; `y` the
    readings; `v` the network model's voltages at the rows' loads), the rows held to it and the reading farthest
    from the fit (`Scatter`); None when fewer than SCATTER_MIN_ROWS rows qualify (`scatter_rows`).

    A Bayesian linear fit of the readings' departure from the network model on the loads, made on `fitted_rows`,
    gives the noise; every qualifying row is then held to that fit, and where their mean squared residual less the
    fit's own variance there is larger, its root is the answer: rows the fit did not take are checked too (an
    attacker pass hid 8,000 random rows of a 10,000-row context between the 2,000 evenly spaced ones the fit took:
    it was accepted)."""
    from models.linear import BayesianLinearRegression, posterior

    rows = scatter_rows(x, y)
    if rows.size < SCATTER_MIN_ROWS:
        return None
    metered = ~np.isnan(y[rows]).all(axis=0)
    departure = (y - v)[rows][:, metered]
    read = ~np.isnan(departure)
    fitted = np.searchsorted(rows, fitted_rows(rows))
    # a reading a row misses takes the fit's value there (first its bus's mean departure), fitted again
    mean = np.where(read, departure, 0.0).sum(axis=0) / np.maximum(read.sum(axis=0), 1)
    filled = np.where(read, departure, mean)
    for _ in range(1 if read.all() else IMPUTATION_PASSES):
        fit = BayesianLinearRegression().fit(x[rows][fitted], filled[fitted])
        at = posterior(fit, x[rows], readings=False)  # the fit's own uncertainty there is no reading's noise
        filled = np.where(read, departure, at.mean)
    # held on the readings taken only (an imputed one sits on the fit)
    excess = np.where(read, np.square(filled - at.mean) - np.square(at.std), 0.0)
    held = excess.sum(axis=0) / np.maximum(read.sum(axis=0), 1)
    noise = np.full(y.shape[1], np.nan)
    noise[metered] = np.maximum(fit.noise_std, np.sqrt(np.maximum(held, 0.0)))
    # less each row's median over its buses: a tap or regulator stepping for a few rows moves every bus below it
    # alike (2 steps on 5 of 500 IEEE 33 rows were refused as a glitch; helper-60), a glitch moves one
    residual = np.where(read, filled - at.mean, np.nan)
    shared = np.nanmedian(residual, axis=1, keepdims=True) if residual.shape[1] >= 3 else 0.0
    off = np.where(read, np.abs(residual - shared), 0.0)
    row, bus = np.unravel_index(int(np.argmax(off)), off.shape)
    far_bus = int(np.flatnonzero(metered)[bus])
    return Scatter(noise, int(rows.size), int(rows[row]), far_bus, float(off[row, bus]))


def summary(readings: int, rows: int) -> str:
    return (
        f"{readings} reading(s) in {rows} row(s) lie farther than {READING_TOLERANCE_PU:g} p.u. from the network "
        "model's power flow at their row's loads: no measurement of this feeder"
    )


def check_readings(
    voltage_model: Callable[[np.ndarray], np.ndarray],
    ctx: ContextSet,
    base_x: np.ndarray,
    field: str,
    outputs: Sequence[str] = (),
) -> None:
    """ReadingsRefused naming the context's readings farther than READING_TOLERANCE_PU from the network model,
    UnsolvedRows naming its rows without a power flow, ScatteredReadings naming the bus whose readings scatter
    more than READING_SCATTER_PU (by its name in `outputs` too, where given); nothing when every reading is
    consistent."""
    from models.network_fit import complete_loads
    from models.network_voltages import solved

    loads = complete_loads(ctx.x, base_x if ctx.typical_loads is None else ctx.typical_loads)
    v = np.empty_like(ctx.y)
    for start in range(0, len(loads), CHECK_BLOCK):
        stop = min(start + CHECK_BLOCK, len(loads))
        try:
            v[start:stop] = solved(voltage_model, loads[start:stop], f"{field}.x")
        except RowsRefused as exc:  # named in the context's numbering; the rows after this block are not solved
            unchecked = f" (rows from {stop} on not solved)" if stop < len(loads) else ""
            refused = RowsRefused(exc.field, [start + r for r in exc.rows], exc.reason + unchecked, exc.expected)
            raise UnsolvedRows(f"{field}.x", refused) from exc
    off = np.abs(ctx.y - v) > READING_TOLERANCE_PU  # a reading not taken (NaN) compares False
    if off.any():
        rows = np.flatnonzero(off.any(axis=1))
        # each row's first far reading, as a row of numbers stops at its first bad cell
        first = off[rows].argmax(axis=1)
        far = [
            FarReading(int(r), int(b), float(ctx.y[r, b]), float(v[r, b]), bool(np.isnan(ctx.x[r]).any()))
            for r, b in zip(rows[:ROWS_SHOWN], first[:ROWS_SHOWN], strict=True)
        ]
        raise ReadingsRefused(field, far, int(rows.size), int(off.sum()))
    scatter = reading_scatter(ctx.x, ctx.y, v)
    if scatter is None:
        return
    worst = int(np.nanargmax(scatter.noise))
    if scatter.noise[worst] > READING_SCATTER_PU:
        column = outputs[worst] if worst < len(outputs) else None
        raise ScatteredReadings(field, worst, float(scatter.noise[worst]), scatter.rows, column)
    if scatter.far_pu > max(READING_GLITCH_PU, GLITCH_Z * float(scatter.noise[scatter.far_bus])):
        bus = scatter.far_bus
        column = outputs[bus] if bus < len(outputs) else None
        raise GlitchedReading(field, scatter, float(scatter.noise[bus]), column)


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
        check_readings(self._model(net), ctx, net.base_x, field, net.output_names)

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

"""POST /v1/hosting-capacity's flow: a study's rows and candidates checked, the model fitted on the
context (the same cached encoding predict uses), models.hosting_capacity run in a pool worker.

The rows come as JSON (`loads`, or the base consumption x `load_scales`) or from an uploaded profile table
(service.engine.profile_table, as a study's time series): the network's base loads shaped per step by its
`load` and `pv` columns and its customer classes' profiles (one default scenario of gridsim.scenarios), the
new PV following the table's `pv` share, times the column `pv_profile` names when given.

A study asks the model for at most (2 + bisection steps + curve points) x candidates x rows query rows
(models.hosting_capacity.passes); that product is bounded by GRIDPFN_MAX_STUDY_ROWS before any work,
so a small body cannot ask for minutes of model time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gridsim.errors import NetworkError
from gridsim.network import Network
from gridsim.scenarios import Classes, Scenario, expand
from models.errors import RowsRefused, rows_text
from models.hosting_capacity import HostingCapacity, HostingCapacityStudy, check_base_rows, hosting_capacity, passes
from service.engine.answers import Source
from service.engine.checks import load_rows
from service.engine.errors import InputRejected, InvalidInput, TooLarge
from service.engine.inference import model_and_context
from service.engine.load_table import LOAD_LIMIT, InputError
from service.engine.profile_table import (
    TIME_COLUMNS,
    ProfileFile,
    ProfileTable,
    check_class_columns,
    column_limit,
    read,
    time_series,
    wanted_columns,
)
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant

# The base loads scaled by these when a study gives no rows: light load with PV at full output is where
# voltages rise most, full load shows whether the band holds without PV.
DEFAULT_SCALES = (0.3, 0.6, 1.0)


@dataclass(frozen=True)
class HostingAnswer:
    source: Source
    buses: list[int]
    bus_names: list[str]
    result: HostingCapacity
    rows: int
    max_kw: float
    seconds: float
    context_cached: bool
    ignored_columns: tuple[str, ...] = ()  # an uploaded profile table's columns the study did not read


def _rows(req: Any, net: Any) -> np.ndarray:
    """The study's rows: as given, or the base consumption x each scale with the network's own generation
    at full output (scaling consumption leaves generation: light load with every PV producing is the
    case that lifts voltages most)."""
    if req.loads is not None:
        return load_rows(req.loads, net, "loads")
    scales = req.load_scales if req.load_scales is not None else DEFAULT_SCALES
    return np.stack([net.base_consumption * float(s) - net.base_generation for s in scales])


def _candidates(req: Any, net: Any) -> tuple[list[int], np.ndarray]:
    """Bus numbers and their P features' positions; every load bus by default."""
    numbers = list(net.load_buses)
    if req.buses is None:
        return numbers, np.arange(len(numbers))
    unknown = [b for b in req.buses if b not in numbers]
    if unknown:
        raise InvalidInput("buses", f"buses {unknown} are not load buses of {net.name}", f"some of {numbers}")
    if len(set(req.buses)) != len(req.buses):
        raise InvalidInput("buses", "a bus is named twice", "distinct bus numbers")
    return list(req.buses), np.array([numbers.index(b) for b in req.buses])


def _profile(req: Any, rows: int) -> np.ndarray:
    if req.pv_profile is None:
        return np.ones(rows)
    if len(req.pv_profile) != rows:
        raise InvalidInput(
            "pv_profile", f"{len(req.pv_profile)} values for {rows} load rows", f"{rows} values in [0, 1]"
        )
    return np.asarray(req.pv_profile, dtype=np.float64)


@dataclass(frozen=True)
class TableRows:
    """A profile table's study rows (steps, features), the new PV's share per step, the columns not read."""

    loads: np.ndarray
    profile: np.ndarray
    ignored: tuple[str, ...]
    timestamps: tuple[str, ...] = ()  # the steps' labels: a row refused is named by its step


def _reserved(name: str, net: Network) -> bool:
    """A column name a profile table gives a fixed meaning (the time, the overall and per-bus factors)."""
    buses = {f"{kind}_bus{bus}" for bus in net.load_buses for kind in ("load", "pv")}
    return name in TIME_COLUMNS or name in ("load", "pv") or name in buses


def _pv_profile_name(req: Any, net: Network) -> str | None:
    """The table column the new PV follows besides `pv` (None: `pv` alone); a reserved name is refused."""
    name: str | None = req.pv_profile
    if name is not None and _reserved(name, net):
        raise InvalidInput(
            "pv_profile",
            f"{name!r} is not a profile column: the new PV follows the table's `pv` share already"
            if name == "pv"
            else f"{name!r} is a column with a fixed meaning (time, load, pv, load_bus<k>, pv_bus<k>)",
            "the name of a profile column of the table (e.g. SimBench's PV5), or no pv_profile (the `pv` column "
            "alone, full output without one)",
        )
    return name


def _new_pv_share(table: ProfileTable, name: str | None) -> np.ndarray:
    """(steps,) the new PV's output share: `pv` x the `name` column (each 1 when absent), within [0, 1];
    a value outside is refused naming its row (1-based) and column."""
    share = np.ones(len(table.timestamps))
    for column in ("pv", name):
        if column is None or column not in table.columns:
            continue
        values = table.columns[column]
        bad = np.flatnonzero((values < 0.0) | (values > 1.0))
        if bad.size:
            raise InputError(
                f"{values[bad[0]]:g} is outside [0, 1]: the new PV's output share follows this column",
                "the new PV's output share per step, within [0, 1] (a hosting-capacity study's PV never draws "
                "power nor produces more than its size)",
                int(bad[0]) + 1,
                column,
            )
        share = share * values
    return share


def table_rows(
    table: ProfileTable, net: Network, classes: Classes, pv_name: str | None, defined: tuple[str, ...] = ()
) -> TableRows:
    """A read profile table as a hosting-capacity study's rows: the network's base loads shaped by the table as
    a study's default scenario shapes them (consumption x `load` x its class's profile, generation x `pv` x its
    class's profile), and the new PV's share per step. Per-bus `pv_bus<k>` columns are refused (the new PV
    follows one share per step at every candidate), as is a class the request defines (`defined`) without a
    column (profile_table.check_class_columns), and loads beyond LOAD_LIMIT named by their row."""
    pv_columns = {f"pv_bus{bus}" for bus in net.load_buses}
    per_bus = next((name for name in table.columns if name in pv_columns), None)
    if per_bus is not None:
        raise InputError(
            "a per-bus PV column: a hosting-capacity study's new PV follows one output share per step, the same "
            "at every candidate bus",
            "`pv` (every bus's generation and the new PV) and profiles by name; per-bus pv_bus<k> columns only in "
            "POST /v1/studies",
            column=per_bus,
        )
    if pv_name is not None and pv_name not in table.columns:
        profiles = sorted(name for name in (*table.columns, *table.ignored) if not _reserved(name, net))
        raise InvalidInput(
            "pv_profile",
            f"no column {pv_name!r} in the profile table",
            f"one of its profile columns {profiles[:20]}, or no pv_profile",
        )
    check_class_columns(table, defined, [pv_name] if pv_name is not None else [])
    profile = _new_pv_share(table, pv_name)
    series = time_series(table, net, 0.25)  # step_hours: no hours in a hosting-capacity answer
    try:
        loads = expand(net, [Scenario("hosting capacity")], series, classes).rows
    except NetworkError as exc:
        raise InvalidInput(exc.field, exc.problem, exc.expected) from None
    bad = np.flatnonzero(~(np.abs(loads) <= LOAD_LIMIT).all(axis=1))
    if bad.size:
        raise InputError(
            f"a load beyond {LOAD_LIMIT:g} MW once the factors are applied ({bad.size} such row(s))",
            f"loads within +-{LOAD_LIMIT:g} MW / Mvar after the table's factors",
            int(bad[0]) + 1,
        )
    return TableRows(loads, profile, table.ignored, table.timestamps)


def _table_classes(req: Any, net: Network) -> Classes:
    """The request's classes (lists of load buses) in place of the network's own, when it defines any."""
    try:
        return Classes.of(net) if req.classes is None else Classes.of_buses(net, req.classes)
    except NetworkError as exc:
        raise InvalidInput(exc.field, exc.problem, exc.expected) from None


def read_rows(
    path: Path,
    filename: str | None,
    net: Network,
    classes: Classes,
    pv_name: str | None,
    max_rows: int,
    defined: tuple[str, ...] = (),
) -> TableRows:
    """The table at `path` read (only the columns the study uses, at most `max_rows` steps) into its rows;
    `defined`: the classes the request defines (each needs a column)."""
    wanted = wanted_columns(net, classes, [pv_name] if pv_name is not None else [])
    return table_rows(read(path, filename, wanted, max_rows, column_limit(net)), net, classes, pv_name, defined)


@dataclass(frozen=True)
class PreparedHosting:
    """A hosting-capacity study checked and resolved, before any model row: what `study` answers in one
    request and a hosting-capacity job splits by candidate."""

    loaded: Any
    ctx: Any
    net: Any
    buses: list[int]
    spec: HostingCapacityStudy
    max_kw: float
    ignored: tuple[str, ...] = ()  # an uploaded profile table's columns the study did not read
    rows_field: str = "loads"  # what the rows are called in the request: loads, load_scales or file
    scales: tuple[float, ...] = ()  # load_scales' values (default or given), when the rows are those
    timestamps: tuple[str, ...] = ()  # a profile table's step labels, one per row

    def refusal(self, refused: RowsRefused) -> InvalidInput | InputError:
        """Rows without a power flow without new PV (models.hosting_capacity), named as the request gave them: a
        profile table's by step and row (1-based, load_table.InputError: a 422 naming `file`'s row), JSON
        `loads` by index, `load_scales` by value."""
        return base_refusal(self.rows_field, refused, self.scales, self.timestamps)


def base_refusal(
    rows_field: str, refused: RowsRefused, scales: tuple[float, ...] = (), timestamps: tuple[str, ...] = ()
) -> InvalidInput | InputError:
    """The refusal of study rows whose power flow has no solution without new PV (`refused`: 0-based rows of the
    study), in the request's terms: before a job's 202 too (`refuse_unsolved_base`); a job's chunk that meets
    one past that check's bound names the rows alone, in the same numbering (service.jobs.chunks)."""
    first, count = refused.rows[0], len(refused.rows)
    more = f" ({count} such rows: {rows_text([r + 1 for r in refused.rows] if rows_field == 'file' else refused.rows)})"
    more = more if count > 1 else ""
    if rows_field == "file":
        step = f"step {timestamps[first]!r}: " if first < len(timestamps) else ""
        return InputError(
            f"{step}{refused.reason}{more}",
            "steps whose loads the feeder carries without new PV: lower `load` or class factors there",
            first + 1,
        )
    if rows_field == "load_scales" and first < len(scales):
        where = f"load_scales[{first}] = {scales[first]:g} (the base loads x {scales[first]:g})"
        return InvalidInput(
            "load_scales", f"{where}: {refused.reason}{more}", "scales whose loads the feeder carries without new PV"
        )
    return InvalidInput(rows_field, f"rows {rows_text(refused.rows)}: {refused.reason}", refused.expected)


async def prepare(
    rt: Runtime, req: Any, tenant: Tenant, table: ProfileFile | None = None, job_max_rows: int | None = None
) -> PreparedHosting:
    """The study's model, context, rows (from `table`, a profile table upload, when given: a bad cell is
    load_table.InputError naming its row and column) and candidates; its work (rows x candidates x search
    passes, in model rows) within GRIDPFN_MAX_STUDY_ROWS, or `job_max_rows` (GRIDPFN_JOB_MAX_ROWS) for a job,
    before any is done. A table's steps count against GRIDPFN_MAX_STUDY_ROWS as they are read, as a study's."""
    loaded, ctx, net = await model_and_context(rt, req, tenant)
    buses, positions = _candidates(req, net)
    ignored: tuple[str, ...] = ()
    scales: tuple[float, ...] = ()
    timestamps: tuple[str, ...] = ()
    if table is None:
        rows = _rows(req, net)
        profile = _profile(req, len(rows))
        rows_field = "loads" if req.loads is not None else "load_scales"
        if req.loads is None:
            scales = tuple(float(s) for s in (req.load_scales if req.load_scales is not None else DEFAULT_SCALES))
    else:
        pv_name = _pv_profile_name(req, net)
        classes = _table_classes(req, net)
        limit = rt.settings.max_study_rows
        defined = tuple(req.classes or ())
        from_table = await rt.executor.run(read_rows, table.path, table.filename, net, classes, pv_name, limit, defined)
        rows, profile, ignored = from_table.loads, from_table.profile, from_table.ignored
        rows_field, timestamps = "file", from_table.timestamps
    max_kw = req.max_kw if req.max_kw is not None else 2e3 * float(np.sum(np.abs(net.base_consumption[: net.n_load])))
    spec = HostingCapacityStudy(
        loads=rows,
        profile=profile,
        candidates=positions,
        upper_pu=req.upper_pu,
        alpha=req.alpha,
        max_mw=max_kw / 1e3,
        tolerance_mw=0.0,  # the search's own step: max_kw / 2**BISECTION_STEPS (answered as resolution_kw)
        curve_points=req.curve_points,
    )
    limit, setting = (
        (rt.settings.max_study_rows, "GRIDPFN_MAX_STUDY_ROWS")
        if job_max_rows is None
        else (job_max_rows, "GRIDPFN_JOB_MAX_ROWS")
    )
    work = len(rows) * len(buses) * passes(spec)
    if work > limit:
        raise TooLarge(
            "loads" if table is None else "file",
            f"{len(rows)} load rows x {len(buses)} candidate buses x {passes(spec)} search passes is {work} "
            "model rows, over the limit",
            f"rows x buses x (14 + curve_points) at most {limit} ({setting}): fewer rows, name `buses`, or fewer "
            "curve_points" + ('; more: "as_job": true' if job_max_rows is None else ""),
        )
    return PreparedHosting(loaded, ctx, net, buses, spec, max_kw, ignored, rows_field, scales, timestamps)


async def refuse_unsolved_base(rt: Runtime, prepared: PreparedHosting) -> None:
    """Before a hosting-capacity job is queued: every row's power flow without new PV (the model's own, as the
    study's first step asks it), refused as one request's study refuses it (`PreparedHosting.refusal`), so a
    study that cannot run is a 422, not a job failed after its 202. One pass over the rows (at most 1 / passes of
    the job's work), for up to GRIDPFN_MAX_STUDY_ROWS rows (what one request solves); more are checked by the
    job's chunks, whose first step it is (the job then fails naming them, as service.jobs.chunks words it)."""
    if len(prepared.spec.loads) > rt.settings.max_study_rows:
        return
    encoded, _, _ = await rt.fits.prepared(prepared.loaded, prepared.ctx, prepared.net)
    try:
        await rt.executor.run(check_base_rows, prepared.loaded.method, encoded.value, prepared.spec)
    except InputRejected as exc:
        refused = exc.__cause__
        if not isinstance(refused, RowsRefused):
            raise
        raise prepared.refusal(refused) from None


async def study(rt: Runtime, req: Any, tenant: Tenant, table: ProfileFile | None = None) -> HostingAnswer:
    """The answer to a HostingCapacityRequest from `tenant` (its rows from `table`, a profile table upload,
    when given)."""
    t0 = time.perf_counter()
    prepared = await prepare(rt, req, tenant, table)
    loaded, ctx, net, buses = prepared.loaded, prepared.ctx, prepared.net, prepared.buses
    encoded, hit, _ = await rt.fits.prepared(loaded, ctx, net)
    try:
        result = await rt.executor.run(hosting_capacity, loaded.method, encoded.value, prepared.spec)
    except InputRejected as exc:  # rows without a power flow even without new PV: named as the request gave them
        refused = exc.__cause__
        if not isinstance(refused, RowsRefused):
            raise
        raise prepared.refusal(refused) from None
    return HostingAnswer(
        source=Source.of(loaded, net, ctx),
        buses=buses,
        bus_names=[net.bus_name(b) for b in buses],
        result=result,
        rows=len(prepared.spec.loads),
        max_kw=prepared.max_kw,
        seconds=time.perf_counter() - t0,
        context_cached=hit,
        ignored_columns=prepared.ignored,
    )

"""POST /v1/studies' flow: scenarios in a planner's terms (gridsim.scenarios) expanded into query rows,
the model's answer per row and bus, and the per-bus risk table a planner reads.

The summary per bus: the largest and the mean P(outside the band) over the study's rows (and the row
where it is largest), the expected hours outside the band when the study is a time series (the sum of
P(outside) x the step's hours, per scenario and year, the largest of those), and the lowest low
quantile and highest high quantile of |V| over the rows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gridsim.errors import NetworkError
from gridsim.scenarios import DER, P_SUFFIX, Q_SUFFIX, Block, Classes, Expanded, Expansion, Scenario, TimeSeries
from models.errors import RowsRefused
from service.engine.answers import AnswerSpec, ModelTiming, OffContext, Source, Statistics
from service.engine.bus_summary import BusSummary, BusSummaryAccumulator
from service.engine.context_sets import ContextSet
from service.engine.errors import InputRejected, InvalidInput, TooLarge
from service.engine.inference import model_and_context, model_answer
from service.engine.load_table import LOAD_LIMIT
from service.engine.profile_table import (
    ProfileFile,
    check_class_columns,
    classes_without_profile,
    column_limit,
    read,
    time_series,
    wanted_columns,
)
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant

DEFAULT_BAND = (0.95, 1.05)
DEFAULT_QUANTILES = (0.05, 0.95)
# Entries (rows x buses) a JSON answer carries in the long format; a bigger study asks for the summary
# alone or runs as a batch job.
MAX_LONG_ENTRIES = 200_000


@dataclass(frozen=True)
class StudyAnswer:
    source: Source
    buses: tuple[int, ...]
    bus_names: tuple[str, ...]
    band: tuple[float, float]
    quantiles: tuple[float, ...]
    expanded: Expanded
    statistics: Statistics
    off_context: OffContext
    summary: BusSummary
    timing: ModelTiming
    seconds: float
    classes: tuple[str, ...] = ()  # the customer classes the study split the loads by
    ignored_columns: tuple[str, ...] = ()  # an uploaded profile table's columns no part of the study reads


def summarize_buses(statistics: Statistics, expanded: Expanded, step_hours: float | None) -> BusSummary:
    """The study's rows in one block; the hours per scenario and year when it is a time series."""
    hours = step_hours if expanded.timestamp is not None else None
    summary = BusSummaryAccumulator(hours)
    groups = list(zip(expanded.scenario, expanded.year, strict=True))
    summary.add(statistics.p_outside_band, statistics.quantiles[0][1], statistics.quantiles[-1][1], groups)
    return summary.result()


def _scenarios(req: Any) -> list[Scenario]:
    return [
        Scenario(
            name=s.name or f"scenario {i + 1}",
            load_scale=s.load_scale,
            bus_load_scale={int(bus): factor for bus, factor in (s.bus_load_scale or {}).items()},
            generation_scale=s.generation_scale,
            der=tuple(DER(d.bus, d.kw, d.kvar, d.profile) for d in s.der),
            growth_rate=s.growth_rate,
            years=tuple(s.years),
            class_scaling=dict(s.class_scaling or {}),
        )
        for i, s in enumerate(req.scenarios)
    ]


def _series(req: Any) -> TimeSeries | None:
    """The JSON time series; with class profiles given, every class the request defines needs one (as a profile
    table's columns: profile_table.check_class_columns)."""
    ts = req.time_series
    if ts is None:
        return None
    followed = {d.profile for s in req.scenarios for d in s.der if d.profile is not None}
    class_profiles = [name for name in ts.profiles or {} if name not in followed]
    missing = classes_without_profile(list(req.classes or {}), class_profiles)
    if class_profiles and missing:
        name = missing[0]
        raise InvalidInput(
            "time_series.profiles",
            f"no profile for class {name!r} (defined in `classes`)"
            + (f", nor for {missing[1:6]}" if len(missing) > 1 else "")
            + f"; profiles given: {sorted(class_profiles)[:20]}",
            f"a profile {name!r} (or {name + P_SUFFIX!r} / {name + Q_SUFFIX!r}) of the class's factors per step (1 keeps "
            "it at its base), or the class left out of `classes`",
        )
    steps = len(ts.timestamps)
    profiles = {name: np.asarray(values, dtype=np.float64) for name, values in (ts.profiles or {}).items()}
    return TimeSeries(tuple(ts.timestamps), _factors(ts.load, steps), _factors(ts.pv, steps), ts.step_hours, profiles)


def _classes(req: Any, net: Any) -> Classes:
    """The request's classes (lists of load buses) in place of the network's own, when it defines any."""
    return Classes.of(net) if req.classes is None else Classes.of_buses(net, req.classes)


async def _table_series(
    rt: Runtime, req: Any, net: Any, classes: Classes, scenarios: list[Scenario], table: ProfileFile
) -> tuple[TimeSeries, tuple[str, ...]]:
    """An uploaded profile table as the study's time series (only the columns it uses are read), and the
    columns it left unread."""
    followed = [d.profile for s in scenarios for d in s.der if d.profile is not None]
    wanted = wanted_columns(net, classes, followed)
    limit = rt.settings.max_study_rows
    read_table = await rt.executor.run(read, table.path, table.filename, wanted, limit, column_limit(net))
    if req.classes is not None:
        check_class_columns(read_table, list(req.classes), followed)
    return time_series(read_table, net, req.step_hours), read_table.ignored


def _factors(values: Any, steps: int) -> np.ndarray:
    """A time series' factors as an array (ones when not given; the schema refused ragged rows)."""
    return np.ones(steps) if values is None else np.asarray(values, dtype=np.float64)


def _check_size(rt: Runtime, req: Any, net: Any, steps: int, max_rows: int | None) -> None:
    """The rows the study would expand to (scenarios x years x steps), counted before any is built: at most
    `max_rows` (a study job's: GRIDPFN_JOB_MAX_ROWS), else GRIDPFN_MAX_STUDY_ROWS."""
    rows = sum(len(s.years) for s in req.scenarios) * steps
    limit, setting = (
        (rt.settings.max_study_rows, "GRIDPFN_MAX_STUDY_ROWS")
        if max_rows is None
        else (max_rows, "GRIDPFN_JOB_MAX_ROWS")
    )
    if rows > limit:
        raise TooLarge(
            "scenarios",
            f"the study expands to {rows} rows (scenarios x years x steps), over the limit",
            f"at most {limit} rows ({setting})" + ('; more: "as_job": true' if max_rows is None else ""),
        )
    if max_rows is None and req.detail == "long" and rows * net.n_outputs > MAX_LONG_ENTRIES:
        raise TooLarge(
            "detail",
            f"{rows} rows x {net.n_outputs} buses is too long an answer",
            f'at most {MAX_LONG_ENTRIES} entries in the long format: "detail": "summary"',
        )


def _row_name(expanded: Expanded, row: int) -> str:
    stamp = "" if expanded.timestamp is None else f", step {expanded.timestamp[row]}"
    return f"scenario {expanded.scenario[row]!r}, year {expanded.year[row]}{stamp}"


def _check_loads(expanded: Expanded) -> None:
    """The rows within the loads a request may send (LOAD_LIMIT): growth over a century or a DER of 10 GW
    is not a question any model can answer."""
    bad = np.flatnonzero(~(np.abs(expanded.rows) <= LOAD_LIMIT).all(axis=1))
    if bad.size:
        raise InvalidInput(
            "scenarios",
            f"{_row_name(expanded, int(bad[0]))}: a load beyond {LOAD_LIMIT:g} MW ({bad.size} such row(s))",
            f"loads within +-{LOAD_LIMIT:g} MW / Mvar after scaling, growth and DER",
        )


@dataclass(frozen=True)
class PreparedStudy:
    """A study checked and resolved, before any row is built: what `study` answers and a study job writes
    (`expansion`: its scenarios, time series and classes, prepared once for its rows and unused profiles)."""

    loaded: Any
    ctx: ContextSet
    net: Any
    expansion: Expansion
    ignored: tuple[str, ...]  # an uploaded profile table's columns no part of the study reads
    spec: AnswerSpec  # the band (default DEFAULT_BAND) and the quantile levels (default DEFAULT_QUANTILES), sorted

    @property
    def step_hours(self) -> float | None:
        series = self.expansion.series
        return None if series is None else series.step_hours


async def prepare(
    rt: Runtime, req: Any, tenant: Tenant, table: ProfileFile | None = None, max_rows: int | None = None
) -> PreparedStudy:
    """The study's model, context, scenarios, time series (from `table`, a profile table upload, when given: a
    bad cell is load_table.InputError naming its row and column) and classes, its rows counted against
    `max_rows` (default GRIDPFN_MAX_STUDY_ROWS) before any is built."""
    loaded, ctx, net = await model_and_context(rt, req, tenant)
    scenarios = _scenarios(req)
    try:
        classes = _classes(req, net)
        series, ignored = (
            (_series(req), ()) if table is None else await _table_series(rt, req, net, classes, scenarios, table)
        )
        _check_size(rt, req, net, 1 if series is None else len(series.timestamps), max_rows)
        expansion = Expansion.of(net, scenarios, series, classes)
    except NetworkError as exc:
        raise InvalidInput(exc.field, exc.problem, exc.expected) from None
    band = tuple(req.voltage_band) if req.voltage_band is not None else DEFAULT_BAND
    levels = tuple(sorted(req.quantiles)) if req.quantiles else DEFAULT_QUANTILES
    spec = AnswerSpec(levels, (float(band[0]), float(band[1])))
    return PreparedStudy(loaded, ctx, net, expansion, ignored, spec)


class HeaviestRows:
    """A study job's cheap power-flow check before its 202: each scenario-year's heaviest row (the largest net
    active load), asked of the model's own power flow (Method.refuse_unsolved) CHECK_BATCH blocks at a time, so
    a scenario no step of which the feeder can carry (load_scale 20) is a 422 naming it, as `study` names it,
    instead of a job failed after acceptance. One row per block: the job's own check (service.jobs.chunks)
    still solves every row before its first chunk, and names any other by scenario, year and step."""

    CHECK_BATCH = 1024

    def __init__(self, method: Any, fitted: Any, geometry: Any, n_load: int) -> None:
        self.method, self.fitted, self.geometry, self.n_load = method, fitted, geometry, n_load
        self.rows: list[np.ndarray] = []
        self.names: list[str] = []

    def add(self, block: Block) -> None:
        at = int(np.argmax(block.rows[:, : self.n_load].sum(axis=1)))
        stamp = "" if block.timestamps is None else f", step {block.timestamps[at]}"
        self.rows.append(block.rows[at])
        self.names.append(f"scenario {block.scenario!r}, year {block.year}{stamp}")
        if len(self.rows) >= self.CHECK_BATCH:
            self.flush()

    def flush(self) -> None:
        """The rows held so far asked; InvalidInput naming the first one without a power flow."""
        if not self.rows:
            return
        rows, names = np.stack(self.rows), self.names
        self.rows, self.names = [], []
        try:
            self.method.refuse_unsolved(self.fitted, rows, OffContext.of(self.geometry, rows).extrapolation)
        except RowsRefused as exc:
            raise InvalidInput("scenarios", f"{names[exc.rows[0]]}: {exc.reason}", exc.expected) from None


def checked_blocks(study: PreparedStudy, heaviest: HeaviestRows | None = None) -> Iterator[Block]:
    """The study's rows a scenario-year at a time (a study job writes them so), each checked as `study`
    checks its rows (and its heaviest row's power flow, with `heaviest`); an error names the scenario, year
    and step."""
    try:
        for block in study.expansion.blocks():
            n = len(block.rows)
            _check_loads(Expanded(block.rows, (block.scenario,) * n, (block.year,) * n, block.timestamps))
            if heaviest is not None:
                heaviest.add(block)
            yield block
        if heaviest is not None:
            heaviest.flush()
    except NetworkError as exc:
        raise InvalidInput(exc.field, exc.problem, exc.expected) from None


async def study(rt: Runtime, req: Any, tenant: Tenant, table: ProfileFile | None = None) -> StudyAnswer:
    """The answer to a StudyRequest from `tenant`; its time series from `table` (a profile table upload)
    when given."""
    t0 = time.perf_counter()
    prepared = await prepare(rt, req, tenant, table)
    loaded, ctx, net, spec = prepared.loaded, prepared.ctx, prepared.net, prepared.spec
    try:
        expanded = await rt.executor.run(prepared.expansion.expanded)
    except NetworkError as exc:
        raise InvalidInput(exc.field, exc.problem, exc.expected) from None
    _check_loads(expanded)
    try:
        statistics, placed, timing = await model_answer(rt, loaded, ctx, net, expanded.rows, spec)
    except InputRejected as exc:  # rows the model refused: named by the study's rows, not as "queries"
        refused = exc.__cause__
        if not isinstance(refused, RowsRefused):
            raise
        where = _row_name(expanded, refused.rows[0])
        raise InvalidInput("scenarios", f"{where}: {refused.reason}", refused.expected) from None
    return StudyAnswer(
        source=Source.of(loaded, net, ctx),
        buses=tuple(net.output_buses),
        bus_names=tuple(net.bus_name(b) for b in net.output_buses),
        band=spec.band or DEFAULT_BAND,
        quantiles=spec.quantiles,
        expanded=expanded,
        statistics=statistics,
        off_context=placed,
        summary=summarize_buses(statistics, expanded, prepared.step_hours),
        timing=timing,
        seconds=time.perf_counter() - t0,
        classes=prepared.expansion.classes.names,
        ignored_columns=prepared.ignored,
    )

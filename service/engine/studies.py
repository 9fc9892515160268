"""POST /v1/studies' flow: scenarios in a planner's terms (gridsim.scenarios) expanded into query rows,
the model's answer per row and bus, and the per-bus risk table a planner reads.

The summary per bus: the largest and the mean P(outside the band) over the study's rows (and the row
where it is largest), the expected hours outside the band when the study is a time series (the sum of
P(outside) x the step's hours, per scenario and year, the largest of those), and the lowest low
quantile and highest high quantile of |V| over the rows."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gridsim.errors import NetworkError
from gridsim.scenarios import DER, Expanded, Scenario, TimeSeries, expand
from models.errors import RowsRefused
from service.engine.answers import AnswerSpec, ModelTiming, OffContext, Statistics
from service.engine.errors import InputRejected, InvalidInput, TooLarge
from service.engine.inference import model_and_context, model_answer
from service.engine.load_table import LOAD_LIMIT
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant

DEFAULT_BAND = (0.95, 1.05)
DEFAULT_QUANTILES = (0.05, 0.95)
# Entries (rows x buses) a JSON answer carries in the long format; a bigger study asks for the summary
# alone or runs as a batch job.
MAX_LONG_ENTRIES = 200_000


@dataclass(frozen=True)
class BusSummary:
    """Per output bus (k,) arrays."""

    max_p_outside: np.ndarray
    mean_p_outside: np.ndarray
    worst_row: np.ndarray  # (k,) int: the row where P(outside) is largest
    hours_outside: np.ndarray | None  # the largest expected hours over scenario-years; None without a time series
    hours_outside_std: np.ndarray | None  # its std if the steps' outcomes were independent (a lower bound)
    lowest: np.ndarray  # the lowest quantile's smallest value
    highest: np.ndarray  # the highest quantile's largest value


@dataclass(frozen=True)
class StudyAnswer:
    model: str
    version: str | None
    network: str
    context_id: str
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


def summarize_buses(statistics: Statistics, expanded: Expanded, step_hours: float | None) -> BusSummary:
    p = np.asarray(statistics.p_outside_band, dtype=np.float64)  # (rows, k)
    hours = spread = None
    if step_hours is not None and expanded.timestamp is not None:
        keys = list(zip(expanded.scenario, expanded.year, strict=True))
        groups: dict[tuple[str, int], list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        expected = np.stack([p[rows].sum(axis=0) * step_hours for rows in groups.values()])  # (groups, k)
        variance = np.stack([(p[rows] * (1.0 - p[rows])).sum(axis=0) * step_hours**2 for rows in groups.values()])
        worst = expected.argmax(axis=0)
        buses = np.arange(p.shape[1])
        hours, spread = expected[worst, buses], np.sqrt(variance[worst, buses])
    low, high = statistics.quantiles[0][1], statistics.quantiles[-1][1]
    return BusSummary(p.max(axis=0), p.mean(axis=0), p.argmax(axis=0), hours, spread, low.min(axis=0), high.max(axis=0))


def _scenarios(req: Any) -> list[Scenario]:
    return [
        Scenario(
            name=s.name or f"scenario {i + 1}",
            load_scale=s.load_scale,
            bus_load_scale={int(bus): factor for bus, factor in (s.bus_load_scale or {}).items()},
            generation_scale=s.generation_scale,
            der=tuple(DER(d.bus, d.kw, d.kvar) for d in s.der),
            growth_rate=s.growth_rate,
            years=tuple(s.years),
        )
        for i, s in enumerate(req.scenarios)
    ]


def _series(req: Any) -> TimeSeries | None:
    ts = req.time_series
    if ts is None:
        return None
    steps = len(ts.timestamps)
    return TimeSeries(tuple(ts.timestamps), _factors(ts.load, steps), _factors(ts.pv, steps), ts.step_hours)


def _factors(values: Any, steps: int) -> np.ndarray:
    """A time series' factors as an array (ones when not given; the schema refused ragged rows)."""
    return np.ones(steps) if values is None else np.asarray(values, dtype=np.float64)


def _check_size(rt: Runtime, req: Any, net: Any) -> None:
    """The rows the study would expand to (scenarios x years x steps), counted before any is built."""
    steps = 1 if req.time_series is None else len(req.time_series.timestamps)
    rows = sum(len(s.years) for s in req.scenarios) * steps
    limit = rt.settings.max_study_rows
    if rows > limit:
        raise TooLarge(
            "scenarios",
            f"the study expands to {rows} rows (scenarios x years x steps), over the limit",
            f"at most {limit} rows (GRIDPFN_MAX_STUDY_ROWS); more: POST /v1/batch-jobs",
        )
    if req.detail == "long" and rows * net.n_outputs > MAX_LONG_ENTRIES:
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


async def study(rt: Runtime, req: Any, tenant: Tenant) -> StudyAnswer:
    """The answer to a StudyRequest from `tenant`."""
    t0 = time.perf_counter()
    loaded, ctx, net = await model_and_context(rt, req, tenant)
    _check_size(rt, req, net)  # before any row is built: a small body can ask for billions
    try:
        expanded = await rt.executor.run(expand, net, _scenarios(req), _series(req))
    except NetworkError as exc:
        raise InvalidInput(exc.field, exc.problem, exc.expected) from None
    _check_loads(expanded)
    band = tuple(req.voltage_band) if req.voltage_band is not None else DEFAULT_BAND
    levels = tuple(sorted(req.quantiles)) if req.quantiles else DEFAULT_QUANTILES
    spec = AnswerSpec(levels, (float(band[0]), float(band[1])))
    try:
        statistics, placed, timing = await model_answer(rt, loaded, ctx, expanded.rows, spec)
    except InputRejected as exc:  # rows the model refused: named by the study's rows, not as "queries"
        refused = exc.__cause__
        if not isinstance(refused, RowsRefused):
            raise
        where = _row_name(expanded, refused.rows[0])
        raise InvalidInput("scenarios", f"{where}: {refused.reason}", refused.expected) from None
    step_hours = None if req.time_series is None else req.time_series.step_hours
    return StudyAnswer(
        model=loaded.name,
        version=loaded.version,
        network=net.name,
        context_id=ctx.id,
        buses=tuple(net.output_buses),
        bus_names=tuple(net.bus_name(b) for b in net.output_buses),
        band=spec.band or DEFAULT_BAND,
        quantiles=levels,
        expanded=expanded,
        statistics=statistics,
        off_context=placed,
        summary=summarize_buses(statistics, expanded, step_hours),
        timing=timing,
        seconds=time.perf_counter() - t0,
    )

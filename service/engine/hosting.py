"""POST /v1/hosting-capacity's flow: a study's rows and candidates checked, the model fitted on the
context (the same cached encoding predict uses), models.hosting_capacity run in a pool worker.

A study asks the model for at most (2 + bisection steps + curve points) x candidates x rows query rows
(models.hosting_capacity.passes); that product is bounded by GRIDPFN_MAX_STUDY_ROWS before any work,
so a small body cannot ask for minutes of model time."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.hosting_capacity import HostingCapacity, HostingCapacityStudy, hosting_capacity, passes
from service.engine.answers import Source
from service.engine.checks import load_rows
from service.engine.errors import InvalidInput, TooLarge
from service.engine.inference import model_and_context
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
class PreparedHosting:
    """A hosting-capacity study checked and resolved, before any model row: what `study` answers in one
    request and a hosting-capacity job splits by candidate."""

    loaded: Any
    ctx: Any
    net: Any
    buses: list[int]
    spec: HostingCapacityStudy
    max_kw: float


async def prepare(rt: Runtime, req: Any, tenant: Tenant, job_max_rows: int | None = None) -> PreparedHosting:
    """The study's model, context, rows and candidates; its work (rows x candidates x search passes, in model
    rows) within GRIDPFN_MAX_STUDY_ROWS, or `job_max_rows` (GRIDPFN_JOB_MAX_ROWS) for a job, before any is done."""
    loaded, ctx, net = await model_and_context(rt, req, tenant)
    rows = _rows(req, net)
    buses, positions = _candidates(req, net)
    max_kw = req.max_kw if req.max_kw is not None else 2e3 * float(np.sum(np.abs(net.base_consumption[: net.n_load])))
    spec = HostingCapacityStudy(
        loads=rows,
        profile=_profile(req, len(rows)),
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
            "loads",
            f"{len(rows)} load rows x {len(buses)} candidate buses x {passes(spec)} search passes is {work} "
            "model rows, over the limit",
            f"rows x buses x (14 + curve_points) at most {limit} ({setting}): fewer rows, name `buses`, or fewer "
            "curve_points" + ('; more: "as_job": true' if job_max_rows is None else ""),
        )
    return PreparedHosting(loaded, ctx, net, buses, spec, max_kw)


async def study(rt: Runtime, req: Any, tenant: Tenant) -> HostingAnswer:
    """The answer to a HostingCapacityRequest from `tenant`."""
    t0 = time.perf_counter()
    prepared = await prepare(rt, req, tenant)
    loaded, ctx, net, buses = prepared.loaded, prepared.ctx, prepared.net, prepared.buses
    encoded, hit, _ = await rt.fits.prepared(loaded, ctx)
    result = await rt.executor.run(hosting_capacity, loaded.method, encoded.value, prepared.spec)
    return HostingAnswer(
        source=Source.of(loaded, net, ctx),
        buses=buses,
        bus_names=[net.bus_name(b) for b in buses],
        result=result,
        rows=len(prepared.spec.loads),
        max_kw=prepared.max_kw,
        seconds=time.perf_counter() - t0,
        context_cached=hit,
    )

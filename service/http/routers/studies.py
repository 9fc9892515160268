"""POST /v1/studies: a planner's scenarios (load scaling overall and per bus, generation scaling, added
DER, load growth over years, a time series of consumption and PV profiles) expanded by the server into
query rows, answered per bus as a risk summary and, optionally, a long table (service.engine.studies)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import numpy as np
from fastapi import APIRouter, Depends
from pydantic import Field, field_validator, model_validator
from starlette.responses import Response

from service.engine import studies
from service.engine.answers import VoltageBand
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant
from service.http.auth import require_api_key
from service.http.deps import get_runtime, problems
from service.http.fast_json import OrjsonRoute
from service.http.responses import json_response
from service.http.schemas import Level, ModelVersion, OneContext, Strict, StrictInt

router = APIRouter(prefix="/v1", tags=["planning"], route_class=OrjsonRoute, dependencies=[Depends(require_api_key)])

Factor = Annotated[float, Field(ge=0.0, le=100.0, allow_inf_nan=False)]
Power = Annotated[float, Field(ge=-1e7, le=1e7, allow_inf_nan=False)]
Year = Annotated[int, Field(ge=0, le=100, strict=True)]
MAX_STEPS = 100_000
BUS_KEY = re.compile(r"[0-9]{1,9}", re.ASCII)  # a bus number as a JSON object key


class DERAddition(Strict):
    bus: StrictInt = Field(description="a load bus number")
    kw: Power = Field(description="active power produced at full output, kW")
    kvar: Power = Field(0.0, description="reactive power produced, kvar")


class ScenarioSpec(Strict):
    name: Annotated[str, Field(max_length=200)] | None = None
    load_scale: Factor = Field(1.0, description="every load's consumption x this (generation kept)")
    bus_load_scale: dict[str, Factor] | None = Field(None, description="per load bus number: a further factor")
    generation_scale: Factor = Field(1.0, description="the network's own generation (sgens) x this")
    der: Annotated[list[DERAddition], Field(max_length=10_000)] = []
    growth_rate: float = Field(0.0, ge=-0.5, le=1.0, allow_inf_nan=False, description="consumption growth per year")
    years: Annotated[list[Year], Field(min_length=1, max_length=100)] = [0]

    @model_validator(mode="after")
    def _buses(self) -> ScenarioSpec:
        seen: set[int] = set()
        for key in self.bus_load_scale or {}:
            if not BUS_KEY.fullmatch(key):
                raise ValueError(f"bus_load_scale: key {key[:20]!r} is not a bus number")
            if int(key) in seen:
                raise ValueError(f"bus_load_scale: bus {int(key)} is named twice")
            seen.add(int(key))
        return self


Number = Annotated[float, Field(allow_inf_nan=False)]
# A time series' factors: consumption >= 0; generation output may dip just below 0 (inverters at night).
LOAD_RANGE, PV_RANGE = (0.0, 100.0), (-1.0, 100.0)


def _in_range(values: list[Any] | None, low: float, high: float) -> list[Any] | None:
    """The first value outside [low, high] named by its index (the union's own errors would name both arms)."""
    if not values:
        return values
    try:
        table = np.asarray(values, dtype=np.float64)
    except ValueError:
        raise ValueError("rows of different lengths: one value per step, or one row of values per step") from None
    bad = np.argwhere((table < low) | (table > high))
    if len(bad):
        at = "".join(f"[{int(i)}]" for i in bad[0])
        raise ValueError(f"{at}: {table[tuple(bad[0])]} is outside [{low}, {high}]")
    return values


class TimeSeriesSpec(Strict):
    timestamps: Annotated[list[Annotated[str, Field(max_length=64)]], Field(min_length=1, max_length=MAX_STEPS)]
    load: list[Number] | list[list[Number]] | None = Field(
        None,
        description=f"consumption factor per step, or per step and load bus (feature order), in {list(LOAD_RANGE)}; "
        "default 1",
    )
    pv: list[Number] | list[list[Number]] | None = Field(
        None,
        description="generation output share per step, or per step and load bus (own and added DER), in "
        f"{list(PV_RANGE)}; default 1",
    )
    step_hours: float = Field(0.25, gt=0.0, le=24.0, allow_inf_nan=False)

    @field_validator("load")
    @classmethod
    def _load_range(cls, values: list[Any] | None) -> list[Any] | None:
        return _in_range(values, *LOAD_RANGE)

    @field_validator("pv")
    @classmethod
    def _pv_range(cls, values: list[Any] | None) -> list[Any] | None:
        return _in_range(values, *PV_RANGE)


class StudyRequest(OneContext):
    model: str = Field("network-fit", description="a name from GET /v1/models")
    version: ModelVersion | None = None
    scenarios: Annotated[list[ScenarioSpec], Field(min_length=1, max_length=1000)]
    time_series: TimeSeriesSpec | None = None
    voltage_band: VoltageBand | None = Field(None, description="[low, high] p.u.; default [0.95, 1.05]")
    quantiles: Annotated[list[Level], Field(max_length=99)] = Field(
        [], description="default [0.05, 0.95]; the summary's lowest/highest use the first and last"
    )
    detail: Literal["summary", "long"] = Field("long", description="long: also every row x bus")


def _floats(values: np.ndarray) -> list[float]:
    return np.asarray(values, dtype=np.float64).tolist()


def _long(answer: studies.StudyAnswer) -> dict[str, list]:
    """Row x bus entries, row-major, as columns."""
    k = len(answer.buses)
    rows = answer.expanded
    table: dict[str, list] = {
        "scenario": [s for s in rows.scenario for _ in range(k)],
        "year": [y for y in rows.year for _ in range(k)],
        "bus": list(answer.buses) * len(rows.scenario),
        "bus_name": list(answer.bus_names) * len(rows.scenario),
    }
    if rows.timestamp is not None:
        table["timestamp"] = [t for t in rows.timestamp for _ in range(k)]
    stats = answer.statistics
    table["mean"] = _floats(stats.mean.ravel())
    table["std"] = _floats(stats.std.ravel())
    for label, values in stats.quantiles:
        table[f"q{label}"] = _floats(values.ravel())
    table["p_outside"] = _floats(np.asarray(stats.p_outside_band).ravel())
    table["extrapolated"] = np.repeat(answer.off_context.extrapolated, k).tolist()
    return table


@router.post(
    "/studies",
    responses=problems(401, 404, 413, 422, 503),
    summary="Scenarios in a planner's terms: per-bus risk of leaving the voltage band",
)
async def study(
    body: StudyRequest, rt: Runtime = Depends(get_runtime), tenant: Tenant = Depends(require_api_key)
) -> Response:
    """`summary` lists every bus with its largest and mean P(outside the band) over the study's rows, the row
    where it is largest, the expected hours outside (time series) and the extreme quantiles; `rows` (detail
    "long") every row and bus."""
    answer = await studies.study(rt, body, tenant)
    s = answer.summary
    rows = answer.expanded
    summary = [
        {
            "bus": bus,
            "bus_name": name,
            "max_p_outside": float(s.max_p_outside[i]),
            "mean_p_outside": float(s.mean_p_outside[i]),
            "worst_scenario": rows.scenario[int(s.worst_row[i])],
            "worst_year": rows.year[int(s.worst_row[i])],
            "worst_timestamp": None if rows.timestamp is None else rows.timestamp[int(s.worst_row[i])],
            "hours_outside": None if s.hours_outside is None else float(s.hours_outside[i]),
            "hours_outside_std": None if s.hours_outside_std is None else float(s.hours_outside_std[i]),
            "lowest_vm_pu": float(s.lowest[i]),
            "highest_vm_pu": float(s.highest[i]),
        }
        for i, (bus, name) in enumerate(zip(answer.buses, answer.bus_names, strict=True))
    ]
    body_out = {
        "model": answer.model,
        "version": answer.version,
        "network": answer.network,
        "context_id": answer.context_id,
        "voltage_band": list(answer.band),
        "quantiles": list(answer.quantiles),
        "rows": len(rows.scenario),
        "extrapolated_rows": int(answer.off_context.extrapolated.sum()),
        "summary": summary,
        "long": _long(answer) if body.detail == "long" else None,
        "timing": {
            "total_ms": answer.seconds * 1e3,
            "model_encode_ms": answer.timing.encode_s * 1e3,
            "model_predict_ms": answer.timing.predict_s * 1e3,
            "context_cached": answer.timing.context_cached,
        },
    }
    return json_response(body_out)

"""POST /v1/studies: a planner's scenarios (load scaling overall, per bus and per customer class, generation
scaling, added DER, load growth over years, a time series of consumption, PV and class profiles) expanded by
the server into query rows, answered per bus as a risk summary and, optionally, a long table
(service.engine.studies).

The body is JSON (StudyRequest), or multipart/form-data when the time series is a file: a `spec` field (the
study as JSON, StudyTableSpec: its time series comes from the file) and then a `file` part, a CSV or Parquet
profile table (service.engine.profile_table; SimBench-style tables are accepted). A multipart body is taken
before FastAPI would parse it as JSON (`table_route`), read as it arrives (service.http.form_stream) and bounded
by GRIDPFN_MAX_BODY_BYTES and the study's row limit. POST /v1/hosting-capacity takes the same form through the
same helpers (`table_route`, `table_upload`, `upload_doc`)."""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, BeforeValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError
from starlette.responses import Response

from service.engine import studies
from service.engine.answers import VoltageBand
from service.engine.errors import EngineError, InvalidInput, TooLarge
from service.engine.factor_ranges import LOAD_RANGE, PROFILE_RANGE, PV_RANGE
from service.engine.load_table import InputError
from service.engine.profile_table import ProfileFile
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant
from service.http.auth import TenantDep, check_authorization_header, require_api_key
from service.http.deps import RuntimeDep, problems
from service.http.fast_json import OrjsonRoute
from service.http.form_stream import FormStream
from service.http.limits import MAX_DER_ADDITIONS, MAX_LOAD_BUSES, MAX_STEPS
from service.http.problems import ProblemError, field_error
from service.http.responses import json_response
from service.http.routers import batch_jobs
from service.http.schemas import (
    FAIL_FAST,
    Levels,
    ModelVersion,
    OneContext,
    Strict,
    StrictBool,
    StrictInt,
    entries_within,
    refused,
)
from service.jobs.inputs import STUDY_LABELS


def table_route(upload: Callable[[Request], Awaitable[Response]]) -> type[OrjsonRoute]:
    """An OrjsonRoute whose multipart bodies (a spec and a profile table) go to `upload` instead of FastAPI's
    JSON body parsing; JSON bodies are validated as the endpoint's request model, as on every route."""

    class TableRoute(OrjsonRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def route_handler(request: Request) -> Response:
                if request.headers.get("content-type", "").startswith("multipart/form-data"):
                    return await upload(request)
                response: Response = await handler(request)
                return response

            return route_handler

    return TableRoute


router = APIRouter(
    prefix="/v1",
    tags=["planning"],
    route_class=table_route(lambda request: study_upload(request)),
    dependencies=[Depends(require_api_key)],
)

Factor = Annotated[float, Field(ge=0.0, le=100.0, allow_inf_nan=False, strict=True)]
Power = Annotated[float, Field(ge=-1e7, le=1e7, allow_inf_nan=False, strict=True)]
Year = Annotated[int, Field(ge=0, le=100, strict=True)]
MAX_CLASSES = 1000
# Every list stops at its first bad item (FAIL_FAST), every object at its count (entries_within), and each has a
# bound (service.http.limits): a body of a million bad items made a million errors, and held the event loop for
# tens of seconds.
BUS_KEY = re.compile(r"[0-9]{1,9}", re.ASCII)  # a bus number as a JSON object key
# A customer class's or profile's name (a load's `profile` or `type`, as the network gives it; at most 256
# characters, as gridsim.pandapower_json reads labels)
Name = Annotated[str, Field(min_length=1, max_length=256)]
# Customer classes a request defines: class name -> its load bus numbers
ClassBuses = Annotated[
    dict[Name, Annotated[list[StrictInt], Field(max_length=1000), FAIL_FAST]],
    Field(max_length=MAX_CLASSES),
    entries_within(MAX_CLASSES),
]


class DERAddition(Strict):
    bus: StrictInt = Field(description="a load bus number")
    kw: Power = Field(description="active power produced at full output, kW")
    kvar: Power = Field(0.0, description="reactive power produced, kvar")
    profile: Name | None = Field(
        None, description="a time series profile its output follows (e.g. SimBench's PV5); default: the `pv` share"
    )


class ScenarioSpec(Strict):
    name: Annotated[str, Field(max_length=200)] | None = None
    load_scale: Factor = Field(1.0, description="every load's consumption x this (generation kept)")
    bus_load_scale: (
        Annotated[dict[str, Factor], Field(max_length=MAX_LOAD_BUSES), entries_within(MAX_LOAD_BUSES)] | None
    ) = Field(None, description="per load bus number: a further factor")
    generation_scale: Factor = Field(1.0, description="the network's own generation (sgens) x this")
    der: Annotated[list[DERAddition], Field(max_length=MAX_DER_ADDITIONS), FAIL_FAST] = []
    growth_rate: float = Field(
        0.0, ge=-0.5, le=1.0, allow_inf_nan=False, strict=True, description="consumption growth per year"
    )
    years: Annotated[list[Year], Field(min_length=1, max_length=100), FAIL_FAST] = [0]
    class_scaling: Annotated[dict[Name, Factor], Field(max_length=MAX_CLASSES), entries_within(MAX_CLASSES)] | None = (
        Field(
            None,
            description="per customer class (the network's own, GET /v1/networks/{id} `classes`, or the request's "
            "`classes`): its loads' consumption and its sgens' generation x this",
        )
    )

    @field_validator("bus_load_scale")
    @classmethod
    def _buses(cls, scales: dict[str, float] | None) -> dict[str, float] | None:
        seen: set[int] = set()
        for key in scales or {}:
            if not BUS_KEY.fullmatch(key):
                raise refused(f"key {key[:20]!r} is not a bus number", 'a load bus number as the key, e.g. "18"')
            if int(key) in seen:
                raise refused(f"bus {int(key)} is named twice", "each load bus once (no leading zeros)")
            seen.add(int(key))
        return scales


Number = Annotated[float, Field(allow_inf_nan=False, strict=True)]
# A time series' factors' ranges: service.engine.factor_ranges, which a profile table's columns are held to too.
# A factor per step, or per step and load bus: as many steps as the timestamps (at most MAX_STEPS)
StepFactors = Annotated[list[Number], Field(max_length=MAX_STEPS), FAIL_FAST]
BusFactors = Annotated[list[Number], Field(max_length=MAX_LOAD_BUSES), FAIL_FAST]
Factors = StepFactors | Annotated[list[BusFactors], Field(max_length=MAX_STEPS), FAIL_FAST]


def _in_range(values: list[Any] | None, low: float, high: float) -> list[Any] | None:
    """The first value outside [low, high] named by its index (the union's own errors would name both arms)."""
    if not values:
        return values
    try:
        table = np.asarray(values, dtype=np.float64)
    except ValueError:
        raise refused(
            "rows of different lengths", "one value per step, or one row of a value per load bus per step"
        ) from None
    bad = np.argwhere((table < low) | (table > high))
    if len(bad):
        at = "".join(f"[{int(i)}]" for i in bad[0])
        raise refused(f"{at}: {table[tuple(bad[0])]} is outside [{low}, {high}]", f"values within [{low}, {high}]")
    return values


class TimeSeriesSpec(Strict):
    timestamps: Annotated[
        list[Annotated[str, Field(max_length=64)]], Field(min_length=1, max_length=MAX_STEPS), FAIL_FAST
    ]
    load: Factors | None = Field(
        None,
        description=f"consumption factor per step, or per step and load bus (feature order), in {list(LOAD_RANGE)}; "
        "default 1",
    )
    pv: Factors | None = Field(
        None,
        description="generation output share per step, or per step and load bus (own and added DER), in "
        f"{list(PV_RANGE)}; default 1",
    )
    profiles: (
        Annotated[dict[Name, StepFactors], Field(max_length=4 * MAX_CLASSES), entries_within(4 * MAX_CLASSES)] | None
    ) = Field(
        None,
        description="factors per step by name: a customer class's (its consumption and generation), "
        "`<class>_pload` / `<class>_qload` for a load class's P and Q apart (SimBench), or one a DER follows; "
        f"in {list(PROFILE_RANGE)}; several apply multiplied (a class's profile x load or pv)",
    )
    step_hours: float = Field(0.25, gt=0.0, le=24.0, allow_inf_nan=False, strict=True)

    @field_validator("profiles")
    @classmethod
    def _profiles_range(cls, values: dict[str, list[float]] | None) -> dict[str, list[float]] | None:
        for name, factors in (values or {}).items():
            try:
                _in_range(factors, *PROFILE_RANGE)
            except PydanticCustomError as exc:
                raise refused(f"{name}{exc.message()}", str((exc.context or {}).get("expected"))) from None
        return values

    @field_validator("load")
    @classmethod
    def _load_range(cls, values: list[Any] | None) -> list[Any] | None:
        return _in_range(values, *LOAD_RANGE)

    @field_validator("pv")
    @classmethod
    def _pv_range(cls, values: list[Any] | None) -> list[Any] | None:
        return _in_range(values, *PV_RANGE)


MAX_SCENARIOS = 1000


def _der_in_all(scenarios: Any) -> Any:
    """The DER additions of every scenario together within MAX_DER_ADDITIONS, counted before any is validated
    (each scenario's are bounded by it too, and there may be MAX_SCENARIOS scenarios)."""
    if isinstance(scenarios, list) and len(scenarios) <= MAX_SCENARIOS:
        count = sum(len(s["der"]) for s in scenarios if isinstance(s, dict) and isinstance(s.get("der"), list))
        if count > MAX_DER_ADDITIONS:
            raise PydanticCustomError(
                "too_many_der",
                "hold {count} DER additions in all",
                {"count": count, "expected": f"at most {MAX_DER_ADDITIONS} DER additions across the scenarios"},
            )
    return scenarios


class StudyRequest(OneContext):
    model: str = Field("network-fit", description="a name from GET /v1/models")
    version: ModelVersion | None = None
    scenarios: Annotated[
        list[ScenarioSpec], Field(min_length=1, max_length=MAX_SCENARIOS), BeforeValidator(_der_in_all)
    ]
    time_series: TimeSeriesSpec | None = None
    voltage_band: VoltageBand | None = Field(None, description="[low, high] p.u.; default [0.95, 1.05]")
    quantiles: Levels = Field(
        [], description="default [0.05, 0.95]; the summary's lowest/highest use the first and last"
    )
    detail: Literal["summary", "long"] = Field("long", description="long: also every row x bus")
    as_job: StrictBool = Field(
        False,
        description="run the study as a batch job, in chunks across every worker (up to GRIDPFN_JOB_MAX_ROWS "
        "rows): answers 202 with the job; its per-bus summary at GET /v1/batch-jobs/{id}/summary (hours "
        "outside per scenario and year, as here), every row x bus at .../result?layout=long (with scenario, "
        "year, timestamp); `detail` does not apply",
    )
    classes: ClassBuses | None = Field(
        None,
        description="customer classes as lists of load bus numbers, in place of the network's own (built-in "
        "networks have none): `class_scaling` and time series profiles then name these",
    )


class StudyTableSpec(StudyRequest):
    """The `spec` part of a multipart study: a StudyRequest whose time series is the `file` part."""

    step_hours: float = Field(
        0.25, gt=0.0, le=24.0, allow_inf_nan=False, strict=True, description="hours each table row stands for"
    )

    @model_validator(mode="after")
    def _series_from_the_file(self) -> StudyTableSpec:
        if self.time_series is not None:
            raise refused(
                "time_series: given by the `file` part (a profile table); leave it out of the spec",
                "the spec without time_series (step_hours in the spec itself)",
            )
        return self


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


def upload_doc(spec: str, file: str) -> dict[str, Any]:
    """The OpenAPI of a multipart body of a `spec` field (described by `spec`) and a profile table `file` part
    (`file`); the route's JSON body comes from its signature."""
    return {
        "requestBody": {
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["spec", "file"],
                        "additionalProperties": False,
                        "properties": {
                            "spec": {"type": "string", "description": spec},
                            "file": {"type": "string", "format": "binary", "description": file},
                        },
                    }
                }
            }
        }
    }


_UPLOAD_DOC = upload_doc(
    "the study as JSON (StudyRequest without time_series, plus step_hours, default 0.25), at most 64 KiB: name a "
    "stored context set (context_id) for a large context. The first part",
    "the time series as a CSV (header row) or Parquet table: a `time` column of step labels, then factor columns: "
    "`load`, `pv`, `load_bus<k>`, `pv_bus<k>`, and profiles by name (a class's `H0-A` or SimBench's `H0-A_pload` / "
    "`H0-A_qload`, `PV5`); other columns are ignored (listed in the answer's `ignored_columns`). The last part",
)


@router.post(
    "/studies",
    responses={
        **problems(400, 401, 404, 413, 422, 503),
        202: {"description": "with `as_job`: the queued batch job's status, as POST /v1/batch-jobs answers"},
    },
    summary="Scenarios in a planner's terms: per-bus risk of leaving the voltage band",
    openapi_extra=_UPLOAD_DOC,
)
async def study(rt: RuntimeDep, tenant: TenantDep, request: Request, body: StudyRequest) -> Response:
    """`summary` lists every bus with its largest and mean P(outside the band) over the study's rows, the row
    where it is largest, the expected hours outside (time series) and the extreme quantiles; `rows` (detail
    "long") every row and bus. A time series may come as a file: multipart/form-data with `spec` and `file`.
    With `as_job`: 202 and the batch job that runs the study (its status, as POST /v1/batch-jobs answers)."""
    if body.as_job:
        return await _submit_job(rt, request, body, tenant)
    return _respond(await studies.study(rt, body, tenant), body.detail)


async def _submit_job(rt: Runtime, request: Request, body: StudyRequest, tenant: Any, table: Any = None) -> Response:
    """The study's rows written as a batch job's input (a scenario-year at a time, each row labelled with its
    scenario, year and timestamp) and the job queued for the workers."""
    jobs = await batch_jobs.get_jobs(request)
    prepared = await studies.prepare(rt, body, tenant, table, max_rows=jobs.settings.job_max_rows)
    options = batch_jobs.JobOptions(prepared.spec.quantiles, prepared.spec.band)
    # the model's fit (cached, as a study's) for each scenario-year's heaviest row's power flow before the 202
    encoded, _, geometry = await rt.fits.prepared(prepared.loaded, prepared.ctx, prepared.net)
    heaviest = studies.HeaviestRows(prepared.loaded.method, encoded.value, geometry, prepared.net.n_load)

    def build(job_id: str) -> Any:
        rows = jobs.prepare_study(job_id, studies.checked_blocks(prepared, heaviest), prepared.net)
        labels = tuple(field.name for field in STUDY_LABELS)
        return jobs.spec_for(
            job_id,
            prepared.loaded,
            prepared.ctx.id,
            prepared.net,
            options,
            rows,
            "study",
            tenant=tenant,
            labels=labels,
            hours_per_row=prepared.step_hours,
        )

    return await batch_jobs.submit_built(jobs, prepared.ctx, tenant, build)


async def study_upload(request: Request) -> Response:
    """POST /v1/studies as multipart/form-data: the `spec` field, then the profile table as the `file` part."""

    async def answer(rt: Runtime, tenant: Tenant, spec: StudyTableSpec, table: ProfileFile) -> Response:
        if spec.as_job:
            return await _submit_job(rt, request, spec, tenant, table)
        return _respond(await studies.study(rt, spec, tenant, table), spec.detail)

    return await table_upload(request, StudyTableSpec, "a study", answer)


SpecT = TypeVar("SpecT", bound=BaseModel)


async def table_upload(
    request: Request,
    spec_model: type[SpecT],
    what: str,
    answer: Callable[[Runtime, Tenant, SpecT, ProfileFile], Awaitable[Response]],
) -> Response:
    """A multipart planning request (`what`: "a study", ...): the `spec` field validated as `spec_model` before
    a byte of the file is read, the `file` part saved to a temporary folder (at most GRIDPFN_MAX_BODY_BYTES),
    then `answer(rt, tenant, spec, table)`; a bad cell of the table (load_table.InputError) is a 422 naming the
    field `file` and the cell's row and column. The folder is removed whatever happens."""
    rt: Runtime = request.app.state.runtime
    settings = rt.settings
    tenant = check_authorization_header(request.headers.get("authorization"), settings.api_keys, settings.admin_api_key)
    form = FormStream(request, max_fields=1)
    folder = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="gridpfn-profiles-"))
    try:
        try:
            spec, table = await _receive(form, folder, settings.max_body_bytes, spec_model, what)
        except (EngineError, ProblemError, RequestValidationError) as exc:
            if form.ended:
                raise
            raise form.closing(exc) from exc  # refused before the end of the body: the rest is not read
        try:
            return await answer(rt, tenant, spec, table)
        except InputError as exc:
            entry = field_error("file", exc.message, exc.expected)
            entry.update(row=exc.row, column=exc.column)
            raise ProblemError(422, "invalid-file", "Invalid input file", f"file: {exc}", [entry]) from exc
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)


async def _receive(
    form: FormStream, folder: Path, max_bytes: int, spec_model: type[SpecT], what: str
) -> tuple[SpecT, ProfileFile]:
    """The spec, checked before a byte of the file is read, and the file saved under `folder`."""
    fields, has_file = await form.fields_before_file()
    for name in fields:
        if name != "spec":
            raise InvalidInput(name, f"not a form field of {what}", f"a `spec` field ({what} as JSON), then `file`")
    if "spec" not in fields:
        raise InvalidInput("spec", "not among the form fields before the file part", "a `spec` field, then `file`")
    try:
        spec = spec_model.model_validate_json(fields["spec"])
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from exc
    if not has_file:
        raise InvalidInput("file", "no file part in the form", "a `file` part: the profile table as CSV or Parquet")

    def too_large(size: int) -> TooLarge:
        return TooLarge(
            "file",
            f"a profile table of more than {max_bytes} bytes",
            f"at most {max_bytes} bytes (GRIDPFN_MAX_BODY_BYTES): only the columns the study uses, or Parquet",
        )

    path = folder / "profiles"
    await form.save_file(path, max_bytes, too_large)
    await form.finish()
    return spec, ProfileFile(path, form.filename)


def _respond(answer: studies.StudyAnswer, detail: str) -> Response:
    """The study's JSON answer: the per-bus summary, and the long table when asked."""
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
        **answer.source.json(),
        "voltage_band": list(answer.band),
        "quantiles": list(answer.quantiles),
        "rows": len(rows.scenario),
        "extrapolated_rows": int(answer.off_context.extrapolated.sum()),
        "classes": list(answer.classes),
        "unused_profiles": list(rows.unused_profiles),
        "ignored_columns": list(answer.ignored_columns),
        "summary": summary,
        "long": _long(answer) if detail == "long" else None,
        "timing": {
            "total_ms": answer.seconds * 1e3,
            "model_encode_ms": answer.timing.encode_s * 1e3,
            "model_predict_ms": answer.timing.predict_s * 1e3,
            "context_cached": answer.timing.context_cached,
        },
    }
    return json_response(body_out)

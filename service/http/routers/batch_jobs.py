"""Batch jobs over HTTP: submit (upload or simulate) -> 202 + id, poll status, fetch the result (wide, or long:
a row per input row and bus, service.jobs.long_results), read its per-bus summary (service.jobs.result_summary),
cancel.

POST takes either multipart/form-data (form fields, then a CSV or Parquet `file` part) or JSON with a
`simulate` spec. The fields are read first and the model and context set looked up before any of the
file is (service.http.form_stream), which then streams to disk under a limit derived from the row
limit and the network's columns (JobSettings.upload_limit). Files are validated completely, loads
within the range JSON requests get, before anything is queued, so a bad file is a 422 naming its
row and column and leaves no job behind; rows past the limit are a 413 and are never written. The
job runs on the context set's network: the file's columns are that network's features, a `simulate`
spec must name the same network, and the model is its checkpoint for that network (or physics-fit).
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import redis
from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from pydantic import Field, ValidationError
from starlette.responses import FileResponse, Response, StreamingResponse

from service.constants import SHA256_ID
from service.engine.answers import VoltageBand
from service.engine.errors import EngineError, InvalidInput, NotFound, TooLarge
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant
from service.http.auth import TenantDep, require_api_key
from service.http.deps import RuntimeDep, problems
from service.http.form_stream import FRAMING_BYTES, FormStream
from service.http.problems import ProblemError, field_error, unavailable
from service.http.responses import json_response
from service.http.schemas import VERSION_PATTERN, ContextId, Levels, ModelVersion, SimulateSpec, Strict, StrictBool
from service.jobs import long_results, result_summary
from service.jobs.csv_cells import safe_table
from service.jobs.inputs import InputError
from service.jobs.jobspec import HOSTING_SOURCE, JobSpec, JobState
from service.jobs.runner import job_network
from service.jobs.service import JobService, new_job_id
from service.jobs.settings import JobSettings

log = logging.getLogger(__name__)

router = APIRouter(
    prefix="/v1/batch-jobs", tags=["batch jobs"], dependencies=[Depends(require_api_key)], responses=problems(401, 503)
)
JobId = PathParam(pattern=r"^[0-9a-f]{32}$", description="id returned by POST /v1/batch-jobs")
PARQUET = "application/vnd.apache.parquet"
JSON_BODY_LIMIT = 1 << 20


class BatchOptions(Strict):
    """Fields shared by both ways of submitting."""

    model: str = Field(description="a name from GET /v1/models")
    version: ModelVersion | None = None
    context_id: ContextId
    quantiles: Levels = []
    voltage_band: VoltageBand | None = Field(None, description="[low, high] p.u., low < 1 <= high; adds p_outside_*")
    with_ground_truth: StrictBool = Field(False, description="also solve the AC power flow per row; adds true_*, err_*")


class BatchSimulate(BatchOptions):
    simulate: SimulateSpec


async def get_jobs(request: Request) -> JobService:
    """The app's JobService, built on first use from the runtime (Redis URL, registry) and JobSettings.

    async on purpose: it runs on the event loop, so two first requests cannot build two services."""
    state = request.app.state
    if getattr(state, "jobs", None) is None:
        rt: Runtime = state.runtime
        job_settings = getattr(state, "job_settings", None) or JobSettings()
        state.jobs = JobService(job_settings, rt.settings.redis_url, rt.registry, max(rt.settings.store_timeout_s, 2.0))
    return state.jobs


JobsDep = Annotated[JobService, Depends(get_jobs)]  # a route's `jobs` parameter


async def _call(fn, *args):
    """Blocking job-store work off the event loop; an unreachable Redis is a 503."""
    try:
        return await asyncio.to_thread(fn, *args)
    except redis.RedisError as exc:
        raise unavailable("store-unavailable", "Job store unavailable", f"{type(exc).__name__}: {exc}", 5) from exc


def _validation(exc: ValidationError, location: str) -> RequestValidationError:
    return RequestValidationError([{**e, "loc": (location, *e["loc"])} for e in exc.errors()])


def _split(value: str) -> Any:
    """A form value: a JSON list as text (kept for json.loads) or comma-separated numbers."""
    value = value.strip()
    if value.startswith("["):
        return value
    return [v.strip() for v in value.split(",") if v.strip()]


FORM_FIELDS = ("file", "model", "version", "context_id", "quantiles", "voltage_band", "with_ground_truth")
_FORM_BOOLS = {"true": True, "1": True, "false": False, "0": False}


def _number(text: Any) -> Any:
    """A form list item as a float when it reads as one (the model's strict check names the rest)."""
    try:
        return float(text) if isinstance(text, str) else text
    except ValueError:
        return text


def _form_options(form: Any) -> BatchOptions:
    unknown = sorted(set(form.keys()) - set(FORM_FIELDS))
    if unknown:  # the same policy as JSON bodies: undeclared fields are refused
        raise InvalidInput(unknown[0], "unknown form field", f"only the fields {', '.join(FORM_FIELDS)}")
    raw: dict[str, Any] = {}
    for name in ("model", "version", "context_id"):
        if form.get(name) is not None:
            raw[name] = form.get(name)
    if form.get("with_ground_truth") is not None:
        text = str(form.get("with_ground_truth"))
        raw["with_ground_truth"] = _FORM_BOOLS.get(text.strip().lower(), text)
    for name in ("quantiles", "voltage_band"):
        if form.get(name):
            value = _split(str(form.get(name)))
            try:
                raw[name] = json.loads(value) if isinstance(value, str) else [_number(v) for v in value]
            except ValueError as exc:
                raise InvalidInput(name, f"unparseable: {exc}", "comma-separated numbers or a JSON list") from exc
    try:
        return BatchOptions.model_validate(raw)
    except ValidationError as exc:
        raise _validation(exc, "body") from exc


async def _resolve(rt: Runtime, options: BatchOptions, tenant: Tenant) -> tuple[Any, Any, Any]:
    """(model, context set, network): the network is the context set's; another tenant's set is NotFound."""
    rt.models.known(options.model)
    ctx = await rt.contexts.stored(options.context_id, tenant=tenant)
    net = await rt.networks.for_context(ctx.network, ctx.id, tenant=tenant)
    loaded = await rt.models.choose(options.model, net, options.version)
    rt.checks.context_size(loaded, ctx)
    rt.checks.accepts(loaded, ctx)  # a sparse context only for a model that accepts missing values
    return loaded, ctx, net


def _file_problem(exc: InputError) -> ProblemError:
    entry = field_error("file", exc.message, exc.expected)
    entry.update(row=exc.row, column=exc.column)
    return ProblemError(422, "invalid-file", "Invalid input file", f"file: {exc}", [entry])


def _upload_too_large(what: str, limit: int, columns: int) -> TooLarge:
    return TooLarge(
        "file",
        what,
        f"at most {limit} bytes for a network of {columns} load columns (GRIDPFN_JOB_MAX_ROWS rows of "
        "GRIDPFN_JOB_UPLOAD_CELL_BYTES per cell, or GRIDPFN_JOB_MAX_UPLOAD_BYTES when lower)",
    )


async def _submit_upload(request: Request, rt: Runtime, jobs: JobService, tenant: Tenant) -> tuple[Any, Any, str]:
    form = FormStream(request, max_fields=len(FORM_FIELDS))
    try:
        return await _receive_upload(form, request, rt, jobs, tenant)
    except (EngineError, ProblemError, RequestValidationError) as exc:
        if form.ended:
            raise
        raise form.closing(exc) from exc  # refused before the end of the body: the rest is not read


async def _receive_upload(
    form: FormStream, request: Request, rt: Runtime, jobs: JobService, tenant: Tenant
) -> tuple[Any, Any, str]:
    """The form's fields come first: the model and context set are looked up (404, 422) and the upload
    limit set before a byte of the file is read; the file then streams to disk under that limit."""
    fields, has_file = await form.fields_before_file()
    missing = [name for name in ("model", "context_id") if name not in fields]
    if has_file and missing and set(fields) <= set(FORM_FIELDS):
        raise InvalidInput(
            missing[0],
            "not among the form fields before the file part",
            "the form fields model and context_id (and any options) before the file part",
        )
    options = _form_options(fields)
    if not has_file:
        raise InvalidInput("file", "no file part in the form", "a multipart `file` field with CSV or Parquet")
    loaded, ctx, net = await _resolve(rt, options, tenant)
    columns = len(net.feature_names)
    limit = jobs.settings.upload_limit(columns)
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > form.received + limit + FRAMING_BYTES:
        raise _upload_too_large(f"a body of {length} bytes", limit, columns)  # refused before the file is read
    job_id = new_job_id()
    files = jobs.files(job_id)
    files.dir.mkdir(parents=True, exist_ok=True)
    staged = files.dir / "upload"
    try:
        await form.save_file(
            staged, limit, lambda _: _upload_too_large(f"an upload of more than {limit} bytes", limit, columns)
        )
        await form.finish()
        rows, fmt = await asyncio.to_thread(jobs.prepare_upload, job_id, staged, form.filename, list(net.feature_names))
    except InputError as exc:
        files.remove()
        raise _file_problem(exc) from exc
    except BaseException:
        files.remove()
        raise
    finally:
        staged.unlink(missing_ok=True)
    return jobs.spec_for(job_id, loaded, ctx.id, net, options, rows, fmt, tenant=tenant), ctx, job_id


async def _submit_simulated(request: Request, rt: Runtime, jobs: JobService, tenant: Tenant) -> tuple[Any, Any, str]:
    body = bytearray()
    async for block in request.stream():  # capped while reading: this path skips the app's body limit
        body += block
        if len(body) > JSON_BODY_LIMIT:
            raise TooLarge(
                "body",
                f"a JSON body over {JSON_BODY_LIMIT} bytes",
                f"at most {JSON_BODY_LIMIT} bytes; send load vectors as a file upload",
            )
    try:
        options = BatchSimulate.model_validate_json(body)
    except ValidationError as exc:
        raise _validation(exc, "body") from exc
    if options.simulate.n > jobs.settings.job_max_rows:
        raise TooLarge("simulate.n", f"{options.simulate.n} rows", f"at most {jobs.settings.job_max_rows} rows")
    loaded, ctx, net = await _resolve(rt, options, tenant)
    if options.simulate.network != net.name:
        raise InvalidInput(
            "simulate.network",
            f"{options.simulate.network} is not the context set's network {net.name}",
            f"{net.name}: the job's loads are for the network its context set was made on",
        )
    job_id = new_job_id()
    try:  # the spec passed BatchSimulate's checks: a failure here is the service's (a 500), not the request's
        rows = await asyncio.to_thread(jobs.prepare_simulated, job_id, options.simulate, net)
    except BaseException:
        jobs.files(job_id).remove()
        raise
    return jobs.spec_for(job_id, loaded, ctx.id, net, options, rows, "simulate", tenant=tenant), ctx, job_id


_REQUEST_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["model", "context_id", "file"],
                    "additionalProperties": False,
                    "properties": {
                        "model": {"type": "string"},
                        "context_id": {"type": "string", "pattern": SHA256_ID},
                        "version": {"type": "string", "pattern": VERSION_PATTERN},
                        "quantiles": {"type": "string", "example": "0.05,0.5,0.95"},
                        "voltage_band": {"type": "string", "example": "0.95,1.05"},
                        "with_ground_truth": {"type": "boolean"},
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "CSV (header row) or Parquet; the feature columns of the context set's network. "
                            "The last part: every other field comes before it",
                        },
                    },
                }
            },
            "application/json": {
                "schema": BatchSimulate.model_json_schema(ref_template="#/components/schemas/{model}"),
                "example": {
                    "simulate": {"network": "ieee33", "delta": 0.1, "n": 10000, "seed": 0},
                    "model": "ieee33-transformer-dva",
                    "context_id": "0" * 64,
                    "quantiles": [0.05, 0.5, 0.95],
                    "voltage_band": [0.95, 1.05],
                },
            },
        },
    }
}


@router.post(
    "",
    status_code=202,
    summary="Submit a batch job (file upload or simulate spec)",
    responses=problems(400, 404, 413, 415, 422),
    openapi_extra=_REQUEST_DOC,
)
async def submit(rt: RuntimeDep, jobs: JobsDep, tenant: TenantDep, request: Request) -> Response:
    """Answers 202 with the job's status and `Location: /v1/batch-jobs/{id}`."""
    kind = request.headers.get("content-type", "")
    if kind.startswith("multipart/form-data"):
        spec, ctx, job_id = await _submit_upload(request, rt, jobs, tenant)
    elif kind.startswith("application/json"):
        spec, ctx, job_id = await _submit_simulated(request, rt, jobs, tenant)
    else:
        raise ProblemError(
            415,
            "unsupported-media-type",
            "Unsupported media type",
            f"content-type {kind or 'none'} is not accepted",
            [field_error("Content-Type", "unsupported", "multipart/form-data or application/json", "header")],
        )
    return await queued(jobs, spec, ctx, tenant)


@dataclass(frozen=True)
class JobOptions:
    """What a job the server builds (a study's, a hosting-capacity study's) asks of each row besides mean and
    std, as JobService.spec_for reads it from a submitted job's BatchOptions: the quantile levels, the voltage
    band (P(outside) columns) and whether to solve the power flow beside."""

    quantiles: tuple[float, ...] = ()
    voltage_band: tuple[float, float] | None = None
    with_ground_truth: bool = False


async def submit_built(jobs: JobService, ctx: Any, tenant: Tenant, build: Callable[[str], JobSpec]) -> Response:
    """A job the server builds (a study's rows, a hosting-capacity study's): `build(job_id)` writes its input
    and returns its spec, in a worker thread; on any error nothing is left behind. Then queued."""
    job_id = new_job_id()
    try:
        spec = await asyncio.to_thread(build, job_id)
    except BaseException:
        jobs.files(job_id).remove()
        raise
    return await queued(jobs, spec, ctx, tenant)


async def queued(jobs: JobService, spec: Any, ctx: Any, tenant: Tenant) -> Response:
    """Queue a job whose input is in place (its files removed if that fails): 202, its status, its Location."""
    try:
        await _call(jobs.enqueue, spec, ctx.to_bytes())
    except BaseException:
        jobs.files(spec.id).remove()
        raise
    log.info("job %s queued: %d rows, model %s, context %s", spec.id, spec.rows, spec.model, spec.context_id[:12])
    response = json_response(await _status(jobs, spec.id, tenant), status=202)
    response.headers["Location"] = f"/v1/batch-jobs/{spec.id}"
    return response


async def _status(jobs: JobService, job_id: str, tenant: Tenant) -> dict:
    """The job's status; 404 when it does not exist or is another tenant's (one answer for both)."""
    status = await _call(functools.partial(jobs.status, job_id, tenant=tenant))
    if status is None:
        raise NotFound("batch job", job_id, "job_id")
    return status


def refuse_if_per_bus(job: dict, field: str, location: str) -> None:
    """A hosting-capacity job's result is a row per candidate bus already: no long layout, no risk summary."""
    if job["source"] == HOSTING_SOURCE:
        raise InvalidInput(
            field,
            "a hosting-capacity job's result is already a row per candidate bus",
            "GET /v1/batch-jobs/{id}/result in the wide layout (the default)",
            location,
        )


async def done_status(jobs: JobService, job_id: str, tenant: Tenant, what: str) -> dict:
    """The job's status when it is done; 409 naming its state otherwise (`what` exists once it is done)."""
    job = await _status(jobs, job_id, tenant)
    if job["state"] != JobState.DONE.value:
        raise ProblemError(
            409,
            "job-not-done",
            "Result not available",
            f"job {job_id} is {job['state']}; {what} exists once it is done",
            [field_error("job_id", f"state {job['state']}", "a job in state done", "path")],
        )
    return job


@router.get("/{job_id}", summary="State, progress (rows done / total, rows/s) and errors", responses=problems(404, 422))
async def status(jobs: JobsDep, tenant: TenantDep, job_id: str = JobId) -> Response:
    return json_response(await _status(jobs, job_id, tenant))


def _wanted_format(request: Request, fmt: str | None) -> str:
    if fmt is not None:
        return fmt
    accept = request.headers.get("accept", "")
    return "csv" if "text/csv" in accept and "parquet" not in accept else "parquet"


@router.get(
    "/{job_id}/result",
    summary="The result file: Parquet (default) or CSV by Accept or ?format=; wide (default) or ?layout=long",
    responses={**problems(404, 409, 422), 200: {"content": {PARQUET: {}, "text/csv": {}}}},
)
async def result(
    rt: RuntimeDep,
    jobs: JobsDep,
    tenant: TenantDep,
    request: Request,
    job_id: str = JobId,
    format: str | None = Query(None, pattern="^(parquet|csv)$", description="overrides Accept"),
    layout: str = Query(
        "wide",
        pattern="^(wide|long)$",
        description="wide: a row per input row, a column per statistic and bus (mean_vm_pu_bus18, ...); "
        "long: a row per input row and bus (row, bus, bus_name, mean, std, q<level>..., p_outside, ...)",
    ),
) -> Response:
    job = await done_status(jobs, job_id, tenant, "the result")
    path = jobs.files(job_id).result
    csv = _wanted_format(request, format) == "csv"
    if layout == "long":
        refuse_if_per_bus(job, "layout", "query")
        wide = await _wide_layout(rt, jobs, job_id, tenant)
        stream = long_results.csv_stream if csv else long_results.parquet_stream
        name = f"{job_id}-long.{'csv' if csv else 'parquet'}"
        return StreamingResponse(
            stream(path, wide),
            media_type="text/csv" if csv else PARQUET,
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )
    if csv:
        from service.jobs.results import csv_stream

        return StreamingResponse(
            _hosting_csv(path) if job["source"] == HOSTING_SOURCE else csv_stream(path),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{job_id}.csv"'},
        )
    return FileResponse(path, media_type=PARQUET, filename=f"{job_id}.parquet")


def _hosting_csv(path: Path) -> Iterator[bytes]:
    """A hosting-capacity job's result (a row per candidate bus, small) as CSV: its list columns (curve_kw,
    curve_risk) written as JSON lists of full-precision numbers, one quoted cell each (CSV has no lists)."""
    table = pq.read_table(path)
    columns = {
        name: (
            pa.array([json.dumps(value) for value in column.to_pylist()], pa.string())
            if pa.types.is_list(column.type)
            else column
        )
        for name, column in zip(table.column_names, table.columns, strict=True)
    }
    buffer = io.BytesIO()
    pcsv.write_csv(safe_table(pa.table(columns)), buffer)  # a bus name a spreadsheet would read as a formula: quoted
    yield buffer.getvalue()


HOURS_IN_A_YEAR = 8784.0  # a leap year: the most one result row can stand for
STUDY_GROUPS = ("scenario", "year")  # a study job's hours outside are counted per scenario and year, as a study's


@router.get(
    "/{job_id}/summary",
    summary="Per bus: largest and mean P(outside the band), the worst row, expected hours outside, extreme quantiles",
    responses=problems(404, 409, 422),
)
async def summary(
    rt: RuntimeDep,
    jobs: JobsDep,
    tenant: TenantDep,
    job_id: str = JobId,
    hours_per_row: float | None = Query(
        None,
        gt=0.0,
        le=HOURS_IN_A_YEAR,
        allow_inf_nan=False,
        description="the hours each input row stands for (a time series' step, 0.25 for 15 minutes): adds "
        "hours_outside = the sum over rows of P(outside) x hours_per_row, and its std; needs a voltage_band. "
        "Default: a time-series study job's step (its hours per scenario and year, the largest, as POST /v1/studies)",
    ),
) -> Response:
    """`summary` lists every bus as POST /v1/studies' does, the worst row named by its 0-based position in the
    result (and the long layout's `row`); computed over the result a slice at a time, never whole."""
    job = await done_status(jobs, job_id, tenant, "the summary")
    refuse_if_per_bus(job, "job_id", "path")
    if hours_per_row is None:
        hours_per_row = job["hours_per_row"]  # a time-series study's step; None for other jobs
    if hours_per_row is not None and job["voltage_band"] is None:
        raise InvalidInput(
            "hours_per_row",
            "the job has no voltage_band, so no P(outside the band) to count hours with",
            "no hours_per_row, or a job submitted with a voltage_band",
            "query",
        )
    wide = await _wide_layout(rt, jobs, job_id, tenant)
    path = jobs.files(job_id).result
    group_by = STUDY_GROUPS if set(STUDY_GROUPS) <= set(job["labels"]) else ()
    found = await asyncio.to_thread(result_summary.summarize, path, wide, hours_per_row, group_by)
    body = _summary_body(job, wide, found, hours_per_row)
    if job["labels"] and found.buses.worst_row is not None:  # a study job: the worst row by its labels too
        labels = tuple(job["labels"])
        at = await asyncio.to_thread(result_summary.labels_at, path, found.buses.worst_row, labels)
        for i, entry in enumerate(body["summary"]):
            entry.update({f"worst_{name}": at[name][i] for name in labels})
    return json_response(body)


def _summary_body(job: dict, wide: Any, found: Any, hours_per_row: float | None) -> dict:
    """The JSON answer: the job's facts, then a dict per bus (None where the job did not ask for what a
    field needs: a band for P(outside), quantiles for the extremes)."""
    s = found.buses
    per_bus = {
        "max_p_outside": s.max_p_outside,
        "mean_p_outside": s.mean_p_outside,
        "worst_row": s.worst_row,
        "hours_outside": s.hours_outside,
        "hours_outside_std": s.hours_outside_std,
        "lowest_vm_pu": s.lowest,
        "highest_vm_pu": s.highest,
        **{key: values for key, values in wide.per_bus},
    }
    columns = {key: [None] * len(wide.buses) if v is None else np.asarray(v).tolist() for key, v in per_bus.items()}
    rows = [
        {"bus": bus, "bus_name": name, **{key: values[i] for key, values in columns.items()}}
        for i, (bus, name) in enumerate(zip(wide.buses, wide.bus_names, strict=True))
    ]
    return {
        "job_id": job["id"],
        "model": job["model"],
        "network": job["network"],
        "context_id": job["context_id"],
        "voltage_band": job["voltage_band"],
        "quantiles": job["quantiles"],
        "extremes_of": [found.low_level, found.high_level],
        "hours_per_row": hours_per_row,
        "rows": job["rows_total"],
        "extrapolated_rows": found.extrapolated_rows,
        "summary": rows,
    }


async def _wide_layout(rt: Runtime, jobs: JobService, job_id: str, tenant: Tenant) -> long_results.WideLayout:
    """What the done job's result columns are, with its network's bus numbers and names."""
    job = await _call(jobs.states.get, job_id)
    if job is None:  # deleted since its status was read
        raise NotFound("batch job", job_id, "job_id")
    spec: JobSpec = job["spec"]
    files = jobs.files(job_id)
    try:
        net = await rt.networks.resolve(spec.network, "job_id", "path", tenant=tenant)
    except NotFound:  # an upload whose stored copy expired: the job's directory keeps its JSON
        net = await rt.executor.run(job_network, spec, files)
    if tuple(net.output_names) != tuple(spec.outputs):
        raise RuntimeError(f"job {job_id}: network {spec.network}'s outputs are not the job's")
    names = tuple(net.bus_name(bus) for bus in net.output_buses)

    def read() -> long_results.WideLayout:
        schema = pq.read_schema(files.result)
        return long_results.WideLayout.of(schema, spec.features, spec.outputs, net.output_buses, names)

    return await asyncio.to_thread(read)


@router.delete(
    "/{job_id}",
    summary="Cancel a queued or running job; delete a finished one",
    responses={
        **problems(404, 422),
        202: {"description": "cancelled; body is the job's status"},
        204: {"description": "finished job and its files deleted"},
    },
)
async def cancel(jobs: JobsDep, tenant: TenantDep, job_id: str = JobId) -> Response:
    job = await _status(jobs, job_id, tenant)
    if not JobState(job["state"]).terminal and await _call(jobs.cancel, job_id):
        return json_response(await _status(jobs, job_id, tenant), status=202)
    await _call(jobs.delete, job_id)
    return Response(status_code=204)


async def shutdown(app: Any) -> None:
    jobs = getattr(app.state, "jobs", None)
    if jobs is not None:
        jobs.close()

"""POST /v1/hosting-capacity: per candidate bus, the largest PV the feeder takes with the risk of a bus
above the voltage limit at most `alpha` on every study row, with the risk-vs-size curve
(models.hosting_capacity; flow in service.engine.hosting).

The body is JSON (HostingCapacityRequest: rows as `loads` or `load_scales`), or multipart/form-data when the
rows are a profile table, as POST /v1/studies takes one (the same helpers, formats and limits): a `spec` field
(HostingTableSpec: the study as JSON without rows) and then a `file` part, a CSV or Parquet table whose steps
shape the network's base loads (service.engine.hosting.table_rows)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field, model_validator
from starlette.responses import Response

from models.hosting_capacity import passes
from service.engine import hosting
from service.engine.profile_table import ProfileFile
from service.engine.runtime import Runtime
from service.engine.tenants import Tenant
from service.http.auth import TenantDep, require_api_key
from service.http.deps import RuntimeDep, problems
from service.http.limits import MAX_LOAD_BUSES, MAX_STEPS
from service.http.responses import json_response
from service.http.routers import batch_jobs
from service.http.routers.studies import ClassBuses, Name, table_route, table_upload, upload_doc
from service.http.schemas import FAIL_FAST, LoadRow, ModelVersion, OneContext, StrictBool, StrictInt, refused
from service.jobs.jobspec import HOSTING_SOURCE, HostingJob

router = APIRouter(
    prefix="/v1",
    tags=["planning"],
    route_class=table_route(lambda request: hosting_upload(request)),
    dependencies=[Depends(require_api_key)],
)

Share = Annotated[float, Field(ge=0.0, le=1.0, strict=True, allow_inf_nan=False)]
Scale = Annotated[float, Field(ge=0.0, le=10.0, allow_inf_nan=False, strict=True)]
# The study's rows: a time series or a load range, at most MAX_STEPS of them as a study's steps (its work, rows x
# candidates x search passes, is the engine's check: service.engine.hosting); the first bad row is refused.
StudyRows = Annotated[list[LoadRow], Field(min_length=1, max_length=MAX_STEPS), FAIL_FAST]


class HostingOptions(OneContext):
    """The context and model (as for predict), the candidates and the risk allowed: every field of a hosting-
    capacity study but its rows."""

    model: str = Field("network-fit", description="a name from GET /v1/models")
    version: ModelVersion | None = None
    buses: Annotated[list[StrictInt], Field(min_length=1, max_length=MAX_LOAD_BUSES), FAIL_FAST] | None = Field(
        None, description="candidate bus numbers (default: every load bus)"
    )
    upper_pu: float = Field(
        1.05, gt=1.0, le=1.5, allow_inf_nan=False, strict=True, description="the voltage limit PV must keep"
    )
    alpha: float = Field(
        0.05, gt=0.0, lt=1.0, allow_inf_nan=False, strict=True, description="risk allowed on every row"
    )
    max_kw: float | None = Field(
        None,
        gt=0.0,
        le=1e7,
        allow_inf_nan=False,
        strict=True,
        description="largest size searched (default: 2x the base load)",
    )
    curve_points: StrictInt = Field(11, ge=2, le=101, description="points of each risk-vs-size curve")
    as_job: StrictBool = Field(
        False,
        description="run it as a batch job, a group of candidate buses per chunk across every worker (work up to "
        "GRIDPFN_JOB_MAX_ROWS model rows): answers 202 with the job; its result (GET /v1/batch-jobs/{id}/result) "
        "a row per candidate bus: bus, bus_name, hosting_capacity_kw, at_max_kw, risk_without_pv, curve_kw, "
        "curve_risk",
    )


class HostingCapacityRequest(HostingOptions):
    """The context and model (as for predict), the study's load rows, PV profile and candidates."""

    loads: StudyRows | None = Field(
        None, description="(rows, features) load vectors (a time series or a load range); default: see load_scales"
    )
    load_scales: Annotated[list[Scale], Field(min_length=1, max_length=1000), FAIL_FAST] | None = Field(
        None, description=f"rows = the network's base loads x each scale (default {list(hosting.DEFAULT_SCALES)})"
    )
    pv_profile: Annotated[list[Share], Field(min_length=1, max_length=MAX_STEPS), FAIL_FAST] | None = Field(
        None, description="PV output per row as a share of its size, in [0, 1] (default 1: full output)"
    )

    @model_validator(mode="after")
    def _one_kind_of_rows(self) -> HostingCapacityRequest:
        if self.loads is not None and self.load_scales is not None:
            raise refused("give either loads or load_scales, not both", "loads or load_scales, one of them")
        return self


class HostingTableSpec(HostingOptions):
    """The `spec` part of a multipart hosting-capacity study: its rows are the `file` part, a profile table."""

    pv_profile: Name | None = Field(
        None,
        description="a profile column of the table the new PV's output follows (e.g. SimBench's PV5), times the "
        "`pv` column when there is one; default: the `pv` column alone (full output without one). Each within [0, 1]",
    )
    classes: ClassBuses | None = Field(
        None,
        description="customer classes as lists of load bus numbers, in place of the network's own (built-in "
        "networks have none): the table's profile columns then name these",
    )

    @model_validator(mode="before")
    @classmethod
    def _rows_from_the_file(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in ("loads", "load_scales"):
                if name in data:
                    raise refused(
                        f"{name}: the rows are given by the `file` part (a profile table); leave {name} out of the spec",
                        "the spec without loads and load_scales",
                    )
        return data


_UPLOAD_DOC = upload_doc(
    "the study as JSON (HostingCapacityRequest without loads and load_scales; pv_profile the name of a profile "
    "column, classes as in POST /v1/studies), at most 64 KiB: name a stored context set (context_id) for a "
    "large context. The first part",
    "the rows as a CSV (header row) or Parquet table, a row per step: a `time` column of step labels, then "
    "factor columns shaping the network's base loads as a study's default scenario: `load`, `pv` (the network's "
    "generation and the new PV), `load_bus<k>`, profiles by name (a class's `H0-A` or SimBench's `H0-A_pload` / "
    "`H0-A_qload`, `PV5`); no `pv_bus<k>`; other columns are ignored (listed in the answer's `ignored_columns`). "
    "The last part",
)


@router.post(
    "/hosting-capacity",
    responses={
        **problems(400, 401, 404, 413, 422, 503),
        202: {"description": "with `as_job`: the queued batch job's status, as POST /v1/batch-jobs answers"},
    },
    summary="Largest PV per bus with P(a bus above the limit) <= alpha on every row",
    openapi_extra=_UPLOAD_DOC,
)
async def hosting_capacity(
    rt: RuntimeDep, tenant: TenantDep, request: Request, body: HostingCapacityRequest
) -> Response:
    """P(a bus above `upper_pu`) is bounded by the union over buses (never below the true joint risk), so the
    capacity errs on the safe side. Voltage only: line and transformer loading are not checked. The rows may
    come as a profile table: multipart/form-data with `spec` and `file`. With `as_job`: 202 and the batch job
    that runs it, a group of candidate buses per chunk."""
    if body.as_job:
        return await _submit_job(rt, request, body, tenant)
    return _respond(await hosting.study(rt, body, tenant))


async def hosting_upload(request: Request) -> Response:
    """POST /v1/hosting-capacity as multipart/form-data: the `spec` field, then the profile table as `file`."""

    async def answer(rt: Runtime, tenant: Tenant, spec: HostingTableSpec, table: ProfileFile) -> Response:
        if spec.as_job:
            return await _submit_job(rt, request, spec, tenant, table)
        return _respond(await hosting.study(rt, spec, tenant, table))

    return await table_upload(request, HostingTableSpec, "a hosting-capacity study", answer)


def _respond(answer: hosting.HostingAnswer) -> Response:
    result = answer.result
    return json_response(
        {
            **answer.source.json(),
            "rows": answer.rows,
            "max_kw": answer.max_kw,
            "resolution_kw": result.resolution_mw * 1e3,
            "risk_without_pv": float(result.base_risk[0]) if len(result.base_risk) else None,
            "ignored_columns": list(answer.ignored_columns),
            "buses": [
                {
                    "bus": bus,
                    "name": name,
                    "hosting_capacity_kw": float(result.capacity_mw[i] * 1e3),
                    "at_max_kw": bool(result.at_max[i]),
                    "curve_kw": (result.curve_mw[i] * 1e3).tolist(),
                    "curve_risk": result.curve_risk[i].tolist(),
                }
                for i, (bus, name) in enumerate(zip(answer.buses, answer.bus_names, strict=True))
            ],
            "timing": {
                "total_ms": answer.seconds * 1e3,
                "context_cached": answer.context_cached,
                "query_rows": result.rows_asked,
            },
        }
    )


async def _submit_job(
    rt: Runtime, request: Request, body: HostingOptions, tenant: Tenant, table: ProfileFile | None = None
) -> Response:
    """The study's rows and PV profile as a job's input, its candidates the job's rows: each chunk searches a
    group of them over every load row (a chunk about GRIDPFN_JOB_CHUNK_ROWS model rows, at least one bus)."""
    jobs = await batch_jobs.get_jobs(request)
    prepared = await hosting.prepare(rt, body, tenant, table, job_max_rows=jobs.settings.job_max_rows)
    await hosting.refuse_unsolved_base(rt, prepared)  # a row without a power flow: a 422 now, not a failed job
    study, net = prepared.spec, prepared.net
    per_bus = len(study.loads) * passes(study)
    about = HostingJob(
        buses=tuple(prepared.buses),
        bus_names=tuple(net.bus_name(b) for b in prepared.buses),
        positions=tuple(int(j) for j in study.candidates),
        upper_pu=study.upper_pu,
        alpha=study.alpha,
        max_mw=study.max_mw,
        curve_points=study.curve_points,
        rows_field=prepared.rows_field,
    )
    options = batch_jobs.JobOptions()  # a row per candidate bus: no quantiles, band or power flow per row

    def build(job_id: str) -> Any:
        jobs.prepare_hosting(job_id, study.loads, study.profile, net)
        return jobs.spec_for(
            job_id,
            prepared.loaded,
            prepared.ctx.id,
            net,
            options,
            len(prepared.buses),
            HOSTING_SOURCE,
            tenant=tenant,
            hosting=about,
            chunk_rows=max(1, jobs.settings.job_chunk_rows // per_bus),
        )

    return await batch_jobs.submit_built(jobs, prepared.ctx, tenant, build)

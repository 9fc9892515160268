"""The operator's page at /ui: static files served by the service itself, and three small JSON helpers
the page needs beyond the /v1 API (which gives it models, networks, context sets, predictions and jobs).

- `POST /ui/api/context-sets`: a measured context uploaded as a CSV or Parquet file (the 64 load columns
  and the 32 `vm_pu_bus*` columns, as `gridpfn simulate -o` writes them) stored exactly as
  `POST /v1/context-sets` stores `{x, y}` (an empty or NaN cell is a value not measured, as null there;
  every load and voltage column is read as float64, whatever the file's first rows hold); a bad cell is a
  422 naming its row and column. An optional `converged` column (`gridpfn simulate -o` writes one) leaves
  out the rows false in it; a cell of it that is not true or false (1 or 0), an empty one included, is a
  422 naming its row: whether that row's voltages were solved is not guessed. A reading far from the network
  model's power flow at its row's loads (service.engine.readings) is a 422 naming its row and column, a column's
  readings that scatter like no meter's one naming the column. The file is decoded only up to
  `GRIDPFN_MAX_CONTEXT_ROWS` rows (a Parquet file is sized from its footer first).
- `GET /ui/api/batch-jobs/{id}/risk-histogram`: the histogram of each row's worst-bus P(outside band)
  over a finished job's result, and how many rows are extrapolated (and the largest extrapolation),
  computed where the result file is (a result can have millions of rows).
- `GET /ui/api/networks/{id}/loads`: a network's base consumption and generation per load bus, apart (the
  description's `loads` are their difference), and the load buses' names: the page's load level scales
  consumption only.

None of them is in the OpenAPI document: they serve the page, not API clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from fastapi import APIRouter, Depends, Query, Request
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.responses import FileResponse, Response

from models.errors import RowsRefused, rows_text
from service.engine import parquet_limits, readings
from service.engine.errors import InvalidInput, NotFound, TooLarge
from service.engine.load_table import (
    FLAG_EXPECTED,
    HEADER_READ_BYTES,
    InputError,
    as_flag,
    as_float,
    as_load,
    csv_header_names,
    locate_csv_error,
)
from service.engine.readings import GlitchedReading, ReadingsRefused, ScatteredReadings, SteppedRows, UnsolvedRows
from service.http.auth import TenantDep, require_api_key
from service.http.deps import RuntimeDep
from service.http.problems import ProblemError, field_error
from service.http.responses import json_response
from service.http.routers import batch_jobs, context_sets, networks
from service.http.schemas import ContextSetCreate
from service.jobs.inputs import PARQUET_MAGIC

STATIC_DIR = Path(__file__).resolve().parents[2] / "ui"
# The page's files, by the name the page asks for; nothing else under /ui/static is served.
STATIC_FILES = {
    "app.js": "text/javascript",
    "charts.js": "text/javascript",
    "app.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
# The page changes with the package; a browser re-checks it (ETag) instead of keeping a stale copy.
NO_STALE = {"Cache-Control": "no-cache"}

router = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/ui/api", include_in_schema=False, dependencies=[Depends(require_api_key)])


@router.get("/ui")
@router.get("/ui/")
async def page() -> Response:
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8", headers=NO_STALE)


@router.get("/ui/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC_FILES:
        raise NotFound("file", name, "name")
    return FileResponse(STATIC_DIR / name, media_type=STATIC_FILES[name], headers=NO_STALE)


_UNREADABLE = "a CSV file with a header row, or a Parquet file"
_CELL = "a number (a load in MW or Mvar, a voltage in p.u.); empty or NaN where not measured"
CONVERGED = "converged"  # the optional column of `gridpfn simulate -o`: rows false in it are left out (as_flag)
BATCH_ROWS = 4096
CSV_BLOCK_BYTES = pcsv.ReadOptions().block_size  # the reader's: a longer row is refused, named by its longest cell


def _open(data: bytes, filename: str | None, columns: list[str], max_rows: int) -> tuple[list[str], Any]:
    """(the file's column names, batches of those of `columns` it has). A Parquet file is sized from its
    footer and page headers first (service.engine.parquet_limits); neither is decoded whole."""
    if data[:4] == PARQUET_MAGIC:
        source = parquet_limits.open_file(data, columns, max_rows, "GRIDPFN_MAX_CONTEXT_ROWS", flags=(CONVERGED,))
        names = source.schema_arrow.names
        return names, parquet_limits.batches(source, [c for c in columns if c in names], BATCH_ROWS)
    if filename and filename.lower().endswith((".parquet", ".pq")):
        raise InputError("the file is named .parquet but is not a Parquet file", "a Parquet or CSV file")
    csv_header_names(data[:HEADER_READ_BYTES])  # a header line of bounded length and columns, first
    names = pcsv.open_csv(pa.BufferReader(data)).schema.names  # the header (and the first block's types)
    return names, _csv_rows(data, [c for c in columns if c in names])


def _csv_rows(data: bytes, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The batches of `columns`, the reader opened at the first (its first block converted then: an error there
    comes once the caller holds the names, to locate it)."""
    yield from pcsv.open_csv(pa.BufferReader(data), convert_options=_types(columns))


def _types(columns: list[str]) -> pcsv.ConvertOptions:
    """Every column its type, never one guessed from the first block the reader takes (a column of whole numbers
    there, or of empty cells, was int64 or null, and a later 0.5 or reading a 422 naming no row): numbers are
    float64 (an empty cell or NaN: null, a value not measured), `converged` is bool (true or false, 1 or 0)."""
    return pcsv.ConvertOptions(
        include_columns=columns,
        column_types={c: pa.bool_() if c == CONVERGED else pa.float64() for c in columns},
    )


def _located(data: bytes, names: list[str], columns: list[str], exc: pa.ArrowException) -> InputError:
    """What the CSV reader refused (a cell it could not convert, a row too long for it) by its row and column."""
    numbers = [c for c in columns if c in names and c != CONVERGED]
    flags = [CONVERGED] if CONVERGED in names else []
    as_text = pcsv.ConvertOptions(
        include_columns=[*numbers, *flags],
        column_types=dict.fromkeys([*numbers, *flags], pa.string()),
        strings_can_be_null=True,
    )
    located = locate_csv_error(
        lambda: pcsv.open_csv(pa.BufferReader(data), convert_options=as_text),
        numbers,
        data,
        CSV_BLOCK_BYTES,
        _expected,
        flags,
    )
    return located or InputError(f"unreadable file: {str(exc)[:200]}", _UNREADABLE)


def _expected(column: str | None) -> str:
    return FLAG_EXPECTED if column == CONVERGED else _CELL


def _read_table(data: bytes, filename: str | None, columns: list[str], max_rows: int) -> tuple[list[str], pa.Table]:
    """The file's column names and its table of `columns`, refused past `max_rows` rows as they stream."""
    names: list[str] = []
    kept, rows = [], 0
    try:
        names, batches = _open(data, filename, columns, max_rows)
        for batch in batches:
            rows += batch.num_rows
            if rows > max_rows:  # counted as decoded: a footer may understate its rows
                raise TooLarge(
                    "file", f"more than {max_rows} rows", f"at most {max_rows} rows (GRIDPFN_MAX_CONTEXT_ROWS)"
                )
            kept.append(batch)
    except pa.ArrowException as exc:
        if data[:4] == PARQUET_MAGIC:
            raise InputError(f"unreadable file: {str(exc)[:200]}", _UNREADABLE) from exc
        raise _located(data, names, columns, exc) from exc
    return names, pa.Table.from_batches(kept) if kept else pa.table({})


def context_arrays(
    data: bytes, filename: str | None, features: list[str], outputs: list[str], max_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, rows) of an uploaded context file of at most `max_rows` rows; rows whose `converged` column
    is false are left out (a cell of it neither true nor false, empty included, is refused naming its row),
    and `rows` are the file's data rows (1-based) that x and y hold. Loads are
    held to +-LOAD_LIMIT as batch files are: a bad cell is named by its row in the file and its column.
    An empty or NaN cell is NaN: a load or voltage not measured (service.engine.sparse)."""
    names, table = _read_table(data, filename, [*features, *outputs, CONVERGED], max_rows)
    missing = [c for c in (*features, *outputs) if c not in names]
    if missing:
        raise InputError(
            f"missing column(s) {missing[:5]}{' ...' if len(missing) > 5 else ''}",
            f"the {len(features)} load columns and the {len(outputs)} voltage columns "
            f"({features[0]} ... {outputs[-1]})",
            column=missing[0],
        )
    rows = np.arange(1, table.num_rows + 1)
    if table.num_rows and CONVERGED in table.column_names:
        kept = as_flag(table[CONVERGED], CONVERGED, 0)
        table, rows = table.filter(pa.array(kept)), rows[kept]
    if table.num_rows == 0:
        raise InputError("no data rows", "at least one load -> voltage row")
    try:
        x = np.column_stack([as_load(table[c], c, 0, missing=True) for c in features])
        y = np.column_stack([as_float(table[c], c, 0, missing=True) for c in outputs])
    except InputError as exc:  # its row counts the rows kept: name the file's
        if exc.row is not None:
            raise InputError(exc.message, exc.expected, int(rows[exc.row - 1]), exc.column) from exc
        raise
    unread = np.flatnonzero(np.isnan(y).all(axis=1))
    if unread.size:  # as service.engine.sparse.check_rows refuses it, named by the file's row
        raise InputError(
            f"no voltage read in this row (every voltage cell empty or NaN; {unread.size} such row(s))",
            "at least one voltage per row (an empty cell marks a bus not read in that row)",
            int(rows[unread[0]]),
        )
    return x, y, rows


def _nulled(values: np.ndarray) -> list[list[float | None]]:
    """Rows as ContextSetCreate takes them: NaN (an empty cell, a value not measured) as None (null)."""
    rows: list[list[float | None]] = values.tolist()
    if np.isnan(values).any():
        rows = [[None if v != v else v for v in row] for row in rows]
    return rows


def _cell_problem(exc: ValidationError, rows: np.ndarray, features: list[str], outputs: list[str]) -> ProblemError:
    """A value ContextSetCreate refused (a voltage out of range), named by its row in the file and column."""
    error = exc.errors()[0]
    loc = error.get("loc", ())
    row = column = None
    if len(loc) >= 3 and loc[0] in ("x", "y") and isinstance(loc[1], int) and isinstance(loc[2], int):
        names = features if loc[0] == "x" else outputs
        if 0 <= loc[1] < len(rows) and 0 <= loc[2] < len(names):
            row, column = int(rows[loc[1]]), names[loc[2]]
    ctx = error.get("ctx") or {}
    bounds = [
        f"{word} {ctx[key]}" for key, word in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if key in ctx
    ]
    expected = ("a number " + " and ".join(bounds)) if bounds else "loads and voltages the API accepts"
    return batch_jobs._file_problem(InputError(error["msg"], expected, row, column))


@api.post("/context-sets", status_code=201)
async def upload_context(rt: RuntimeDep, tenant: TenantDep, request: Request) -> Response:
    """Stores an uploaded CSV/Parquet context; answers like POST /v1/context-sets (201, Location)."""
    async with request.form(max_files=1, max_fields=4) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidInput("file", "no file part in the form", "a multipart `file` field with CSV or Parquet")
        data, filename = await upload.read(), upload.filename
    network = str(form.get("network") or "ieee33")
    net = await rt.networks.resolve(network, "network", tenant=tenant)
    features, outputs = list(net.feature_names), list(net.output_names)
    try:
        x, y, rows = await asyncio.to_thread(
            context_arrays, data, filename, features, outputs, rt.settings.max_context_rows
        )
    except InputError as exc:
        raise batch_jobs._file_problem(exc) from exc
    try:
        body = ContextSetCreate(x=_nulled(x), y=_nulled(y), network=net.name)
    except ValidationError as exc:  # e.g. a voltage the API refuses: named by its row and column
        raise _cell_problem(exc, rows, features, outputs) from exc
    try:
        return await context_sets.create(rt=rt, tenant=tenant, body=body)
    except (ReadingsRefused, UnsolvedRows, ScatteredReadings, GlitchedReading, SteppedRows) as exc:  # by file row
        raise _model_problem(exc, rows, outputs) from exc


def _model_problem(
    exc: ReadingsRefused | UnsolvedRows | ScatteredReadings | GlitchedReading | SteppedRows,
    rows: np.ndarray,
    outputs: list[str],
) -> ProblemError:
    """A context's readings far from its network model's power flow, its rows without one, its readings
    scattering like no meter's, one glitched, or rows whose voltages all stepped (service.engine.readings), named as
    the file numbers its rows (`rows`: the file row of each kept row) and names its columns."""
    if isinstance(exc, ScatteredReadings):  # a column's readings, no row of them
        column = outputs[exc.bus]
        return batch_jobs._file_problem(InputError(exc.describe(f"column {column!r}"), exc.expected, None, column))
    if isinstance(exc, GlitchedReading):  # one cell
        message = f"lies {exc.distance:.4f} p.u. off the smooth function of the loads its column's other rows follow"
        return batch_jobs._file_problem(InputError(message, exc.expected, int(rows[exc.row]), outputs[exc.bus]))
    if isinstance(exc, UnsolvedRows | SteppedRows):
        refused = RowsRefused("file", [int(rows[r]) for r in exc.rows], exc.reason, exc.expected)
        return ProblemError(
            422,
            "invalid-file",
            "Invalid input file",
            str(refused),
            [field_error("file", refused.message, exc.expected)],
        )
    entries = [
        {**field_error("file", c.message, c.expected), "row": int(rows[c.row]), "column": outputs[c.bus]}
        for c in exc.far
    ]
    first = entries[0]
    detail = (
        f"file: {readings.summary(exc.readings, exc.rows)} (rows {rows_text([e['row'] for e in entries], total=exc.rows)}); "
        f"row {first['row']}, column {first['column']!r}: {first['message']}"
    )
    return ProblemError(422, "invalid-file", "Invalid input file", detail, entries)


def _extrapolated_rows(source: pq.ParquetFile) -> tuple[int | None, float | None]:
    """(rows flagged `extrapolated`, the largest `extrapolation`) of a result; (None, None) for a result
    written before results carried them."""
    if "extrapolated" not in source.schema_arrow.names:
        return None, None
    flagged, largest = 0, 0.0
    for batch in source.iter_batches(columns=["extrapolated", "extrapolation"], batch_size=65536):
        flagged += int(pc.sum(batch.column(0)).as_py() or 0)
        largest = max(largest, float(pc.max(batch.column(1)).as_py() or 0.0))
    return flagged, largest


def worst_bus_histogram(path: Path, bins: int) -> dict[str, Any]:
    """Histogram over rows of max over buses of p_outside_*, streamed a row group at a time."""
    source = pq.ParquetFile(path)
    flagged, largest = _extrapolated_rows(source)
    columns = [c for c in source.schema_arrow.names if c.startswith("p_outside_")]
    edges = np.linspace(0.0, 1.0, bins + 1)
    counts = np.zeros(bins, dtype=np.int64)
    rows, total, at_worst = 0, 0.0, 0.0
    if columns:
        for batch in source.iter_batches(columns=columns, batch_size=65536):
            worst = np.max(
                np.column_stack([batch.column(i).to_numpy(zero_copy_only=False) for i in range(batch.num_columns)]),
                axis=1,
            ).astype(np.float64)
            counts += np.histogram(np.clip(worst, 0.0, 1.0), bins=edges)[0]
            rows += len(worst)
            total += float(worst.sum())
            at_worst = max(at_worst, float(worst.max(initial=0.0)))
    return {
        "rows": rows,
        "columns": len(columns),
        "edges": edges.tolist(),
        "counts": counts.tolist(),
        "mean": total / rows if rows else None,
        "max": at_worst if rows else None,
        "extrapolated": flagged,
        "max_extrapolation": largest,
    }


@api.get("/batch-jobs/{job_id}/risk-histogram")
async def risk_histogram(
    jobs: batch_jobs.JobsDep, tenant: TenantDep, job_id: str = batch_jobs.JobId, bins: int = Query(20, ge=1, le=200)
) -> Response:
    batch_jobs.refuse_if_per_bus(await batch_jobs.done_status(jobs, job_id, tenant, "the histogram"), "job_id", "path")
    answer = await asyncio.to_thread(worst_bus_histogram, jobs.files(job_id).result, bins)
    if not answer["columns"]:
        raise InvalidInput(
            "job_id",
            "the job was run without a voltage band, so its result has no p_outside_* columns",
            "a job submitted with voltage_band",
            "path",
        )
    return json_response(answer)


@api.get("/networks/{network_id}/loads")
async def network_loads(rt: RuntimeDep, tenant: TenantDep, network_id: str = networks.IdPath) -> Response:
    """Per load bus, in feature order: its name, base consumption and base generation (MW, Mvar produced);
    the network's base load row (its features) is consumption minus generation."""
    net = await rt.networks.resolve(network_id, "network_id", "path", tenant=tenant)
    n = len(net.load_buses)
    consumption, generation = np.asarray(net.base_consumption), np.asarray(net.base_generation)
    return json_response(
        {
            "network": network_id,
            "load_buses": [int(b) for b in net.load_buses],
            "bus_names": [net.bus_name(b) for b in net.load_buses],
            "consumption_p_mw": consumption[:n].tolist(),
            "consumption_q_mvar": consumption[n:].tolist(),
            "generation_p_mw": generation[:n].tolist(),
            "generation_q_mvar": generation[n:].tolist(),
        }
    )


router.include_router(api)

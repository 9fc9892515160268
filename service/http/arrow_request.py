"""Predict and GP requests whose queries come as Apache Arrow
(`Content-Type: application/vnd.apache.arrow.stream`).

Why: a planning tool holding thousands of load vectors in a DataFrame sends them without writing
JSON text, and the server skips parsing it: a 4500 x 64 JSON body is 5.8 MB, and parsing and
validating it is the biggest part of that request besides the model. The body is one Arrow IPC
stream with a column per load feature of the context's network, named as in its description
(`GET /v1/networks/{id}`: `p_mw_bus2` ... `q_mvar_bus33` on IEEE 33; any numeric type, any order)
and a row per query. Cells are checked here; the columns against the network's features in the
engine (service.engine.checks), which knows the network once it has the context. The rest of the request (model, context_id or
context, quantiles, voltage_band, compare_gp: the JSON body's fields without `queries`) is JSON in
the schema metadata under `gridpfn`, as in Arrow answers (service.http.responses). Cells are checked
as batch-job uploads are (service.engine.load_table: the row and column of the first bad one) and against
the JSON body's load range; the other fields by the same request schema as JSON bodies. The stream is
sized from its message headers before any batch is decompressed (service.engine.arrow_limits): rows
past the limit are a 413 naming `queries` however well they compress.
"""

from __future__ import annotations

from typing import TypeVar

import pyarrow as pa
from pydantic import ValidationError
from pydantic_core import from_json as pydantic_json  # pydantic's plain JSON parser: no object hooks

from models.errors import RowsRefused
from service.engine import arrow_limits
from service.engine.errors import InputRejected, InvalidInput
from service.engine.load_table import InputError, NamedColumns, as_load
from service.http.problems import ProblemError, field_error, validation_problem
from service.http.responses import ARROW_STREAM, METADATA_KEY
from service.http.schemas import QueryOptions

Request = TypeVar("Request", bound=QueryOptions)


def is_arrow(content_type: str | None) -> bool:
    return bool(content_type) and content_type.split(";", 1)[0].strip().lower() == ARROW_STREAM


def _cell_problem(exc: InputError) -> ProblemError:
    entry = field_error("queries", exc.message, exc.expected)
    entry.update(row=exc.row, column=exc.column)
    return ProblemError(422, "validation-error", "Invalid request", f"queries: {exc}", [entry])


def _queries(table: pa.Table) -> NamedColumns:
    """Every column as float64 by name; 422 naming the first bad cell."""
    try:
        columns = {}
        for index, name in enumerate(table.schema.names):
            columns[name] = as_load(table.column(index), name, 0)
    except InputError as exc:
        raise _cell_problem(exc) from None
    return NamedColumns(columns, table.schema.names)


def in_table_rows(exc: InputRejected) -> RowsRefused | None:
    """A model's refusal of query rows (RowsRefused) numbered as the table's rows, from 1, as its cells'
    errors are (a JSON body's count from 0, as its array does); None for any other refusal."""
    refused = exc.__cause__
    if not isinstance(refused, RowsRefused) or refused.field not in ("query_x", "queries"):
        return None
    return RowsRefused(refused.field, [r + 1 for r in refused.rows], refused.reason, refused.expected)


def parse(schema: type[Request], body: bytes, max_rows: int) -> Request:
    """The request `schema` describes, from an Arrow body; a 422 / 413 refusal when it is not one."""
    table = arrow_limits.read_stream(body, max_rows, "queries")  # 413 past max_rows before decompressing
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    expected = "the request's fields other than queries, as a JSON object in the schema metadata 'gridpfn'"
    if raw is None:
        raise InvalidInput("gridpfn", "the schema metadata has no 'gridpfn' entry", expected)
    try:  # pydantic's own parser, as a JSON body's: a NaN or Infinity token is then refused naming its field
        fields = pydantic_json(raw, allow_inf_nan=True)
    except ValueError:
        raise InvalidInput("gridpfn", "is not JSON", expected) from None
    if not isinstance(fields, dict):
        raise InvalidInput("gridpfn", f"is a JSON {type(fields).__name__}, not an object", expected)
    if "queries" in fields:
        raise InvalidInput("gridpfn.queries", "queries go in the table's columns, not in the metadata", expected)
    if table.num_rows == 0:
        raise InvalidInput("queries", "the table has no rows", "at least one row: a load vector per row")
    queries = _queries(table)
    try:  # the other fields through the JSON body's schema; one placeholder row stands in for the table
        request = schema.model_validate({**fields, "queries": [[0.0]]})
    except ValidationError as exc:
        raise validation_problem(exc.errors(include_url=False), "body") from None
    return request.model_copy(update={"queries": queries})

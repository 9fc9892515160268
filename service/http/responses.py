"""Answers as HTTP responses: JSON written by orjson straight from numpy, or Apache Arrow when the
client asks for it (`Accept: application/vnd.apache.arrow.stream`).

JSON: a 4500 x 32 answer through FastAPI's encoder would take seconds; orjson writes the engine's
numpy arrays directly.

Arrow, why: a planning tool asking for thousands of queries gets the exact values it can hand to
pandas or polars without parsing text, and the server skips the JSON writer (tens of ms for a
4500 x 32 answer: bench/results/service-notes.md). One IPC stream, one record batch, a row per query; a column
per statistic and bus (voltages float64, spreads and probabilities float32, as in the JSON
answer), named as in batch-job results (`mean_vm_pu_bus2`, `std_...`,
`q0.05_...`, `p_outside_...`, and `gp_mean_...`, `gp_std_...` with compare_gp); everything else
of the JSON answer (model, context_id, outputs, timing) is JSON in the schema metadata under
`gridpfn`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pyarrow as pa
from starlette.responses import Response

ARROW_STREAM = "application/vnd.apache.arrow.stream"
METADATA_KEY = b"gridpfn"


def wants_arrow(accept: str | None) -> bool:
    """True when the Accept header names the Arrow stream type (JSON stays the default)."""
    return bool(accept) and ARROW_STREAM in accept.lower()


def _columns(prefix: str, matrix: np.ndarray, outputs: list[str]) -> tuple[list[str], list[pa.Array]]:
    # the engine gave each array its wire dtype (service.engine.answers.on_the_wire): kept as it is
    by_output = np.ascontiguousarray(np.asarray(matrix).T)  # one copy; each column zero-copy
    return [f"{prefix}_{name}" for name in outputs], [pa.array(column) for column in by_output]


def arrow_response(body: dict[str, Any]) -> Response:
    """`body` is the JSON answer's dict (arrays (queries, outputs)); see the module docstring."""
    outputs = list(body["outputs"])
    parts = [("mean", body["mean"]), ("std", body["std"])]
    parts += [(f"q{level}", values) for level, values in body["quantiles"].items()]
    if body.get("p_outside_band") is not None:
        parts.append(("p_outside", body["p_outside_band"]))
    if body.get("gp") is not None:
        parts += [("gp_mean", body["gp"]["mean"]), ("gp_std", body["gp"]["std"])]
    names: list[str] = []
    arrays: list[pa.Array] = []
    for prefix, matrix in parts:
        more_names, more_arrays = _columns(prefix, matrix, outputs)
        names += more_names
        arrays += more_arrays
    rest = {
        key: value for key, value in body.items() if key not in ("mean", "std", "quantiles", "p_outside_band", "gp")
    }
    rest["quantiles"] = list(body["quantiles"])
    schema = pa.schema(
        [pa.field(name, array.type) for name, array in zip(names, arrays)], metadata={METADATA_KEY: orjson.dumps(rest)}
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.record_batch(arrays, schema=schema))
    return Response(sink.getvalue().to_pybytes(), media_type=ARROW_STREAM)


def json_response(body: dict[str, Any], status: int = 200) -> Response:
    return Response(
        orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status, media_type="application/json"
    )


def answer_response(body: dict[str, Any], accept: str | None) -> Response:
    """A query answer (the engine's dict) as JSON, or as Arrow when the client's Accept asks for it."""
    return arrow_response(body) if wants_arrow(accept) else json_response(body)

"""Answers as HTTP responses: JSON written by orjson straight from numpy, or Apache Arrow when the
client asks for it (`Accept: application/vnd.apache.arrow.stream`).

JSON: a 4500 x 32 answer through FastAPI's encoder would take seconds; orjson writes the engine's
numpy arrays directly.

Arrow, why: a planning tool asking for thousands of queries gets the exact values it can hand to
pandas or polars without parsing text, and the server skips the JSON writer (tens of ms for a
4500 x 32 answer: bench/results/service-notes.md). One IPC stream, one record batch, a row per query; a column
per statistic and bus (voltages float64, spreads and probabilities float32, as in the JSON
answer), named as in batch-job results (`mean_vm_pu_bus2`, `std_...`,
`q0.05_...`, `p_outside_...`, and `gp_mean_...`, `gp_std_...` with compare_gp), then the query's
`extrapolation` (float64) and `extrapolated` (bool); everything else of the JSON answer (model,
context_id, outputs, timing, the per-bus `metered` and `readings`) is JSON in the schema metadata
under `gridpfn`.

Both are written from the engine's typed answer (service.engine.answers.QueryAnswer / PredictAnswer),
whose arrays already have their wire dtypes.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
from starlette.responses import Response

from service.engine.answers import PredictAnswer, QueryAnswer, Timing

ARROW_STREAM = "application/vnd.apache.arrow.stream"
METADATA_KEY = b"gridpfn"


def wants_arrow(accept: str | None) -> bool:
    """True when the Accept header names the Arrow stream type (JSON stays the default)."""
    return bool(accept) and ARROW_STREAM in accept.lower()


def timing_json(timing: Timing) -> dict[str, Any]:
    """The answer's `timing` object, in ms (schemas.Timing): the model's fields, the GP's, then the total."""
    out: dict[str, Any] = {}
    model, gp = timing.model, timing.gp
    if model is not None:
        out["pfn_ms"] = (model.predict_s + (0.0 if model.context_cached else model.encode_s)) * 1e3
        out["pfn_encode_ms"] = model.encode_s * 1e3
        out["pfn_predict_ms"] = model.predict_s * 1e3
        out["context_cached"] = model.context_cached
        out["batch_rows"] = model.batch_rows
    if gp is not None:
        out["gp_fit_ms"] = gp.fit_s * 1e3
        out["gp_predict_ms"] = gp.predict_s * 1e3
        out["gp_fit_cached"] = gp.fit_cached
    if timing.speedup is not None:
        out["speedup"] = timing.speedup
    out["total_ms"] = timing.total_s * 1e3
    return out


def _about(answer: QueryAnswer, outputs: Any = None) -> dict[str, Any]:
    """Who answered, for what: the JSON answer's first fields (a model's answer names its version); `outputs`:
    the outputs' names as the caller writes them (default: a list)."""
    about: dict[str, Any] = {"model": answer.model}
    if isinstance(answer, PredictAnswer):
        about["version"] = answer.version
    about["network"] = answer.network
    about["context_id"] = answer.context_id
    about["outputs"] = list(answer.outputs) if outputs is None else outputs
    return about


def _metering(answer: PredictAnswer) -> dict[str, Any]:
    """Per output bus: `metered` (the context read it) and `readings` (how many of its rows did)."""
    return {} if answer.metering is None else answer.metering.json()


# Parts of the JSON answer that are the same in every answer on a context set (its outputs' names, its
# metering) go in already written (orjson.Fragment: the same bytes, written once); plain values where this
# orjson has no Fragment.
_FRAGMENT: Any = getattr(orjson, "Fragment", None)
_NAMES_KEPT = 64
_names_written: dict[tuple[str, ...], Any] = {}  # outputs -> their JSON array (the event loop's only)


def _names(outputs: tuple[str, ...]) -> Any:
    if _FRAGMENT is None:
        return list(outputs)
    written = _names_written.get(outputs)
    if written is None:
        if len(_names_written) >= _NAMES_KEPT:
            _names_written.clear()
        written = _names_written[outputs] = _FRAGMENT(orjson.dumps(outputs))
    return written


def _metering_written(answer: PredictAnswer) -> dict[str, Any]:
    """`_metering`, its values written once per context set (sparse.Metering.json_bytes)."""
    if answer.metering is None:
        return {}
    if _FRAGMENT is None:
        return answer.metering.json()
    return {name: _FRAGMENT(written) for name, written in answer.metering.json_bytes.items()}


def json_body(answer: QueryAnswer) -> dict[str, Any]:
    """The JSON answer (schemas.PredictResponse), its arrays still numpy for orjson: `_about`'s fields, the
    statistics, the off-context measure, then (a model's answer) `gp` and the metering, then `timing`."""
    stats, placed = answer.statistics, answer.off_context
    body = _about(answer, _names(answer.outputs))
    body["mean"] = stats.mean
    body["std"] = stats.std
    body["quantiles"] = dict(stats.quantiles)
    body["p_outside_band"] = stats.p_outside_band
    body["extrapolation"] = placed.extrapolation
    body["extrapolated"] = placed.extrapolated
    if isinstance(answer, PredictAnswer):
        body["gp"] = None if answer.gp is None else {"mean": answer.gp.mean, "std": answer.gp.std}
        body.update(_metering_written(answer))
    body["timing"] = timing_json(answer.timing)
    return body


def arrow_response(answer: QueryAnswer) -> Response:
    """The answer as one Arrow record batch; see the module docstring."""
    named = answer.statistics.columns(answer.outputs)
    if isinstance(answer, PredictAnswer) and answer.gp is not None:
        named += answer.gp.columns(answer.outputs, prefix="gp_")
    named += answer.off_context.columns()
    arrays = [pa.array(values) for _, values in named]
    rest = {**_about(answer), "timing": timing_json(answer.timing)}
    if isinstance(answer, PredictAnswer):
        rest.update(_metering(answer))
    rest["quantiles"] = [label for label, _ in answer.statistics.quantiles]
    schema = pa.schema(
        [pa.field(name, array.type) for (name, _), array in zip(named, arrays)],
        metadata={METADATA_KEY: orjson.dumps(rest)},
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(pa.record_batch(arrays, schema=schema))
    return Response(sink.getvalue().to_pybytes(), media_type=ARROW_STREAM)


def json_response(body: dict[str, Any], status: int = 200) -> Response:
    return Response(
        orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status, media_type="application/json"
    )


def answer_response(answer: QueryAnswer, accept: str | None) -> Response:
    """A query answer (the engine's typed answer) as JSON, or as Arrow when the client's Accept asks for it."""
    return arrow_response(answer) if wants_arrow(accept) else json_response(json_body(answer))

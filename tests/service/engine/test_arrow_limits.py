"""service.engine.arrow_limits: a stream is sized from its message headers, and decoded only when it fits."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest

from service.engine.arrow_limits import MAX_BATCHES, MAX_COLUMNS, read_stream
from service.engine.errors import InvalidInput, TooLarge


def stream(table: pa.Table, compression: str | None = None, chunk: int | None = None) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return sink.getvalue()


def numeric_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table(
        {
            "f64": rng.random(rows),
            "f32": rng.random(rows).astype(np.float32),
            "i32": pa.array(rng.integers(-5, 5, rows).astype(np.int32), mask=np.arange(rows) % 7 == 0),
            "dec": pa.array(list(range(rows))).cast(pa.decimal128(30, 2)),
        }
    ).replace_schema_metadata({"k": "v"})


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
@pytest.mark.parametrize("chunk", [None, 7])
def test_numeric_streams_read_back_exactly(compression, chunk):
    table = numeric_table(50)
    out = read_stream(stream(table, compression, chunk), max_rows=50)
    assert out.equals(table) and out.schema.metadata == table.schema.metadata


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_one_row_over_the_limit_is_refused_naming_field_and_limit(compression):
    body = stream(numeric_table(50), compression, chunk=20)
    with pytest.raises(TooLarge) as refused:
        read_stream(body, max_rows=49, field="queries")
    assert refused.value.entries[0]["field"] == "queries" and refused.value.entries[0]["expected"] == "at most 49 rows"


def test_a_header_understating_its_rows_is_refused_before_decompression():
    rows = 100_000
    body = stream(pa.table({"a": np.zeros(rows)}), "zstd")
    declared = rows.to_bytes(8, "little")
    assert body.count(declared) == 2  # RecordBatch.length and the column's FieldNode
    with pytest.raises(InvalidInput, match="more than 10 rows need"):
        read_stream(body.replace(declared, (10).to_bytes(8, "little")), max_rows=1000)


def test_what_a_load_table_cannot_be():
    with pytest.raises(InvalidInput, match="'s': type string is not numeric"):
        read_stream(stream(pa.table({"a": [1.0], "s": ["x"]})), max_rows=10)
    with pytest.raises(InvalidInput, match="not a usable Arrow IPC stream"):
        read_stream(b"not arrow", max_rows=10)
    dictionary = pa.table({"d": pa.array([1.0, 2.0]).dictionary_encode()})
    with pytest.raises(InvalidInput):
        read_stream(stream(dictionary), max_rows=10)
    with pytest.raises(TooLarge, match=f"{MAX_COLUMNS + 1} columns"):
        read_stream(stream(pa.table({f"c{i}": [0.0] for i in range(MAX_COLUMNS + 1)})), max_rows=10)
    empty = pa.record_batch({"a": pa.array([], pa.float64())})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, empty.schema) as writer:
        for _ in range(MAX_BATCHES + 1):
            writer.write_batch(empty)
    with pytest.raises(TooLarge, match=f"more than {MAX_BATCHES} record batches"):
        read_stream(sink.getvalue(), max_rows=10)

"""service.engine.parquet_limits: a file is sized from its footer and page headers before a page is decoded."""
from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.engine.errors import TooLarge
from service.engine.load_table import InputError
from service.engine.parquet_limits import open_file

ROWS = 3000
COLUMNS = ["f64", "f32", "i64", "i32", "dec", "flag", "text"]


def table() -> pa.Table:
    rng = np.random.default_rng(1)
    return pa.table({"f64": rng.random(ROWS), "f32": rng.random(ROWS).astype(np.float32),
                     "i64": np.arange(ROWS), "i32": pa.array(np.arange(ROWS, dtype=np.int32), mask=np.arange(ROWS) % 5 == 0),
                     "dec": pa.array(list(range(ROWS))).cast(pa.decimal128(30, 2)), "flag": np.arange(ROWS) % 2 == 0,
                     "text": [f"{x:.6f}" for x in rng.random(ROWS)], "unread": ["x" * 100] * ROWS})


def parquet(data: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    pq.write_table(data, sink, **options)
    return sink.getvalue()


WRITERS = {
    "defaults (snappy, dictionary)": {},
    "zstd, small row groups": dict(compression="zstd", row_group_size=100),
    "gzip, plain, small pages": dict(compression="gzip", use_dictionary=False, data_page_size=512),
    "lz4, data page v2": dict(compression="lz4", data_page_version="2.0"),
    "brotli, byte stream split": dict(compression="brotli", use_dictionary=False,
                                      column_encoding={"f64": "BYTE_STREAM_SPLIT", "i64": "DELTA_BINARY_PACKED"}),
    "uncompressed": dict(compression="none"),
}


@pytest.mark.parametrize("options", WRITERS.values(), ids=WRITERS.keys())
def test_ordinary_files_pass_and_read_back(options, tmp_path):
    data = parquet(table(), **options)
    path = tmp_path / "f.parquet"
    path.write_bytes(data)
    for source in (data, path):
        opened = open_file(source, COLUMNS, ROWS, "THE_LIMIT")
        assert opened.read(columns=COLUMNS).equals(table().select(COLUMNS))


@pytest.mark.parametrize("row_group_size", [ROWS, 64])
def test_declared_rows_over_the_limit_are_refused_from_the_footer(row_group_size):
    with pytest.raises(TooLarge) as refused:
        open_file(parquet(table(), row_group_size=row_group_size), COLUMNS, ROWS - 1, "THE_LIMIT")
    assert refused.value.entries[0]["field"] == "file"
    assert refused.value.entries[0]["expected"] == f"at most {ROWS - 1} rows (THE_LIMIT)"


def test_a_page_larger_than_its_rows_is_refused_naming_the_column():
    size = 8 << 20
    text = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(np.array([0, size], np.int32)),
                                                  pa.py_buffer(b"0" * size)])
    data = parquet(pa.table({"a": [1.0], "text": text}), compression="zstd", use_dictionary=False,
                   write_statistics=False)
    assert len(data) < size // 100  # the bomb: a few KB that decompress to 8 MB
    with pytest.raises(InputError) as refused:
        open_file(data, ["a", "text"], 10, "THE_LIMIT")
    assert refused.value.column == "text" and "decompress" in refused.value.message
    open_file(data, ["a"], 10, "THE_LIMIT")  # a column not read is not walked


def test_broken_files_are_input_errors():
    data = parquet(table())
    for broken in (b"PAR1", data[:len(data) // 2], data[:-12] + (10**9).to_bytes(4, "little") + b"PAR1",
                   data[:100] + bytes(len(data) - 100)):
        with pytest.raises(InputError, match="unreadable Parquet file"):
            open_file(broken, COLUMNS, ROWS, "THE_LIMIT")

"""service.engine.parquet_limits: a file is sized from its footer and page headers before a page is decoded."""

from __future__ import annotations

import datetime
import decimal
import io
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.engine.errors import TooLarge
from service.engine.load_table import MAX_COLUMNS, TEXT_BYTES, InputError, as_float, plain_text
from service.engine.parquet_limits import batches, open_file

ROWS = 3000
COLUMNS = ["f64", "f32", "i64", "i32", "i8", "u64", "dec", "dec9", "f16", "flag", "text"]
FLAGS = ("flag",)  # BOOLEAN where the caller allows it (a context file's `converged`)


def table() -> pa.Table:
    rng = np.random.default_rng(1)
    return pa.table(
        {
            "f64": rng.random(ROWS),
            "f32": rng.random(ROWS).astype(np.float32),
            "i64": np.arange(ROWS),
            "i32": pa.array(np.arange(ROWS, dtype=np.int32), mask=np.arange(ROWS) % 5 == 0),
            "i8": pa.array(np.arange(ROWS) % 100, pa.int8()),
            "u64": pa.array(np.arange(ROWS), pa.uint64()),
            "dec": pa.array(list(range(ROWS))).cast(pa.decimal128(30, 2)),
            "dec9": pa.array([decimal.Decimal(i).scaleb(-2) for i in range(ROWS)], pa.decimal128(9, 2)),
            "f16": rng.random(ROWS).astype(np.float16),
            "flag": np.arange(ROWS) % 2 == 0,
            "text": [f"{x:.6f}" for x in rng.random(ROWS)],
            "unread": ["x" * 100] * ROWS,
        }
    )


def parquet(data: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    pq.write_table(data, sink, **options)
    return sink.getvalue()


WRITERS = {
    "defaults (snappy, dictionary)": {},
    "zstd, small row groups": dict(compression="zstd", row_group_size=100),
    "gzip, plain, small pages": dict(compression="gzip", use_dictionary=False, data_page_size=512),
    "lz4, data page v2": dict(compression="lz4", data_page_version="2.0"),
    "brotli, byte stream split": dict(
        compression="brotli",
        use_dictionary=False,
        column_encoding={"f64": "BYTE_STREAM_SPLIT", "i64": "DELTA_BINARY_PACKED"},
    ),
    "uncompressed": dict(compression="none"),
}


@pytest.mark.parametrize("options", WRITERS.values(), ids=WRITERS.keys())
def test_ordinary_files_pass_and_read_back(options, tmp_path):
    data = parquet(table(), **options)
    path = tmp_path / "f.parquet"
    path.write_bytes(data)
    for source in (data, path):
        opened = open_file(source, COLUMNS, ROWS, "THE_LIMIT", flags=FLAGS)
        read = opened.read(columns=COLUMNS)
        assert pa.types.is_dictionary(read.schema.field("text").type)  # text stays a dictionary until checked
        text = plain_text(read.column("text"), "text", 0, TEXT_BYTES)
        plain = read.set_column(read.schema.get_field_index("text"), "text", text)
        assert plain.equals(table().select(COLUMNS))


def test_a_dictionary_of_one_long_text_value_is_refused_before_it_fills_every_row():
    """A dictionary page holds a value once and its rows index it: decoded plainly, one 4 kB value would fill
    all 20,000 rows (a 1 MiB value in 1.4 kB of zstd once took 21 GB); it is refused from the dictionary."""
    rows = 20_000
    bomb = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array(["7" * 4096]))
    data = parquet(pa.table({"p_mw_bus2": bomb}), compression="zstd", use_dictionary=True)
    assert len(data) < 40_000  # against 80 MB decoded plainly
    opened = open_file(data, ["p_mw_bus2"], rows, "THE_LIMIT")
    batch = next(opened.iter_batches(columns=["p_mw_bus2"]))
    assert pa.types.is_dictionary(batch.column(0).type) and batch.nbytes < 1 << 20
    with pytest.raises(InputError) as refused:
        as_float(batch.column(0), "p_mw_bus2", 0)
    assert (refused.value.row, refused.value.column) == (1, "p_mw_bus2")
    assert f"longer than {TEXT_BYTES} bytes" in refused.value.message


@pytest.mark.parametrize("row_group_size", [ROWS, 64])
def test_declared_rows_over_the_limit_are_refused_from_the_footer(row_group_size):
    with pytest.raises(TooLarge) as refused:
        open_file(parquet(table(), row_group_size=row_group_size), COLUMNS, ROWS - 1, "THE_LIMIT", flags=FLAGS)
    assert refused.value.entries[0]["field"] == "file"
    assert refused.value.entries[0]["expected"] == f"at most {ROWS - 1} rows (THE_LIMIT)"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def understated(data: bytes, rows: int, claimed: int) -> bytes:
    """`data` with the footer's row counts (file, row group, column chunk) changed from `rows` to `claimed`
    (both zigzag varints of the same length, so the footer keeps its length): its pages now hold more
    values than its rows."""
    length = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - length
    old, new = _varint(2 * rows), _varint(2 * claimed)
    assert len(old) == len(new) and data[start:-8].count(old) >= 3
    return data[:start] + data[start:-8].replace(old, new) + data[-8:]


def test_a_page_larger_than_its_rows_is_refused_naming_the_column():
    rows, claimed = 1_000_000, 100_000
    plain = parquet(
        pa.table({"a": np.zeros(rows), "b": np.zeros(rows)}),
        compression="zstd",
        use_dictionary=False,
        write_statistics=False,
        row_group_size=rows,
    )
    data = understated(plain, rows, claimed)
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_rows == claimed
    assert len(data) < 8 * rows // 100  # the bomb: a few KB that decompress to 8 MB a column
    with pytest.raises(InputError) as refused:
        open_file(data, ["a", "b"], claimed, "THE_LIMIT")
    assert refused.value.column == "a" and "decompress" in refused.value.message
    with pytest.raises(InputError) as refused:
        open_file(data, ["b", "unknown"], claimed, "THE_LIMIT")
    assert refused.value.column == "b"
    open_file(data, ["unknown"], claimed, "THE_LIMIT")  # a column not read is not walked


def test_a_text_value_longer_than_its_rows_allow_is_refused_naming_the_column():
    size = 8 << 20
    text = pa.Array.from_buffers(
        pa.string(), 1, [None, pa.py_buffer(np.array([0, size], np.int32)), pa.py_buffer(b"0" * size)]
    )
    data = parquet(
        pa.table({"a": [1.0], "text": text}), compression="zstd", use_dictionary=False, write_statistics=False
    )
    assert len(data) < size // 100  # the bomb: a few KB that decompress to 8 MB
    with pytest.raises(InputError) as refused:
        open_file(data, ["a", "text"], 10, "THE_LIMIT")
    assert refused.value.column == "text" and "decompress" in refused.value.message


NOT_NUMBERS = {  # one value each: what makes them bombs is that no row count bounds what they decode to
    "binary": pa.array([b"1.5"]),
    "fixed-width binary": pa.array([b"x" * 8], pa.binary(8)),
    "list<double>": pa.array([[1.0, 2.0]]),
    "large_list<double>": pa.array([[1.0]], pa.large_list(pa.float64())),
    "fixed-size list": pa.array([[1.0, 2.0]], pa.list_(pa.float64(), 2)),
    "struct<double>": pa.array([{"x": 1.0}]),
    "struct named like the column": pa.array([{"col": 1.0}]),
    "map": pa.array([[("k", 1.0)]], pa.map_(pa.string(), pa.float64())),
    "date": pa.array([datetime.date(2020, 1, 1)]),
    "timestamp": pa.array([1], pa.timestamp("ms")),
    "time": pa.array([1], pa.time32("ms")),
    "null": pa.array([None], pa.null()),
    "boolean": pa.array([True]),
    "list<string>": pa.array([["1.5"]]),
}


@pytest.mark.parametrize("kind", NOT_NUMBERS, ids=NOT_NUMBERS.keys())
def test_columns_that_are_not_flat_numbers_are_refused_from_the_footer(kind):
    data = parquet(pa.table({"ok": [1.0], "col": NOT_NUMBERS[kind]}), compression="zstd")
    length = struct.unpack("<I", data[-8:-4])[0]
    no_pages = b"PAR1" + bytes(len(data) - 12 - length) + data[-8 - length :]  # every page zeroed: only the footer
    with pytest.raises(InputError) as refused:
        open_file(no_pages, ["ok", "col"], 10, "THE_LIMIT")
    assert refused.value.column == "col" and refused.value.message.endswith("is not numeric"), refused.value
    assert "numbers" in refused.value.expected
    open_file(data, ["ok"], 10, "THE_LIMIT")  # a column not read is not judged


def test_a_flag_column_is_a_boolean_only_where_the_caller_allows_it():
    data = parquet(pa.table({"flag": [True, False]}))
    assert open_file(data, ["flag"], 10, "THE_LIMIT", flags=["flag"]).read().column("flag").to_pylist() == [True, False]
    with pytest.raises(InputError, match="is not numeric"):
        open_file(data, ["flag"], 10, "THE_LIMIT")
    with pytest.raises(InputError, match="is not numeric"):  # a list of booleans is still a list
        open_file(parquet(pa.table({"flag": [[True]]})), ["flag"], 10, "THE_LIMIT", flags=["flag"])


def test_more_leaf_columns_than_any_network_has_are_refused_from_the_footer():
    data = parquet(pa.table({"wide": pa.array([{f"x{i}": 1.0 for i in range(MAX_COLUMNS + 1)}])}))
    with pytest.raises(InputError) as refused:
        open_file(data, ["other"], 10, "THE_LIMIT")
    assert f"at most {MAX_COLUMNS} columns" in refused.value.expected


def test_broken_files_are_input_errors():
    data = parquet(table())
    for broken in (
        b"PAR1",
        data[: len(data) // 2],
        data[:-12] + (10**9).to_bytes(4, "little") + b"PAR1",
        data[:100] + bytes(len(data) - 100),
    ):
        with pytest.raises(InputError, match="unreadable Parquet file"):
            open_file(broken, COLUMNS, ROWS, "THE_LIMIT")


def footer_field(data: bytes, value: int, new: int, which: int) -> bytes:
    """`data` with the `which`-th i64 field of the footer holding `value` (field-id delta 1: a file's, row group's
    num_rows, a column chunk's num_values) set to `new` (zigzag varints of the same length: same footer length)."""
    length = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - length
    footer = bytearray(data[start:-8])
    old, replacement = b"\x16" + _varint(2 * value), b"\x16" + _varint(2 * new)
    assert len(old) == len(replacement)
    at = [i for i in range(len(footer)) if footer.startswith(old, i)][which]
    footer[at : at + len(old)] = replacement
    return data[:start] + bytes(footer) + data[-8:]


def _two_groups(**options) -> bytes:
    """1000 rows of two columns in row groups of 700 and 300; the footer's i64 fields holding 700, in order: a's
    num_values, b's num_values, the first row group's num_rows; holding 1000: the file's num_rows."""
    data = pa.table({"a": np.arange(1000.0), "b": pa.array(np.arange(1000.0), mask=np.arange(1000) % 7 == 0)})
    return parquet(data, row_group_size=700, write_statistics=False, **options)


@pytest.mark.parametrize("claimed", [900, 1100])
def test_a_footer_whose_row_count_is_not_its_row_groups_sum_is_refused_naming_both(claimed):
    data = footer_field(_two_groups(), 1000, claimed, 0)
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_rows == claimed
    with pytest.raises(InputError) as refused:
        open_file(data, ["a", "b"], 2000, "THE_LIMIT")
    message = refused.value.message
    assert f"the footer states {claimed} rows" in message and "its row groups hold 1000" in message, message
    assert refused.value.row is None and "row count" in refused.value.expected
    with pytest.raises(InputError, match=f"states {claimed} rows"):  # whichever columns are read, none too
        open_file(data, [], 2000, "THE_LIMIT")


@pytest.mark.parametrize("claimed", [600, 800])
def test_a_row_group_whose_rows_are_not_its_columns_values_is_refused_naming_both(claimed):
    """A row group stating fewer rows than its pages hold was read to its count, the rest silently dropped."""
    data = footer_field(footer_field(_two_groups(), 700, claimed, 2), 1000, 300 + claimed, 0)  # sums agree
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert (meta.num_rows, meta.row_group(0).num_rows, meta.row_group(0).column(0).num_values) == (
        300 + claimed,
        claimed,
        700,
    )
    if claimed < 700:
        assert pq.ParquetFile(io.BytesIO(data)).read().num_rows == 300 + claimed  # what was silently dropped
    with pytest.raises(InputError) as refused:
        open_file(data, ["a", "b"], 2000, "THE_LIMIT")
    assert refused.value.column == "a", refused.value
    assert f"row group 0 states {claimed} rows" in refused.value.message and "700 values" in refused.value.message
    open_file(data, ["unknown"], 2000, "THE_LIMIT")  # a column not read is not counted


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_pages_holding_other_than_their_row_groups_rows_are_refused_naming_both(version):
    """Every count of the footer agreeing (file, row group, column chunk) but the pages holding more values: read
    to the footer's count, the rest silently dropped; the pages' headers say how many values they hold."""
    plain = _two_groups(data_page_version=version)
    data = plain
    for which in (2, 1, 0):  # the row group's rows, then b's and a's values, then the file's rows
        data = footer_field(data, 700, 650, which)
    data = footer_field(data, 1000, 950, 0)
    assert pq.ParquetFile(io.BytesIO(data)).read().num_rows == 950  # 50 rows silently dropped
    with pytest.raises(InputError) as refused:
        open_file(data, ["b", "a"], 2000, "THE_LIMIT")
    assert refused.value.column == "b", refused.value
    assert "its pages hold 700 values" in refused.value.message and "650 rows" in refused.value.message
    assert open_file(plain, ["a", "b"], 1000, "THE_LIMIT").read().num_rows == 1000


class _Decoding:
    """A ParquetFile whose decoder yields `rows[g]` rows of row group g, whatever its footer states."""

    def __init__(self, source: pq.ParquetFile, rows: list[int]) -> None:
        self.source, self.rows = source, rows
        self.metadata, self.num_row_groups = source.metadata, source.num_row_groups

    def iter_batches(self, batch_size: int, row_groups: list[int], columns: list[str]):
        table = self.source.read_row_group(row_groups[0], columns=columns)
        decoded = pa.concat_tables([table] * 2).slice(0, self.rows[row_groups[0]])
        return iter(decoded.to_batches(max_chunksize=batch_size))


@pytest.mark.parametrize("decoded", [[700, 299], [700, 301], [0, 300]])
def test_batches_counts_each_row_groups_rows_as_decoded_against_its_footer(decoded):
    opened = open_file(_two_groups(), ["a"], 1000, "THE_LIMIT")
    assert sum(b.num_rows for b in batches(opened, ["a"], 256)) == 1000
    with pytest.raises(InputError) as refused:
        sum(b.num_rows for b in batches(_Decoding(opened, decoded), ["a"], 256))  # type: ignore[arg-type]
    group = 0 if decoded[0] != 700 else 1
    stated = (700, 300)[group]
    read = "more" if decoded[group] > stated else str(decoded[group])
    assert f"row group {group} states {stated} rows but {read} were read" in refused.value.message

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
    assert pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows == claimed
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
    assert pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows == claimed
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
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    assert (meta.num_rows, meta.row_group(0).num_rows, meta.row_group(0).column(0).num_values) == (
        300 + claimed,
        claimed,
        700,
    )
    if claimed < 700:
        assert pq.ParquetFile(pa.BufferReader(data)).read().num_rows == 300 + claimed  # what was silently dropped
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
    assert pq.ParquetFile(pa.BufferReader(data)).read().num_rows == 950  # 50 rows silently dropped
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


class Thrift:
    """Just enough of Thrift's compact protocol to rewrite a footer or page header: a struct is a list of
    [field id, type, value] (a list's value is [element type, items]; a nested struct's, its own list)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _byte(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1]

    def _varint(self) -> int:
        shift = result = 0
        while True:
            b = self._byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def _value(self, kind: int):
        if kind in (1, 2):
            return kind == 1
        if kind == 3:
            return struct.unpack("b", bytes([self._byte()]))[0]
        if kind in (4, 5, 6):
            n = self._varint()
            return (n >> 1) ^ -(n & 1)
        if kind == 7:
            self.pos += 8
            return struct.unpack("<d", self.data[self.pos - 8 : self.pos])[0]
        if kind == 8:
            n = self._varint()
            self.pos += n
            return self.data[self.pos - n : self.pos]
        if kind in (9, 10):
            head = self._byte()
            size, element = head >> 4, head & 0x0F
            size = self._varint() if size == 15 else size
            return [element, [self._byte() == 1 if element in (1, 2) else self._value(element) for _ in range(size)]]
        assert kind == 12, kind
        return self.struct()

    def struct(self) -> list:
        fields, last = [], 0
        while head := self._byte():
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self._value(5)
            fields.append([last, kind, self._value(kind)])
        return fields

    @staticmethod
    def encode(fields: list) -> bytes:
        def varint(n: int) -> bytes:
            return _varint(n)

        def value(kind: int, v) -> bytes:
            if kind in (1, 2):
                return b""
            if kind == 3:
                return struct.pack("b", v)
            if kind in (4, 5, 6):
                return varint((v << 1) ^ (v >> 63))
            if kind == 7:
                return struct.pack("<d", v)
            if kind == 8:
                return varint(len(v)) + v
            if kind in (9, 10):
                element, items = v
                head = (
                    bytes([len(items) << 4 | element])
                    if len(items) < 15
                    else bytes([0xF0 | element]) + varint(len(items))
                )
                return head + b"".join(
                    bytes([1 if x else 2]) if element in (1, 2) else value(element, x) for x in items
                )
            return Thrift.encode(v)

        out, last = bytearray(), 0
        for fid, kind, v in sorted(fields, key=lambda f: f[0]):
            kind = (1 if v else 2) if kind in (1, 2) else kind
            out += bytes([(fid - last) << 4 | kind]) if 0 < fid - last <= 15 else bytes([kind]) + value(5, fid)
            out += value(kind, v)
            last = fid
        return bytes(out + b"\0")


def field(fields: list, fid: int) -> list:
    return next(f for f in fields if f[0] == fid)


def footer(data: bytes) -> tuple[list, int]:
    """The footer of a Parquet file, decoded, and where it starts."""
    length = struct.unpack("<I", data[-8:-4])[0]
    return Thrift(data[-8 - length : -8]).struct(), len(data) - 8 - length


def with_footer(body: bytes, meta: list) -> bytes:
    encoded = Thrift.encode(meta)
    return body + encoded + struct.pack("<I", len(encoded)) + b"PAR1"


def chunk_meta(meta: list, column: int, group: int = 0) -> list:
    """ColumnMetaData of a column chunk: 6 total_uncompressed_size, 7 total_compressed_size, 9 data_page_offset,
    11 dictionary_page_offset (FileMetaData 4: row groups; RowGroup 1: columns; ColumnChunk 3: its metadata)."""
    chunks = field(field(meta, 4)[2][1][group], 1)[2][1]
    return field(chunks[column], 3)[2]


def set_field(fields: list, fid: int, kind: int, value) -> None:
    found = [f for f in fields if f[0] == fid]
    if found:
        found[0][2] = value
    else:
        fields.append([fid, kind, value])


def page_header(header: list, payload: bytes) -> bytes:
    return Thrift.encode(header) + payload


ZSTD_BOMB_BYTES = 32 << 20  # what the bomb's data page declares it decompresses to


def decoy_bomb(data: pa.Table | None = None) -> tuple[bytes, int, int]:
    """The attack: a column chunk whose footer points its dictionary_page_offset AFTER its data_page_offset. Arrow
    starts reading at data_page_offset (a dictionary offset counts only before it), where a zstd page declares
    32 MiB (its 50 values, then zeros); the check started at the dictionary offset and walked a decoy: the
    real 50-value page, then a filler page (an INDEX_PAGE declaring 0 bytes) covering the rest of the chunk.
    The first column of `data` (a table of 50 rows) is the bomb. Returns the file, where the bomb page starts and
    the size it declares."""
    rows = 50
    data = pa.table({"a": np.random.default_rng(0).random(rows), "b": np.ones(rows)}) if data is None else data
    plain = parquet(
        data,
        compression="zstd",
        use_dictionary=False,
        write_statistics=False,
    )
    meta, start = footer(plain)
    column = chunk_meta(meta, 0)
    offset, size = field(column, 9)[2], field(column, 7)[2]
    real = plain[offset : offset + size]
    reader = Thrift(real)
    header = reader.struct()
    compressed = real[reader.pos : reader.pos + field(header, 3)[2]]
    values = pa.decompress(compressed, decompressed_size=field(header, 2)[2], codec="zstd").to_pybytes()
    payload = values + bytes(ZSTD_BOMB_BYTES - len(values))
    squeezed = pa.compress(payload, codec="zstd", asbytes=True)
    set_field(header, 2, 5, len(payload))
    set_field(header, 3, 5, len(squeezed))
    bomb = page_header(header, squeezed)
    body = bytearray(plain[:start])
    bomb_at = len(body)
    body += bomb
    decoy_at, chunk_size = len(body), len(bomb) + 64
    rest = chunk_size - len(real)
    for length in range(1, 10):  # a filler whose header plus declared body is the rest of the chunk
        filler = Thrift.encode([[1, 5, 1], [2, 5, 0], [3, 5, rest - length]])
        if len(filler) == length:
            break
    body += real + filler + bytes(rest - len(filler))
    set_field(column, 9, 6, bomb_at)
    set_field(column, 11, 6, decoy_at)
    set_field(column, 7, 6, chunk_size)
    set_field(column, 6, 6, chunk_size)
    return with_footer(bytes(body), meta), bomb_at, len(payload)


def test_a_dictionary_offset_after_the_data_page_is_refused_before_any_page_is_decoded(monkeypatch):
    """A ~40 KB file whose one column chunk Arrow reads from its data_page_offset (a 32 MiB zstd page; 1 GiB
    took 100 KB) while its footer's dictionary_page_offset, after it, pointed the check at a decoy of a small
    page and a filler: refused from the footer, naming the column, before pyarrow decodes a page."""
    data, bomb_at, declared = decoy_bomb()
    assert len(data) < declared // 5000
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata.row_group(0).column(0)
    assert meta.has_dictionary_page and meta.dictionary_page_offset > meta.data_page_offset == bomb_at
    assert pq.ParquetFile(pa.BufferReader(data)).read(columns=["a"]).num_rows == 50  # pyarrow decodes the bomb page:
    zeroed = data[:bomb_at] + bytes(64) + data[bomb_at + 64 :]
    with pytest.raises(OSError):  # without it, nothing reads
        pq.ParquetFile(pa.BufferReader(zeroed)).read(columns=["a"])

    def no_reading(*args, **kwargs):
        raise AssertionError("a page was read")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", no_reading)
    monkeypatch.setattr(pq.ParquetFile, "read", no_reading)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", no_reading)
    with pytest.raises(InputError) as refused:
        open_file(data, ["a", "b"], 1000, "THE_LIMIT")
    assert refused.value.column == "a", refused.value
    assert (
        "dictionary page offset" in refused.value.message and "not before its data page offset" in refused.value.message
    )
    assert "dictionary page (before its first data page)" in refused.value.expected
    open_file(data, ["b"], 1000, "THE_LIMIT")  # a column not read is not walked


def _one_column(**options) -> bytes:
    return parquet(pa.table({"a": np.arange(1000.0)}), write_statistics=False, **options)


def test_a_page_declaring_fewer_bytes_than_it_stores_is_refused():
    """A page declaring it decompresses to 0 bytes while it covers others (the decoy's filler) hides them: a page
    stores at most what its declared size compresses to at worst."""
    plain = _one_column(compression="zstd", use_dictionary=False)
    meta, start = footer(plain)
    column = chunk_meta(meta, 0)
    offset, size = field(column, 9)[2], field(column, 7)[2]
    filler_body = 4096
    filler = Thrift.encode([[1, 5, 1], [2, 5, 0], [3, 5, filler_body]]) + bytes(filler_body)
    body = plain[:offset] + filler + plain[offset:start]
    set_field(column, 9, 6, offset)  # the chunk now starts with the filler, then its data page
    set_field(column, 7, 6, size + len(filler))
    data = with_footer(body, meta)
    assert pq.ParquetFile(pa.BufferReader(data)).read().num_rows == 1000  # Arrow skips the filler: a readable file
    with pytest.raises(InputError) as refused:
        open_file(data, ["a"], 1000, "THE_LIMIT")
    assert refused.value.column == "a"
    assert f"stores {filler_body} bytes but declares it decompresses to 0" in refused.value.message, refused.value


@pytest.mark.parametrize("change", ["data page inside a page", "chunk too short", "chunk too long"])
def test_a_walk_that_does_not_step_onto_the_data_page_and_the_chunks_end_is_refused(change):
    """Every page Arrow decodes is one the walk sized: its pages end exactly at the chunk's end, and its data page
    offset is where one of them starts."""
    plain = _one_column(compression="zstd")  # a dictionary page, then data pages
    meta, start = footer(plain)
    column = chunk_meta(meta, 0)
    assert field(column, 11)[2] < field(column, 9)[2]
    if change == "data page inside a page":
        field(column, 9)[2] += 1
        expected = "is not where one of its pages starts"
    else:
        field(column, 7)[2] += -1 if change == "chunk too short" else 1
        expected = "not at the column chunk's end" if change == "chunk too short" else "cut off"
    data = with_footer(plain[:start], meta)
    with pytest.raises(InputError) as refused:
        open_file(data, ["a"], 1000, "THE_LIMIT")
    assert expected in str(refused.value), refused.value
    assert open_file(plain, ["a"], 1000, "THE_LIMIT").read().num_rows == 1000


@pytest.mark.parametrize("options", WRITERS.values(), ids=WRITERS.keys())
def test_files_of_no_rows_and_of_null_columns_pass(options):
    """Arrow reads no page of a chunk of 0 values (pyarrow writes its offsets as 0 and 4); a column of nulls
    is a dictionary page of no entries or a page of levels alone: both are ordinary."""
    data = pa.table({"a": pa.array([None] * 100, pa.float64()), "b": np.arange(100.0)})
    for rows in (0, 100):
        opened = open_file(parquet(data.slice(0, rows), **options), ["a", "b"], 100, "THE_LIMIT")
        assert opened.read().num_rows == rows

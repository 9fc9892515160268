"""Parquet files from clients, sized from their footer and page headers before any page is decoded.

Why: a Parquet page is compressed (snappy, gzip, zstd...) and its header states the size it
decompresses to; pyarrow allocates and fills that much before anything counts rows, so 650 KB of
zstd became 1.28 GB before the page's row check. Here the footer says how many rows the file
declares (over the limit: TooLarge, nothing read), and every page header of the columns to be read
is walked (Thrift compact protocol, a few bytes each, no page decompressed): a column chunk whose
pages decompress to more than its rows of its type can hold is refused. Decoded rows are still
counted by the callers as they stream (a footer can lie), so memory stays bounded by the row limit.

The row counts must agree: the footer's with the sum of its row groups', a row group's with each read
column chunk's count of values and with what its data pages' headers say they hold. pyarrow reads a row
group to the count it states, so a group stating fewer rows than its pages hold lost the rest silently;
such a file is refused naming both counts, and `batches` counts each group's rows as they are decoded.

The walk reads the pages Arrow reads, in its order: from where parquet-cpp starts a column chunk (its
dictionary_page_offset only when that is above 0 and before its data_page_offset; one set at or after it is
refused: a footer pointing it past the data page once walked a decoy of a small page and a filler while Arrow
decompressed 1 GiB from the data page), header to header, landing exactly on the chunk's stated end and on its
data_page_offset, each page storing no more than its declared size compresses to at worst.

Only flat numeric columns are read, and that is decided from the footer's schema alone: every leaf
pyarrow would decode for a wanted name (a nested column's leaves are `name.list.element`, `name.x`)
must be that name itself, unrepeated and not inside a group, of a physical type whose width is
fixed by the type (INT32, INT64, FLOAT, DOUBLE; a decimal or half float of at most 32 bytes; BOOLEAN
where the caller allows flags). A list, struct, map or binary column, a fixed-width binary of a
width the file declares, a date or time, is refused naming it, before any page is read: no row
count bounds what such a column decodes to (one list cell held 50e6 numbers; one binary value 100 MB).
A flat text column is read (so that the caller can name the row of its first non-number) with its
pages' sizes held to TEXT_WIDTH bytes a value, and as a dictionary (pyarrow's `read_dictionary`): a
dictionary page holds each distinct value once and its rows only index it, so decoding it plainly would
copy one 1 MiB value into each of 100,000 rows (1.4 kB of zstd killed a server that way); the caller
checks the dictionary's values (`load_table.plain_text`) before any is expanded.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from service.engine.errors import TooLarge
from service.engine.load_table import MAX_COLUMNS, TEXT_BYTES, InputError, too_many_columns

MAGIC = b"PAR1"
FOOTER_MAX_BYTES = 8 << 20  # a footer describing thousands of row groups of a load table fits in far less
PAGE_HEADER_MAX_BYTES = 1 << 16  # numeric columns' headers are tens of bytes (their statistics are numbers)
CHUNK_SLACK_BYTES = 1 << 16  # per column chunk: level headers and page framing beyond rows x width
_WIDTHS = {"INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8}  # numbers, of the width their type fixes
_NUMBER_ANNOTATIONS = {"NONE", "INT", "DECIMAL"}  # logical types read as numbers (not DATE, TIME, TIMESTAMP...)
_NUMBER_CONVERSIONS = {
    "NONE",
    "DECIMAL",
    "INT_8",
    "INT_16",
    "INT_32",
    "INT_64",
    "UINT_8",
    "UINT_16",
    "UINT_32",
    "UINT_64",
}
_FIXED_NUMBERS = {"DECIMAL": 32, "FLOAT16": 2}  # fixed-width binary read as numbers: at most this many bytes
FLAG_WIDTH = 1  # BOOLEAN, where a caller allows a flag column
TEXT_WIDTH = TEXT_BYTES  # bytes a value of a flat text column may take: a number written as text
_EXPECTED = "a valid Parquet file"
_NUMBERS = "numbers (float64): a flat column of int, float or decimal values"
_CHUNK = (
    "a valid Parquet file: each column chunk's pages, from its dictionary page (before its first data page)"
    " or its first data page, laid end to end over its stated size"
)
_AGREEING = "a Parquet file whose row counts agree: the footer's, its row groups' and what their pages hold"


def _bad(reason: str) -> InputError:
    return InputError(f"unreadable Parquet file: {reason}", _EXPECTED)


class _Compact:
    """Just enough of Thrift's compact protocol to read a PageHeader's sizes and skip the rest."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        value = self.data[self.pos]  # IndexError past the window: the caller reads a larger one
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ValueError("a varint longer than 64 bits")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > 32:
            raise ValueError("Thrift structures nested too deep")
        if kind in (1, 2):  # booleans carry their value in the type
            return
        if kind == 3:
            self.pos += 1
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.pos += 8
        elif kind == 8:
            length = self.varint()  # before the += : it moves pos
            self.pos += length
        elif kind in (9, 10):
            head = self.byte()
            size, element = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            for _ in range(size):
                if element in (1, 2):
                    self.pos += 1  # a boolean element is one byte
                else:
                    self.skip(element, depth + 1)
                if self.pos > len(self.data):
                    raise IndexError
        elif kind == 11:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4, depth + 1)
                    self.skip(types & 0x0F, depth + 1)
                    if self.pos > len(self.data):
                        raise IndexError
        elif kind == 12:
            self.fields(depth + 1)
        else:
            raise ValueError(f"Thrift type {kind}")
        if self.pos > len(self.data):
            raise IndexError

    def fields(self, depth: int = 0, wanted: Sequence[int] = (), nested: Sequence[int] = ()) -> dict[int, int]:
        """Read a struct's fields up to its stop byte; the i32 values of the `wanted` field ids, and of the
        struct fields of the `nested` ids, their own field 1's i32 (-1 where it is missing)."""
        found: dict[int, int] = {}
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return found
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self.zigzag()
            if last in wanted and kind == 5:
                found[last] = self.zigzag()
            elif last in nested and kind == 12:
                found[last] = self.fields(depth + 1, wanted=(1,)).get(1, -1)
            else:
                self.skip(kind, depth)


DATA_PAGE, DATA_PAGE_V2 = 0, 3  # PageType: the pages whose values Arrow counts (it skips INDEX_PAGE and unknown types)


def _page_header(handle: BinaryIO, at: int, end: int) -> tuple[int, int, int, int]:
    """(uncompressed size, compressed size, header length, values) of the page header at `at`; the values
    (rows of a flat column, nulls included) a data page states it holds, counted as Arrow counts them (a v1 page's
    data_page_header, a v2 page's data_page_header_v2, by the page's type), 0 for any other page."""
    window = 256
    while True:
        handle.seek(at)
        data = handle.read(min(window, end - at))
        reader = _Compact(data)
        try:
            # PageHeader: 1 type, 2 uncompressed_page_size, 3 compressed_page_size; the num_values (field 1) of
            # 5 data_page_header and 8 data_page_header_v2 (a dictionary page's 7 counts dictionary entries)
            sizes = reader.fields(wanted=(1, 2, 3), nested=(5, 8))
        except IndexError:
            if len(data) < window or window >= PAGE_HEADER_MAX_BYTES:
                raise _bad(f"a page header is cut off or larger than {PAGE_HEADER_MAX_BYTES} bytes") from None
            window *= 4
            continue
        except ValueError as exc:
            raise _bad(f"a page header is not Thrift ({exc})") from None
        if 1 not in sizes or 2 not in sizes or 3 not in sizes or sizes[2] < 0 or sizes[3] < 0:
            raise _bad("a page header without its type or sizes")
        kind = sizes[1]
        values = sizes.get(5, -1) if kind == DATA_PAGE else sizes.get(8, -1) if kind == DATA_PAGE_V2 else 0
        if values < 0:
            raise _bad("a data page header without its count of values")
        return sizes[2], sizes[3], reader.pos, values


def _rows_differ(what: str, group: int, rows: int, held: str, name: str) -> InputError:
    return InputError(
        f"row group {group} states {rows} rows but {what} hold {held}: a reader would drop or invent rows",
        _AGREEING,
        column=name,
    )


def _stored_limit(uncompressed: int) -> int:
    """The most bytes a page that decompresses to `uncompressed` bytes takes stored: every codec Parquet names
    stores incompressible data in at most its size and a sixth (snappy's worst) and some framing; encryption adds
    32 bytes. A page storing more hides bytes behind its declared size (a filler declaring 0 covered a decoy)."""
    return uncompressed + uncompressed // 4 + 64


def _chunk_start(chunk: pq.ColumnChunkMetaData, name: str) -> int:
    """Where Arrow starts reading the pages of `chunk` (parquet-cpp's ComputeColumnChunkRange): at its
    dictionary_page_offset where one is set, above 0 and before its data_page_offset, else at data_page_offset.

    A dictionary_page_offset at or after data_page_offset is refused: Arrow starts at the data page and never
    reads the "dictionary" the footer points to, so a walk starting there would size pages Arrow never reads
    and skip the ones it decompresses (a decoy: a small page and a filler, while the data page declared 1 GiB).
    0 is what some writers store for no dictionary; Arrow ignores it, and so does the walk."""
    data = chunk.data_page_offset
    dictionary = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
    if dictionary is None or dictionary == 0:
        return int(data)
    if dictionary < 0 or dictionary >= data:
        raise _chunk_bad(name, f"its dictionary page offset ({dictionary}) is not before its data page offset ({data})")
    return int(dictionary)


def _chunk_bad(name: str, reason: str) -> InputError:
    return InputError(f"unreadable Parquet file: {reason}", _CHUNK, column=name)


def _check_chunk(
    handle: BinaryIO, file_size: int, chunk: pq.ColumnChunkMetaData, group: int, rows: int, width: int, name: str
) -> None:
    """The pages of one column chunk (of row group `group`) decompress to at most what `rows` values of `width`
    bytes need, and its data pages hold `rows` values (a flat column: one per row, nulls included).

    The walk visits every page Arrow will: it starts where Arrow starts (_chunk_start), steps from header to
    header as Arrow does, must land exactly on the chunk's end (total_compressed_size) and pass its
    data_page_offset on a page boundary, and no page's stored bytes may exceed what its declared size can
    compress to (a page declaring 0 bytes cannot cover others). Arrow stops once the data pages' values reach
    the chunk's count, which the walk's count equals: no page past the walk is read."""
    if chunk.num_values != rows:
        raise _rows_differ("its column chunk's footer says they", group, rows, f"{chunk.num_values} values", name)
    if rows == 0:
        return  # Arrow reads pages until their values reach the chunk's 0: none (pyarrow writes its offsets as 0 or 4)
    start, data = _chunk_start(chunk, name), chunk.data_page_offset
    end = start + chunk.total_compressed_size
    if start < 4 or chunk.total_compressed_size < 0 or end > file_size:
        raise _bad(f"column {name!r} lies outside the file")
    limit = rows * (2 * width + 8) + CHUNK_SLACK_BYTES  # dictionary + indices or plain values, and levels
    pages_limit = rows + 2  # every data page holds at least one value; one dictionary page
    total, pages, values, at, passed = 0, 0, 0, start, False
    while at < end:
        passed = passed or at == data
        uncompressed, compressed, header, held = _page_header(handle, at, end)
        if compressed > _stored_limit(uncompressed):
            raise _chunk_bad(
                name,
                f"a page at byte {at} stores {compressed} bytes but declares it decompresses to {uncompressed}",
            )
        total, pages, values, at = total + uncompressed, pages + 1, values + held, at + header + compressed
        if total > limit or pages > pages_limit:
            raise InputError(
                f"its pages decompress to more than {rows} rows can hold ({total} bytes in {pages} pages so far)",
                f"at most {limit} bytes for {rows} rows",
                column=name,
            )
    if at != end:
        raise _chunk_bad(name, f"its last page ends at byte {at}, not at the column chunk's end ({end})")
    if not passed:
        raise _chunk_bad(name, f"its data page offset ({data}) is not where one of its pages starts")
    if values != rows:  # counted to the end: a page too large for its rows is named as such first
        raise _rows_differ("its pages", group, rows, f"{values} values", name)


def _footer_length(handle: BinaryIO, file_size: int) -> int:
    if file_size < 12:
        raise _bad("too short")
    handle.seek(file_size - 8)
    length, magic = struct.unpack("<I4s", handle.read(8))
    if magic != MAGIC:
        raise _bad("no Parquet footer")
    if length > file_size - 12:
        raise _bad("the footer is longer than the file")
    return int(length)


def _describe(parquet: pq.ParquetFile, name: str, leaf: pq.ColumnSchema) -> str:
    """The column's type as pyarrow would read it (list<element: double>...), else its leaf's Parquet type."""
    try:
        index = parquet.schema_arrow.get_field_index(name)
        if index >= 0:
            described = str(parquet.schema_arrow.field(index).type)
            return described if len(described) <= 120 else described[:117] + "..."
    except (pa.ArrowException, ValueError):
        pass
    logical = leaf.logical_type.type
    return f"{leaf.physical_type}" + (f" ({logical})" if logical != "NONE" else "")


def _leaf_width(leaf: pq.ColumnSchema, path: list[str], name: str, flag: bool) -> int | None:
    """Bytes one value of `leaf` takes when it is a flat number (or flag) column `name`, else None."""
    if path != [name] or leaf.max_repetition_level != 0 or leaf.max_definition_level > 1:
        return None  # nested: a list's, map's or struct's leaf, however its name reads
    kind, logical, converted = leaf.physical_type, leaf.logical_type.type, leaf.converted_type
    if kind == "BOOLEAN":
        return FLAG_WIDTH if flag and logical == "NONE" else None
    if kind in _WIDTHS:
        ok = logical in _NUMBER_ANNOTATIONS and converted in _NUMBER_CONVERSIONS
        return _WIDTHS[kind] if ok else None
    if kind == "BYTE_ARRAY" and (logical == "STRING" or converted == "UTF8"):
        return TEXT_WIDTH  # numbers as text: read, and its first non-number named by its row
    if kind == "FIXED_LEN_BYTE_ARRAY" and logical in _FIXED_NUMBERS and 0 < leaf.length <= _FIXED_NUMBERS[logical]:
        return int(leaf.length)  # the annotation bounds the width; a width the file merely declares is never trusted
    return None


def _selected_leaves(parquet: pq.ParquetFile) -> dict[str, list[int]]:
    """For each name pyarrow's `columns=` accepts, the leaves it reads for it (its own rule, from the
    leaves' paths: a name selects every leaf whose path begins with it, so a nested column reads all of
    its leaves)."""
    selected: dict[str, list[int]] = {}
    for index, path in enumerate(parquet.reader.column_paths):
        for depth in range(1, len(path) + 1):
            selected.setdefault(".".join(path[:depth]), []).append(index)
    return selected


def open_file(
    source: Path | bytes, columns: Sequence[str], max_rows: int, limit_name: str, flags: Sequence[str] = ()
) -> pq.ParquetFile:
    """The ParquetFile of `source`, after its footer and the page headers of `columns` (those it has)
    show at most `max_rows` rows (else TooLarge naming `limit_name`) of sizes those rows can fill.

    Every one of `columns` the file has must be a flat numeric column (those in `flags` may also be
    BOOLEAN), else InputError naming it, from the footer alone; the caller reads only `columns`."""
    handle: BinaryIO = open(source, "rb") if isinstance(source, (str, os.PathLike)) else pa.BufferReader(source)
    with handle:
        file_size = handle.seek(0, os.SEEK_END)
        footer = _footer_length(handle, file_size)
        if footer > FOOTER_MAX_BYTES:
            raise TooLarge(
                "file",
                f"a Parquet footer of {footer} bytes",
                f"a footer of at most {FOOTER_MAX_BYTES} bytes (fewer row groups or columns)",
            )
        try:
            parquet = pq.ParquetFile(
                source if isinstance(source, (str, os.PathLike)) else pa.BufferReader(source),
                pre_buffer=False,
                thrift_string_size_limit=FOOTER_MAX_BYTES,
                thrift_container_size_limit=FOOTER_MAX_BYTES,
            )
        except (pa.ArrowException, OSError) as exc:
            raise _bad(str(exc)) from exc
        meta = parquet.metadata
        schema = meta.schema
        if len(schema) > MAX_COLUMNS:
            raise too_many_columns(f"{len(schema)} leaf")
        groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
        declared = max(meta.num_rows, sum(group.num_rows for group in groups))
        if declared > max_rows:
            raise TooLarge("file", f"the file declares {declared} rows", f"at most {max_rows} rows ({limit_name})")
        if meta.num_rows < 0 or any(group.num_rows < 0 for group in groups):
            raise _bad("a negative row count")
        if meta.num_rows != sum(group.num_rows for group in groups):  # a reader would drop or invent rows
            raise InputError(
                f"the footer states {meta.num_rows} rows but its row groups hold "
                f"{sum(group.num_rows for group in groups)} ({meta.num_row_groups} row groups)",
                _AGREEING,
            )
        paths, selected = parquet.reader.column_paths, _selected_leaves(parquet)
        widths: dict[int, tuple[int, str]] = {}  # leaf -> (value width, the wanted name that reads it)
        for name in columns:  # the types first, from the schema: nothing is read for a file refused here
            for index in selected.get(name, ()):  # none: the caller names missing columns
                leaf = schema.column(index)
                width = _leaf_width(leaf, paths[index], name, name in flags)
                if width is None:
                    raise InputError(
                        f"type {_describe(parquet, name, leaf)} is not numeric",
                        _NUMBERS + (" (or booleans)" if name in flags else ""),
                        column=name,
                    )
                widths[index] = (width, name)
        for index, (width, name) in widths.items():  # then every page pyarrow will decode for them
            for number, group in enumerate(groups):
                _check_chunk(handle, file_size, group.column(index), number, group.num_rows, width, name)
    text = sorted(
        {name for index, (width, name) in widths.items() if schema.column(index).physical_type == "BYTE_ARRAY"}
    )
    if text:  # kept as dictionaries: a dictionary page's one long value is never copied into every row it fills
        return pq.ParquetFile(
            source if isinstance(source, (str, os.PathLike)) else pa.BufferReader(source),
            pre_buffer=False,
            thrift_string_size_limit=FOOTER_MAX_BYTES,
            thrift_container_size_limit=FOOTER_MAX_BYTES,
            read_dictionary=text,
        )
    return parquet


def batches(source: pq.ParquetFile, columns: Sequence[str], batch_size: int) -> Iterator[pa.RecordBatch]:
    """The record batches of `columns` of a file open_file opened, a row group at a time, each group's rows
    counted as they are decoded against the count its footer states (open_file checked the footer and page
    headers agree; this holds whatever a decoder makes of the pages): a difference is an InputError."""
    for group in range(source.num_row_groups):
        rows, read = source.metadata.row_group(group).num_rows, 0
        for batch in source.iter_batches(batch_size=batch_size, row_groups=[group], columns=list(columns)):
            read += batch.num_rows
            if read > rows:
                break
            yield batch
        if read != rows:
            raise InputError(
                f"row group {group} states {rows} rows but {'more' if read > rows else read} were read from it",
                _AGREEING,
            )

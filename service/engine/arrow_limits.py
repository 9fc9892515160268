"""Arrow IPC streams from clients, sized from their message headers before any body is decoded.

Why: a record batch's buffers may be compressed (zstd, lz4), and each compressed buffer states the
size it decompresses to; pyarrow allocates and fills that much before anything counts rows, so 56 KB
of zstd declaring 3e6 rows became 1.5 GB before the 413. Here every message's flatbuffer header is
read first (rows, buffers, the size each compressed buffer claims): rows past the limit are a 413, a
buffer larger than its rows of its column's type can fill is a 422, and only a stream whose every
batch passed is decoded. Only fixed-width numeric columns are accepted (what a load table is),
so a batch's size follows from its rows and its schema.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import cast

import pyarrow as pa

from gridsim.feeders import MAX_BUSES
from service.engine.errors import InvalidInput, TooLarge

# A network's load columns: P and Q of each bus but the slack, at most MAX_BUSES buses (as JSON rows).
MAX_COLUMNS = 2 * (MAX_BUSES - 1)
# Record batches per stream: each costs Python and C++ objects per column whatever its rows.
MAX_BATCHES = 256
SCHEMA_MAX_BYTES = 1 << 20  # the schema message's header: names and metadata of MAX_COLUMNS columns fit easily
_RECORD_BATCH, _DICTIONARY_BATCH = 3, 2  # MessageHeader union tags (Arrow's Message.fbs)
_PADDING = 64  # IPC buffers are padded to 8 (64 allowed) bytes


def is_numeric(kind: pa.DataType) -> bool:
    """The column types a load table may have (service.engine.load_table.as_float converts them)."""
    return bool(pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_decimal(kind))


class _Table:
    """A flatbuffer table: fields by slot through its vtable (https://flatbuffers.dev/internals/)."""

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf, self.pos = buf, pos
        vtable = pos - _unpack("<i", buf, pos)
        self.vtable, self.vtable_size = vtable, _unpack("<H", buf, vtable)

    def _field(self, slot: int) -> int | None:
        entry = 4 + 2 * slot
        if entry >= self.vtable_size:
            return None
        offset = _unpack("<H", self.buf, self.vtable + entry)
        return self.pos + offset if offset else None

    def scalar(self, slot: int, fmt: str, default: int = 0) -> int:
        at = self._field(slot)
        return default if at is None else _unpack(fmt, self.buf, at)

    def table(self, slot: int) -> _Table | None:
        at = self._field(slot)
        return None if at is None else _Table(self.buf, at + _unpack("<I", self.buf, at))

    def structs(self, slot: int, size: int) -> list[tuple[int, int]]:
        """A vector of (int64, int64) structs (FieldNode, Buffer)."""
        at = self._field(slot)
        if at is None:
            return []
        start = at + _unpack("<I", self.buf, at)
        count = _unpack("<I", self.buf, start)
        if start + 4 + count * size > len(self.buf):
            raise ValueError("vector past the end of the header")
        return [struct.unpack_from("<qq", self.buf, start + 4 + i * size) for i in range(count)]


def _unpack(fmt: str, buf: memoryview, at: int) -> int:
    if at < 0 or at + struct.calcsize(fmt) > len(buf):
        raise ValueError("offset past the end of the header")
    return cast(int, struct.unpack_from(fmt, buf, at)[0])


def _not_arrow(reason: str) -> InvalidInput:
    return InvalidInput(
        "body",
        f"is not a usable Arrow IPC stream ({reason})",
        "one Arrow IPC stream: a schema of numeric columns, then record batches",
    )


def _batch_header(message: pa.ipc.Message) -> tuple[int, list[tuple[int, int]], bool]:
    """(rows, buffers as (offset, length) in the body, compressed?) of a record-batch message."""
    buf = memoryview(message.metadata)
    header = _Table(buf, _unpack("<I", buf, 0))  # the root table: Message
    batch = header.table(2)  # Message.header (slot 1 is its union tag)
    if batch is None:
        raise ValueError("a record batch message without its header")
    return batch.scalar(0, "<q"), batch.structs(2, 16), batch.table(3) is not None


def _check_buffers(
    rows: int, buffers: list[tuple[int, int]], compressed: bool, body: pa.Buffer, widths: Sequence[int]
) -> None:
    """Every buffer (validity bitmap, values: two per column) no bigger than `rows` of its column need."""
    if len(buffers) != 2 * len(widths):
        raise ValueError(f"{len(buffers)} buffers for {len(widths)} numeric columns")
    data = memoryview(body) if body is not None else memoryview(b"")
    for index, (offset, length) in enumerate(buffers):
        if offset < 0 or length < 0 or offset + length > len(data):
            raise ValueError("a buffer outside the message body")
        size = length
        if compressed and length >= 8:
            claimed = struct.unpack_from("<q", data, offset)[0]  # the uncompressed length prefix; -1: stored as is
            size = length - 8 if claimed == -1 else claimed
        width = widths[index // 2]
        limit = (rows + 7) // 8 + _PADDING if index % 2 == 0 else rows * width + _PADDING
        if size > limit:
            raise ValueError(f"a buffer of column {index // 2} holds {size} bytes, more than {rows} rows need")


def read_stream(body: bytes, max_rows: int, field: str = "queries") -> pa.Table:
    """The table of an Arrow IPC stream of numeric columns; TooLarge past `max_rows` rows, MAX_COLUMNS
    columns or MAX_BATCHES batches, InvalidInput for anything else wrong, before any batch is decoded."""
    try:
        reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(body))
        first = reader.read_next_message()
    except (pa.ArrowException, OSError, StopIteration) as exc:
        raise _not_arrow(str(exc) or "no schema message") from None
    if first.type != "schema":
        raise _not_arrow(f"it starts with a {first.type} message, not the schema")
    if first.metadata.size > SCHEMA_MAX_BYTES:
        raise TooLarge(
            "body",
            f"a schema header of {first.metadata.size} bytes",
            f"a schema header of at most {SCHEMA_MAX_BYTES} bytes (at most {MAX_COLUMNS} columns)",
        )
    try:
        schema = pa.ipc.read_schema(first)
    except (pa.ArrowException, OSError) as exc:
        raise _not_arrow(str(exc)) from None
    if len(schema) > MAX_COLUMNS:
        raise TooLarge(field, f"{len(schema)} columns", f"at most {MAX_COLUMNS} columns: the network's load features")
    for column in schema:
        if not is_numeric(column.type):
            raise InvalidInput(field, f"column {column.name!r}: type {column.type} is not numeric", "numbers (float64)")
    widths = [column.type.bit_width // 8 for column in schema]  # bit_width: on every pyarrow since 14
    rows = 0
    messages: list[pa.ipc.Message] = []
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        except (pa.ArrowException, OSError) as exc:
            raise _not_arrow(str(exc)) from None
        if message.type != "record batch":
            raise _not_arrow(f"a {message.type} message: only record batches follow the schema")
        if len(messages) == MAX_BATCHES:
            raise TooLarge(
                field,
                f"more than {MAX_BATCHES} record batches",
                f"at most {MAX_BATCHES} record batches: send the rows in fewer, larger batches",
            )
        try:
            batch_rows, buffers, compressed = _batch_header(message)
            if batch_rows < 0:
                raise ValueError(f"a batch of {batch_rows} rows")
            rows += batch_rows
            if rows > max_rows:
                raise TooLarge(field, f"at least {rows} rows is over the limit", f"at most {max_rows} rows")
            _check_buffers(batch_rows, buffers, compressed, message.body, widths)
        except (ValueError, struct.error) as exc:
            raise _not_arrow(str(exc)) from None
        messages.append(message)
    try:
        return pa.Table.from_batches([pa.ipc.read_record_batch(m, schema) for m in messages], schema)
    except (pa.ArrowException, OSError) as exc:
        raise _not_arrow(str(exc)) from None

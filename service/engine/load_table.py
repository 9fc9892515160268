"""Tables of load vectors (batch-job uploads, Arrow predict bodies): column and cell checks.

Both refuse the first bad column or cell with its row (1-based) and column named (a context file may
leave a value out: null, an empty cell or NaN, read as NaN where `missing` is asked), so a planning
tool sees the same wording whichever way it sent the table, and both hold loads to the range JSON
bodies get (LOAD_LIMIT), so a file cannot carry a value that a JSON request could not.
"""

from __future__ import annotations

import io
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from gridsim.feeders import MAX_BUSES

LOAD_LIMIT = 1000.0  # MW or Mvar: the bound of every load value, in JSON bodies, Arrow bodies and batch files
# The columns a table's header may name: the widest network has 2 * (MAX_BUSES - 1) = 998 load columns, and
# a context file adds a voltage (and angle) per bus; a header past this is refused before its names are compared.
MAX_COLUMNS = 4096
TEXT_BYTES = 64  # a value of a text column: a number written as text (Parquet text columns are held to it)
MAX_HEADER_BYTES = 64 * MAX_COLUMNS  # a CSV header line: MAX_COLUMNS names of up to 63 bytes and their commas
UTF8_BOM = b"\xef\xbb\xbf"
HEADER_READ_BYTES = len(UTF8_BOM) + MAX_HEADER_BYTES + 2  # what a caller reads of a CSV for csv_header_names
assert MAX_COLUMNS > 4 * MAX_BUSES


class InputError(ValueError):
    """A refused upload: where (row, column) and what was expected."""

    def __init__(self, message: str, expected: str, row: int | None = None, column: str | None = None) -> None:
        parts = (f"row {row}" if row is not None else "", f"column {column!r}" if column else "")
        where = ", ".join(p for p in parts if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.message, self.expected, self.row, self.column = message, expected, row, column


def too_many_columns(count: int | str) -> InputError:
    return InputError(
        f"{count} columns", f"at most {MAX_COLUMNS} columns (the widest network has {2 * (MAX_BUSES - 1)} load columns)"
    )


def check_columns(names: Sequence[str], features: Sequence[str]) -> None:
    """Exactly `features`, each once, in any order; linear in the names (at most MAX_COLUMNS of them)."""
    if len(names) > MAX_COLUMNS:
        raise too_many_columns(len(names))
    counts = Counter(names)
    dupes = sorted(n for n, k in counts.items() if k > 1)
    if dupes:
        raise InputError(f"column(s) {dupes[:5]} appear more than once", "each feature column once", column=dupes[0])
    wanted = set(features)
    missing = [f for f in features if f not in counts]
    extra = [n for n in names if n not in wanted]
    if missing:
        raise InputError(
            f"missing column(s) {missing[:5]}{' ...' if len(missing) > 5 else ''}",
            f"the {len(features)} feature columns of the network",
            column=missing[0],
        )
    if extra:
        raise InputError(
            f"unexpected column(s) {extra[:5]}{' ...' if len(extra) > 5 else ''}",
            f"only the {len(features)} feature columns of the network",
            column=extra[0],
        )


BLANKS = "a space, tab or no-break space"


def csv_header_names(head: bytes) -> list[str]:
    """The names in a CSV's header line, given the file's first HEADER_READ_BYTES (a BOM, the line and its
    CRLF fit): a line that does not end within them, or that names more than MAX_COLUMNS columns, is
    refused before any name is compared (quotes around a name are dropped).

    The names are those the CSV reader gives its columns, which keeps every character of a name: a name with
    blanks around it (`p_mw_bus5 `) is refused naming it (read as another column, it once matched a feature
    here and no column there: a 500), and so is a column without a name (a trailing comma: a data column
    no check saw), by its position (1-based)."""
    head = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    line = head.partition(b"\n")[0]
    if line.count(b",") >= MAX_COLUMNS:
        raise too_many_columns(f"more than {MAX_COLUMNS}")
    if len(line) > MAX_HEADER_BYTES + 1:  # (+1: a CR before the newline)
        raise InputError(
            f"the header line is longer than {MAX_HEADER_BYTES} bytes",
            f"a header line of at most {MAX_HEADER_BYTES} bytes ({MAX_COLUMNS} columns at most), ended by a newline",
        )
    line = line[:-1] if line.endswith(b"\r") else line
    if not line.strip():
        return []  # no header: the callers refuse an empty file
    names = []
    for position, raw in enumerate(line.decode("utf-8", "replace").split(","), start=1):
        name = raw.strip('"') if raw == raw.strip() else raw
        if not name.strip():
            raise InputError(
                f"header column {position} has no name",
                "a name for every column (no trailing comma; no unnamed index column: pandas' index=False)",
            )
        if name != name.strip():
            raise InputError(
                f"header column {position} is named {name!r}: blanks ({BLANKS}) around a name are part of it",
                f"{name.strip()!r}, without blanks around it",
                column=name,
            )
        names.append(name)
    return names


# Text of a number as pyarrow's CSV reader converts it to float64: ASCII digits, an optional sign, point and
# exponent, inf/infinity/nan in any case, spaces and tabs around. Python's float() also takes `1_0` (as 10),
# other scripts' digits and Unicode spaces, which the reader refuses: judged by float(), such a cell was not
# found when the reader's error was located, so the error named no row. (Possessive quantifiers: linear time
# on a cell of megabytes.)
NUMBER_TEXT = re.compile(
    r"[ \t]*+[+-]?+(?:(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][+-]?+[0-9]++)?+|inf(?:inity)?+|nan)[ \t]*+",
    re.IGNORECASE,
)
SHOWN_CHARS = 40  # of a refused cell's text quoted in a message
# A flag (a context file's `converged`) as pyarrow's CSV reader converts text to bool: its default true_values and
# false_values, exactly (no blanks around, no other case); an empty cell, NaN or null is a missing value.
TRUE_TEXT, FALSE_TEXT = ("1", "True", "TRUE", "true"), ("0", "False", "FALSE", "false")
FLAG_EXPECTED = "true or false (also True, TRUE, 1; False, FALSE, 0)"


def first_non_number(values: pa.Array) -> int | None:
    """Index of the first value that is not text of a number as the CSV reader reads one (None if all are)."""
    for i, value in enumerate(values.to_pylist()):
        if not isinstance(value, str) or NUMBER_TEXT.fullmatch(value) is None:
            return i
    return None


def first_non_flag(values: pa.Array) -> int | None:
    """Index of the first value that is not text of a flag as the CSV reader reads one (None if all are)."""
    for i, value in enumerate(values.to_pylist()):
        if value not in TRUE_TEXT and value not in FALSE_TEXT:
            return i
    return None


def shown(value: object) -> str:
    """A refused cell's text for a message: its repr, cut to SHOWN_CHARS characters (its length said) if longer."""
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"
    return repr(value)


def plain_text(column: pa.ChunkedArray | pa.Array, name: str, offset: int, width: int) -> pa.ChunkedArray | pa.Array:
    """A dictionary-encoded column (a Parquet text column, read as dictionaries) decoded, once no value of its
    dictionaries is longer than `width` bytes (else the first row using a longer one is refused): decoded rows
    then hold at most `width` bytes each. Any other column is returned as it is."""
    if not pa.types.is_dictionary(column.type):
        return column
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    start = offset
    for chunk in chunks:
        too_long = pc.greater(pc.binary_length(chunk.dictionary), width)
        if pc.any(too_long).as_py():
            rows = pc.index_in(chunk.indices, pa.array(np.flatnonzero(too_long.to_numpy(zero_copy_only=False))))
            row = pc.index(pc.is_valid(rows), True).as_py()
            raise InputError(
                f"a value longer than {width} bytes", f"values of at most {width} bytes", start + row + 1, name
            )
        start += len(chunk)
    return (
        column.dictionary_decode()
        if isinstance(column, pa.Array)
        else pa.chunked_array([chunk.dictionary_decode() for chunk in chunks], type=column.type.value_type)
    )


def as_float(column: pa.ChunkedArray | pa.Array, name: str, offset: int, missing: bool = False) -> np.ndarray:
    """float64 values of one batch column, refusing non-numbers, missing values, NaN and infinity;
    `missing` (a context's column: a value not measured): null, an empty cell and NaN are NaN, allowed."""
    column = plain_text(column, name, offset, TEXT_BYTES)
    kind = column.type
    if missing and pa.types.is_null(kind):  # a column left empty throughout (a CSV's reads as type null)
        return np.full(len(column), np.nan)
    if not (pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_decimal(kind)):
        bad = first_non_number(column) if pa.types.is_string(kind) or pa.types.is_large_string(kind) else 0
        row = offset + (bad or 0) + 1
        raise InputError(f"type {kind} is not numeric", "numbers (float64)", row, name)
    if column.null_count and not missing:
        idx = pc.index(pc.is_null(column), True).as_py()
        raise InputError("missing value (empty or NaN)", "a finite number", offset + idx + 1, name)
    if column.null_count:
        column = pc.fill_null(pc.cast(column, pa.float64()), float("nan"))
    values = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)
    finite = np.isfinite(values)
    if missing:
        finite |= np.isnan(values)
    if not finite.all():
        idx = int(np.argmin(finite))
        raise InputError(f"value {values[idx]} is not finite", "a finite number", offset + idx + 1, name)
    return values


def within(values: np.ndarray, low: float, high: float, expected: str, name: str, offset: int) -> np.ndarray:
    """`values` when all lie in [low, high] (NaN passes: a missing value is the caller's to allow); else the
    first outside is refused with its row (1-based after `offset`) and column."""
    outside = (values < low) | (values > high)
    if outside.any():
        row = int(np.argmax(outside))
        raise InputError(f"value {values[row]:g} is outside [{low:g}, {high:g}]", expected, offset + row + 1, name)
    return values


def as_load(column: pa.ChunkedArray | pa.Array, name: str, offset: int, missing: bool = False) -> np.ndarray:
    """`as_float`, and within +-LOAD_LIMIT: the first value outside is refused with its row and column."""
    values = as_float(column, name, offset, missing)
    return within(values, -LOAD_LIMIT, LOAD_LIMIT, f"MW or Mvar within +-{LOAD_LIMIT:g}", name, offset)


def as_flag(column: pa.ChunkedArray | pa.Array, name: str, offset: int) -> np.ndarray:
    """bool values of one batch column (a context file's `converged`): booleans, the numbers 0 and 1, or their
    text as the CSV reader takes it (TRUE_TEXT, FALSE_TEXT); the first missing value (an empty cell, NaN, null) or
    any other value is refused with its row and column: a row is never left out, or kept, on a guess."""
    column = plain_text(column, name, offset, TEXT_BYTES)
    kind = column.type
    if pa.types.is_boolean(kind) or pa.types.is_null(kind):
        values = column
    elif pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_decimal(kind):
        numbers = pc.cast(column, pa.float64())
        bad = pc.and_(pc.is_valid(numbers), pc.invert(pc.is_in(numbers, pa.array([0.0, 1.0]))))
        if pc.any(bad).as_py():
            idx = pc.index(bad, True).as_py()
            raise InputError(f"{numbers[idx].as_py()!r} is not a flag", FLAG_EXPECTED, offset + idx + 1, name)
        values = pc.not_equal(numbers, 0.0)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        bad = first_non_flag(column.drop_null())
        if bad is not None:
            idx = pc.indices_nonzero(pc.is_valid(column)).to_pylist()[bad]
            raise InputError(
                f"{shown(column[idx].as_py())} is not true or false", FLAG_EXPECTED, offset + idx + 1, name
            )
        values = pc.if_else(pc.is_valid(column), pc.is_in(column, pa.array(TRUE_TEXT)), None)
    else:
        raise InputError(f"type {kind} is not a flag", FLAG_EXPECTED, offset + 1, name)
    if values.null_count:
        idx = pc.index(pc.is_null(values), True).as_py()
        raise InputError("missing value (empty or NaN)", FLAG_EXPECTED, offset + idx + 1, name)
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)


def csv_batches(
    open_reader: Callable[[], pcsv.CSVStreamingReader], locate: Callable[[pa.ArrowInvalid], InputError]
) -> Iterator[pa.RecordBatch]:
    """The record batches of a CSV reader as they are read; a cell Arrow cannot convert becomes the InputError
    `locate` makes of it (naming its row and column: Arrow's own message names neither well)."""
    try:
        reader = open_reader()
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            yield batch
    except pa.ArrowInvalid as exc:
        raise locate(exc) from exc


SCAN_BYTES = 1 << 20  # read at a time by overlong_cell


def _line_ends(chunk: bytes) -> np.ndarray:
    codes = np.frombuffer(chunk, np.uint8)
    return np.flatnonzero((codes == 10) | (codes == 13))


def _long_line(handle: io.BufferedIOBase, limit: int, after: int) -> tuple[int, int] | None:
    """(its data row, its offset) of the first line past data row `after` longer than `limit` bytes, or None.
    A line's data row is the count of non-empty lines before it (the header's is 0)."""
    rows = start = at = 0  # non-empty lines ended so far, where the current line starts, bytes read
    while chunk := handle.read(SCAN_BYTES):
        ends = _line_ends(chunk) + at
        starts = np.concatenate(([start], ends + 1))
        lengths = ends - starts[:-1]
        before = rows + np.cumsum(lengths > 0) - (lengths > 0)  # the data row of each line ended here
        long = np.flatnonzero((lengths > limit) & (before > after))
        if long.size:
            first = int(long[0])
            return int(before[first]), int(starts[first])
        rows, start, at = rows + int(np.count_nonzero(lengths)), int(starts[-1]), at + len(chunk)
        if at - start > limit and rows > after:  # the line read so far is too long already
            return rows, start
    return None


def _longest_cell(handle: io.BufferedIOBase, start: int) -> tuple[int, int]:
    """(index, bytes) of the longest cell of the line at `start`: cells end at commas outside double quotes."""
    handle.seek(start)
    cell, cell_start, quotes, at = 0, start, 0, start
    best = (0, 0)
    while chunk := handle.read(SCAN_BYTES):
        ends = _line_ends(chunk)
        codes = np.frombuffer(chunk, np.uint8)[: int(ends[0]) if ends.size else len(chunk)]
        quoted = codes == 34
        outside = (np.cumsum(quoted) + quotes) % 2 == 0  # an escaped quote ("") is two: parity is kept
        commas = np.flatnonzero((codes == 44) & outside) + at
        bounds = np.concatenate(([cell_start], commas + 1))
        lengths = commas - bounds[:-1]
        if lengths.size and int(lengths.max()) > best[1]:
            best = (cell + int(np.argmax(lengths)), int(lengths.max()))
        cell, cell_start = cell + len(commas), int(bounds[-1])
        quotes, at = quotes + int(quoted.sum()), at + len(codes)
        if ends.size:
            break
    return (cell, at - cell_start) if at - cell_start > best[1] else best


def overlong_cell(
    source: Path | bytes, limit: int, expected: Callable[[str | None], str], after: int = 0
) -> InputError | None:
    """The error naming the first line of a CSV past data row `after` (the rows the reader gave before it
    failed) longer than `limit` bytes (pyarrow's reader, taking `limit` bytes at a time, refuses it naming
    neither row nor column) by its data row (1-based, header excluded) and the column of its longest cell
    (`expected(column)` says what that column takes); None if there is none.

    The rows are counted as the reader counts them (a CR or LF ends a line, quoted or not; empty lines are no
    rows), in bounded memory whatever the file's size."""
    handle: io.BufferedIOBase = open(source, "rb") if isinstance(source, (str, os.PathLike)) else io.BytesIO(source)
    with handle:
        found = _long_line(handle, limit, after)
        if found is None:
            return None
        rows, start = found
        handle.seek(0)
        names = csv_header_names(handle.read(HEADER_READ_BYTES))
        index, length = _longest_cell(handle, start)
    column = names[index] if index < len(names) else None
    return InputError(
        f"a value of {length} bytes (its row is longer than the {limit} bytes read at a time)",
        expected(column),
        rows,
        column,
    )


def _line_at(handle: io.BufferedIOBase, text: bytes) -> int | None:
    """Where the first line that is exactly `text` starts (a CR or LF, or the file's start, before it; a CR, LF
    or the file's end after it), or None; in bounded memory (SCAN_BYTES and the line at a time)."""
    base, window = 0, b""  # window: what is held of the file, from byte `base`
    while text:
        chunk = handle.read(SCAN_BYTES)
        window += chunk
        find = window.find(text)
        while find >= 0:
            end = find + len(text)
            if end == len(window) and chunk:
                break  # its line may go on in the next read: judged then
            before = window[find - 1 : find] in (b"\n", b"\r") if find else base == 0
            if before and (end == len(window) or window[end : end + 1] in (b"\n", b"\r")):
                return base + find
            find = window.find(text, find + 1)
        if not chunk:
            return None
        keep = min(len(window), len(text) + 1)  # a line still open at the end, and the byte before it
        base, window = base + len(window) - keep, window[len(window) - keep :]
    return None


def _data_row_at(handle: io.BufferedIOBase, position: int) -> int:
    """The data row of the line starting at `position`: non-empty lines before it (the header's is 0)."""
    handle.seek(0)
    rows = start = at = 0
    while at < position and (chunk := handle.read(min(SCAN_BYTES, position - at))):
        ends = _line_ends(chunk) + at
        starts = np.concatenate(([start], ends + 1))
        rows += int(np.count_nonzero(ends - starts[:-1]))
        start, at = int(starts[-1]), at + len(chunk)
    return rows


def wrong_cell_count(source: Path | bytes, block_bytes: int) -> InputError | None:
    """The error naming the first row with more or fewer cells than the header has names (pyarrow's reader
    refuses it as "Expected 64 columns, got 60", naming no row) by its data row, counted as overlong_cell counts
    them (None where the row's text is not found on a line of its own); None if every row has its cells."""
    found: list[tuple[int, int, str]] = []

    def invalid(row: pcsv.InvalidRow) -> str:
        found.append((row.expected_columns, row.actual_columns, row.text))
        return "error"

    handle: io.BufferedIOBase = open(source, "rb") if isinstance(source, (str, os.PathLike)) else io.BytesIO(source)
    with handle:
        names = csv_header_names(handle.read(HEADER_READ_BYTES))
        if not names:
            return None
        try:
            for _ in pcsv.open_csv(
                source if isinstance(source, (str, os.PathLike)) else pa.BufferReader(source),  # native: no GIL
                read_options=pcsv.ReadOptions(block_size=block_bytes),
                parse_options=pcsv.ParseOptions(invalid_row_handler=invalid),
                convert_options=pcsv.ConvertOptions(include_columns=names[:1], column_types={names[0]: pa.string()}),
            ):
                pass
        except pa.ArrowInvalid:
            pass
        if not found:
            return None
        expected, actual, text = found[0]
        handle.seek(0)
        position = _line_at(handle, text.encode())
        row = None if position is None else _data_row_at(handle, position)
    return InputError(
        f"{actual} cells where the header names {expected} columns",
        f"one cell per header column ({expected}) in every row: a comma for each empty cell, none after the last",
        row,
    )


def locate_csv_error(
    text_batches: Callable[[], Iterator[pa.RecordBatch] | pcsv.CSVStreamingReader],
    numbers: Sequence[str],
    source: Path | bytes,
    block_bytes: int,
    expected: Callable[[str | None], str],
    flags: Sequence[str] = (),
) -> InputError | None:
    """Where the cell is that a CSV reader (reading `block_bytes` at a time) refused with an error naming no row:
    the first row, and its first column of `numbers`, holding something not a number, found by reading the
    file again as text (`text_batches`); else a row too long for the reader, named by its longest cell (see
    overlong_cell); None if neither is found: the caller words the reader's own error. `expected(column)`
    says what a cell of the column takes. The columns of `flags` (read as text too) are bool to the reader:
    their first cell that is not true or false (first_non_flag) is named likewise."""
    offset = 0
    try:
        for batch in text_batches():
            found: list[tuple[int, int, str]] = []
            for position, name in enumerate([*numbers, *flags]):
                column = batch.column(name)
                judge = first_non_flag if position >= len(numbers) else first_non_number
                bad = judge(column.drop_null())
                if bad is not None:
                    found.append((pc.indices_nonzero(pc.is_valid(column)).to_pylist()[bad], position, name))
            if found:
                row, position, name = min(found)
                value = batch.column(name)[row].as_py()
                what = "true or false" if position >= len(numbers) else "a number"
                return InputError(f"{shown(value)} is not {what}", expected(name), offset + row + 1, name)
            offset += batch.num_rows
    except pa.ArrowInvalid:
        return overlong_cell(source, block_bytes, expected, after=offset) or wrong_cell_count(source, block_bytes)
    return None


class NamedColumns:
    """Query rows that came as named columns (an Arrow body), their cells already checked: the order is
    the network's, known only once the request's context (and so its network) is, in the engine."""

    def __init__(self, columns: dict[str, np.ndarray], names: Sequence[str]) -> None:
        self.columns, self.names = columns, list(names)
        self.rows = len(next(iter(columns.values()))) if columns else 0

    def __len__(self) -> int:
        return self.rows

    def ordered(self, features: Sequence[str]) -> np.ndarray:
        """(rows, features) float64 in `features` order; InputError naming the first missing or extra column."""
        check_columns(self.names, features)
        return np.column_stack([self.columns[name] for name in features])

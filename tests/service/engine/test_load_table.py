"""service.engine.load_table: which CSV cells are numbers, and where a row too long to read is."""

from __future__ import annotations

import io
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pytest

from service.engine.load_table import SHOWN_CHARS, first_non_number, overlong_cell, shown

# Python's float() reads the first four, pyarrow's CSV reader refuses them (and the rest are its edge cases)
CELLS = ["1_0", "١٠", "１０", "1\u00a0", "1__0", "0x10", "1,5", "1.5e", "e5", "--1", "  ", "nan(1)"] + [
    "1",
    " 1",
    "1\t",
    "+1",
    "-.5e-3",
    "5.",
    ".5",
    "1E5",
    "1e400",
    "inf",
    "-Infinity",
    "NaN",
    "+nan",
    "00001",
    "7" * 500,
]


def _csv_reads(cell: str) -> bool:
    """Whether pyarrow's CSV reader reads `cell` as a float64."""
    data = f'x\n"{cell}"\n'.encode()
    try:
        pcsv.read_csv(io.BytesIO(data), convert_options=pcsv.ConvertOptions(column_types={"x": pa.float64()}))
    except pa.ArrowInvalid:
        return False
    return True


@pytest.mark.parametrize("cell", CELLS)
def test_a_cell_is_a_number_exactly_when_the_csv_reader_reads_one(cell):
    """A CSV cell the reader refused is found when its error is located (Python's float() took `1_0` as 10, so
    the error named no row); nan(...), which the reader reads as NaN, is refused later as not finite anyway."""
    expected = _csv_reads(cell) and cell != "nan(1)"
    assert (first_non_number(pa.array(["1.5", cell])) is None) == expected, cell
    assert first_non_number(pa.array(["1.5", None])) == 1


def test_a_cell_of_megabytes_is_judged_in_linear_time_and_quoted_shortly():
    cell = "1" * (20 << 20) + "_"
    start = time.perf_counter()
    assert first_non_number(pa.array(["1", cell])) == 1
    assert time.perf_counter() - start < 5.0
    quoted = shown(cell)
    assert len(quoted) < SHOWN_CHARS + 40 and quoted.endswith(f"... ({len(cell)} characters)"), quoted
    assert shown("1_0") == "'1_0'"


def _expected(column: str | None) -> str:
    return f"what {column} takes"


def test_an_overlong_line_is_named_by_its_row_and_longest_cell_as_the_reader_counts_them():
    long = "9" * 5000
    lines = ["a,b,c", "1,2,3", "", "4,5,6", f'7,"8,{long}",9', "1,2,3", f"{long},1,2"]
    for end in ("\n", "\r\n", "\r"):
        data = end.join(lines).encode() + end.encode()
        # the reader's own count, read with blocks large enough: the long cell's row (1-based) and column
        table = pcsv.read_csv(io.BytesIO(data), read_options=pcsv.ReadOptions(block_size=1 << 20))
        assert pc.utf8_length(table["b"].cast(pa.string()))[2].as_py() == len(long) + 2  # row 3 (the empty line no row)
        error = overlong_cell(data, 4096, _expected)
        assert error is not None and (error.row, error.column) == (3, "b"), (end, error)
        assert error.message.startswith(f"a value of {len(long) + 4} bytes") and error.expected == "what b takes"
        later = overlong_cell(data, 4096, _expected, after=3)  # past the rows the reader gave before failing
        assert later is not None and (later.row, later.column) == (5, "a"), later
        assert overlong_cell(data, 8192, _expected) is None


def test_an_overlong_line_at_the_end_without_a_line_end_and_on_disk(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n1,2\n3," + b"4" * (3 << 20))  # longer than a scan's chunk: found as it grows
    error = overlong_cell(path, 1 << 20, _expected)
    assert error is not None and (error.row, error.column) == (2, "b") and f"{3 << 20} bytes" in error.message

"""service.engine.load_table: which CSV cells are numbers, and where a row too long to read is."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pytest

from service.engine.load_table import (
    FALSE_TEXT,
    SHOWN_CHARS,
    TRUE_TEXT,
    InputError,
    as_flag,
    csv_header_names,
    first_non_flag,
    first_non_number,
    locate_csv_error,
    overlong_cell,
    shown,
)

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
        pcsv.read_csv(pa.BufferReader(data), convert_options=pcsv.ConvertOptions(column_types={"x": pa.float64()}))
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
        table = pcsv.read_csv(pa.BufferReader(data), read_options=pcsv.ReadOptions(block_size=1 << 20))
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


@pytest.mark.parametrize(
    "name", [" p_mw_bus5", "p_mw_bus5 ", "p_mw_bus5\t", "\tp_mw_bus5", "p_mw_bus5\u00a0", '"p_mw_bus5 "']
)
def test_a_header_name_with_blanks_around_it_is_refused_naming_it(name):
    """The CSV reader keeps every character of a name: `p_mw_bus5 ` stripped here matched a feature, and read
    there was another column (a 500: ValueError, ArrowKeyError). Refused, the name quoted with its blanks."""
    raw = name.strip('"')
    with pytest.raises(InputError) as refused:
        csv_header_names(f"p_mw_bus2,p_mw_bus3,{name},q\r\n1,2,3,4\r\n".encode())
    assert refused.value.column == raw and refused.value.message.startswith(f"header column 3 is named {raw!r}")
    assert refused.value.expected == "'p_mw_bus5', without blanks around it"
    header = pcsv.open_csv(pa.BufferReader(f"a,{name}\n1,2\n".encode())).schema.names
    assert header[1] == raw  # what the reader names it


@pytest.mark.parametrize("line", ["a,b,c,", "a,b,c,\r", ",a,b,c", "a,,b,c", "a,b,c, "])
def test_a_column_without_a_name_is_refused_naming_its_position(line):
    """A trailing comma in the header (or pandas' unnamed index): a column no check names, its cells never read."""
    with pytest.raises(InputError) as refused:
        csv_header_names(f"{line}\n1,2,3,4\n".encode())
    position = line.split(",").index(next(n for n in line.split(",") if not n.strip()))
    assert refused.value.message == f"header column {position + 1} has no name", refused.value
    assert "a name for every column" in refused.value.expected


def test_ordinary_headers_keep_their_names():
    assert csv_header_names(b'\xef\xbb\xbfa,"b",c\r\n1,2,3\r\n') == ["a", "b", "c"]
    assert csv_header_names(b"a,b,c") == ["a", "b", "c"]
    assert csv_header_names(b"") == [] and csv_header_names(b"\r\n1,2\n") == []


@pytest.mark.parametrize("row", ["1,2", "1,2,3,4", '"1,2",3'])
def test_a_row_of_too_few_or_too_many_cells_is_named_by_its_row(row):
    """The reader's "Expected 3 columns, got 2" named no row: located past blank lines, CRLFs and its first block."""
    lines = ["a,b,c", *["1,2,3"] * 200_000, "", "4,5,6", row, "7,8,9"]
    data = "\r\n".join(lines).encode()
    assert len(data) > 1 << 20
    text = pcsv.ConvertOptions(column_types=dict.fromkeys("abc", pa.string()), strings_can_be_null=True)
    with pytest.raises(pa.ArrowInvalid, match="Expected 3 columns"):
        pcsv.read_csv(pa.BufferReader(data), convert_options=text)
    located = locate_csv_error(
        lambda: pcsv.open_csv(pa.BufferReader(data), convert_options=text), ["a", "b", "c"], data, 1 << 20, _expected
    )
    assert located is not None and located.row == 200_002, located
    cells = len(row.split(",")) - row.count('"') // 2
    assert located.message == f"{cells} cells where the header names 3 columns"
    assert "one cell per header column (3)" in located.expected


def test_a_flag_is_true_or_false_as_the_csv_reader_reads_one():
    read = pcsv.read_csv(
        pa.BufferReader(("f\n" + "\n".join([*TRUE_TEXT, *FALSE_TEXT, "yes", " true", "t"]) + "\n").encode()),
        convert_options=pcsv.ConvertOptions(column_types={"f": pa.string()}),
    )
    assert first_non_flag(read.column("f").combine_chunks()) == len(TRUE_TEXT) + len(FALSE_TEXT)
    for cell in ("yes", " true", "t"):
        with pytest.raises(pa.ArrowInvalid):
            pcsv.read_csv(
                pa.BufferReader(f"f\n{cell}\n".encode()),
                convert_options=pcsv.ConvertOptions(column_types={"f": pa.bool_()}),
            )


@pytest.mark.parametrize(
    "column, row, words",
    [
        (pa.array([True, None, False]), 2, "missing value"),
        (pa.array([1, 0, 2]), 3, "2.0 is not a flag"),
        (pa.array([1.0, float("nan")]), 2, "nan is not a flag"),
        (pa.array(["true", "0", "yes"]), 3, "'yes' is not true or false"),
        (pa.array(["true", None]), 2, "missing value"),
        (pa.array(["a"]).dictionary_encode(), 1, "'a' is not true or false"),
        (pa.array([1.5]), 1, "1.5 is not a flag"),
    ],
)
def test_a_flag_that_is_not_true_or_false_is_refused_naming_its_row(column, row, words):
    with pytest.raises(InputError) as refused:
        as_flag(column, "converged", 10)
    assert (refused.value.row, refused.value.column) == (10 + row, "converged") and words in refused.value.message


def test_flags_read_as_booleans():
    for column in (pa.array([True, False]), pa.array([1, 0]), pa.array(["TRUE", "false"]), pa.array([1.0, 0.0])):
        assert as_flag(column, "converged", 0).tolist() == [True, False]

"""service.jobs.inputs: an uploaded load table's refusals name its row and column, whatever the cell."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gridsim
from service.engine.load_table import InputError
from service.jobs.inputs import CSV_BLOCK_BYTES, ingest
from tests.service.engine.test_parquet_limits import footer_field

FEATURES = list(gridsim.network("ieee33").feature_names)


def _frame(rows: int) -> pd.DataFrame:
    values = np.random.default_rng(3).uniform(0.0, 0.1, (rows, len(FEATURES)))
    return pd.DataFrame(values, columns=FEATURES).astype(object)


def _refused(path, fmt: str = "csv") -> InputError:
    with pytest.raises(InputError) as info:
        ingest(path, fmt, FEATURES, path.with_suffix(".input.parquet"), chunk_rows=64, max_rows=100_000)
    assert not path.with_suffix(".input.parquet").exists()  # nothing written
    return info.value


@pytest.mark.parametrize("cell", ["1_0", "2_000", "١٠", "1\u00a0"])
def test_a_number_pythons_float_reads_but_the_csv_reader_does_not_is_named_not_read(tmp_path, cell):
    """`1_0` is not 10: refused naming its row and column, as any other cell that is not a number (the reader
    refused it; Python's float() took it, so locating the reader's error found nothing and named no row)."""
    frame = _frame(5000)
    frame.loc[4206, "q_mvar_bus7"] = cell  # row 4207, past the reader's first block of rows
    path = tmp_path / "loads.csv"
    frame.to_csv(path, index=False)
    assert path.stat().st_size * 4206 / 5000 > CSV_BLOCK_BYTES
    error = _refused(path)
    assert (error.row, error.column) == (4207, "q_mvar_bus7"), error
    assert error.message == f"{cell!r} is not a number" and error.expected == "a finite number"


def test_a_cell_longer_than_the_reader_takes_at_once_is_named_by_row_and_column(tmp_path):
    """A 20 MiB cell: the reader refuses its row (longer than the block it reads at a time) naming neither."""
    path = tmp_path / "loads.csv"
    frame = _frame(40)
    frame.to_csv(path, index=False)
    lines = path.read_bytes().split(b"\n")
    cells = lines[31].split(b",")  # data row 31
    cells[FEATURES.index("p_mw_bus12")] = b"1" * (20 << 20)
    lines[31] = b",".join(cells)
    path.write_bytes(b"\n".join(lines))
    error = _refused(path)
    assert (error.row, error.column) == (31, "p_mw_bus12"), error
    assert error.message.startswith(f"a value of {20 << 20} bytes") and f"{CSV_BLOCK_BYTES} bytes" in error.message
    assert error.expected == "a finite number"


def test_a_long_cell_the_reader_takes_is_quoted_shortly(tmp_path):
    frame = _frame(10)
    frame.loc[4, "p_mw_bus3"] = "x" * (2 << 20)  # within the block the reader takes: its own error, located
    path = tmp_path / "loads.csv"
    frame.to_csv(path, index=False)
    error = _refused(path)
    assert (error.row, error.column) == (5, "p_mw_bus3") and len(str(error)) < 200, str(error)[:300]
    assert error.message == f"'{'x' * 40}'... ({2 << 20} characters) is not a number"


def test_a_parquet_file_whose_row_counts_disagree_is_refused_naming_both(tmp_path):
    """Its first row group states 650 of the 700 rows its pages hold: read, 50 rows were dropped silently."""
    table = pa.Table.from_pandas(_frame(1000).astype(float), preserve_index=False)
    path = tmp_path / "loads.parquet"
    pq.write_table(table, path, row_group_size=700, write_statistics=False)
    data = path.read_bytes()
    data = footer_field(data, 700, 650, len(FEATURES))  # the group's rows (after its column chunks' values)
    data = footer_field(data, 1000, 950, 0)  # and the file's: they agree with the groups' sum
    path.write_bytes(data)
    assert pq.ParquetFile(path).read().num_rows == 950
    error = _refused(path, "parquet")
    assert error.column == FEATURES[0] and "row group 0 states 650 rows" in error.message, error
    assert "700 values" in error.message and "row counts agree" in error.expected


@pytest.mark.parametrize("blank", [" ", "\t", "\u00a0"])
def test_a_header_name_with_blanks_around_it_is_refused_naming_it(tmp_path, blank):
    """`p_mw_bus5 ` matched the feature once stripped, and was another column to the reader: a 500 (ValueError)."""
    path = tmp_path / "loads.csv"
    frame = _frame(20).rename(columns={"p_mw_bus5": f"p_mw_bus5{blank}"})
    frame.to_csv(path, index=False)
    error = _refused(path)
    assert error.column == f"p_mw_bus5{blank}" and "header column 4" in error.message, error
    assert error.expected == "'p_mw_bus5', without blanks around it"


def test_a_column_without_a_name_is_refused_naming_its_position(tmp_path):
    """A trailing comma in the header and a 65th cell in every row: its values were read by nobody, silently."""
    path = tmp_path / "loads.csv"
    lines = _frame(20).to_csv(index=False).splitlines()
    path.write_text("\n".join([lines[0] + ","] + [line + ",99" for line in lines[1:]]) + "\n")
    error = _refused(path)
    assert error.message == f"header column {len(FEATURES) + 1} has no name" and error.row is None, error


@pytest.mark.parametrize("cells", [60, 65])
def test_a_row_of_too_few_or_too_many_cells_is_named_by_its_row(tmp_path, cells):
    path = tmp_path / "loads.csv"
    lines = _frame(5000).to_csv(index=False).splitlines()
    row = lines[4321].split(",")
    lines[4321] = ",".join(row[:cells] if cells < len(row) else row + ["0.1"] * (cells - len(row)))
    path.write_text("\n".join(lines) + "\n")
    error = _refused(path)
    assert error.row == 4321 and error.message == f"{cells} cells where the header names {len(FEATURES)} columns"

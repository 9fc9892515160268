"""service.engine.profile_table: a study's time series from a CSV or Parquet table, read under bounds."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gridsim
from gridsim.scenarios import Classes
from service.engine.errors import TooLarge
from service.engine.load_table import InputError
from service.engine.profile_table import column_limit, read, time_series, wanted_columns

NET = gridsim.network("ieee33")
CLASSES = Classes.of_buses(NET, {"H0-A": [2, 3], "G1-A": [18]})
WANTED = wanted_columns(NET, CLASSES, ["PV9"])


def _write(tmp_path, frame: pd.DataFrame, kind: str) -> str:
    path = tmp_path / f"profiles.{kind}"
    if kind == "csv":
        frame.to_csv(path, index=False)
    else:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    return path


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_simbench_table_reads_the_columns_the_study_uses(tmp_path, kind):
    frame = pd.DataFrame(
        {
            "time": ["01.01.2016 00:00", "01.01.2016 00:15", "01.01.2016 00:30"],
            "H0-A_pload": [0.5, 1.0, 1.5],
            "H0-A_qload": [0.4, 0.8, 1.2],
            "L2-A_pload": [9.0, 9.0, 9.0],  # no class of this study: never decoded, listed
            "PV9": [0.0, 0.5, 1.0],  # a DER follows it
            "load_bus18": [1.0, 2.0, 3.0],
            "load": [1.0, 1.0, 0.5],
        }
    )
    table = read(_write(tmp_path, frame, kind), None, WANTED, max_rows=10, max_columns=column_limit(NET))
    assert table.timestamps[0] == "01.01.2016 00:00" and table.ignored == ("L2-A_pload",)
    assert set(table.columns) == {"H0-A_pload", "H0-A_qload", "PV9", "load_bus18", "load"}
    series = time_series(table, NET, 0.25)
    assert series.load.shape == (3, NET.n_load) and series.pv.shape == (3,)
    at18 = NET.load_buses.index(18)
    np.testing.assert_allclose(series.load[:, at18], [1.0, 2.0, 1.5])  # its own column x the overall one
    np.testing.assert_allclose(series.load[:, 0], [1.0, 1.0, 0.5])
    assert set(series.profiles) == {"H0-A_pload", "H0-A_qload", "PV9"}


def test_bad_cells_are_named_by_row_and_column(tmp_path):
    def refused(frame, kind="csv"):
        with pytest.raises(InputError) as info:
            read(_write(tmp_path, frame, kind), None, WANTED, max_rows=10, max_columns=column_limit(NET))
        return info.value

    error = refused(pd.DataFrame({"time": ["a", "b"], "PV9": [0.5, 101.0]}))
    assert (error.row, error.column) == (2, "PV9") and "outside [-1, 100]" in error.message
    error = refused(pd.DataFrame({"time": ["a", "b"], "PV9": ["0.5", "sunny"]}))
    assert (error.row, error.column) == (2, "PV9") and "'sunny' is not a number" in error.message
    error = refused(pd.DataFrame({"step": ["a"], "PV9": [0.5]}))
    assert error.column == "time" and "no time column" in error.message
    error = refused(pd.DataFrame({"time": ["a", ""], "PV9": [0.5, 0.5]}), "parquet")
    assert (error.row, error.column) == (2, "time")
    error = refused(
        pd.DataFrame({"time": pd.date_range("2026-01-01", periods=2, freq="h"), "PV9": [1.0, 1.0]}), "parquet"
    )
    assert error.column == "time" and "write a datetime column as text" in error.expected


def test_numbers_label_steps_and_limits_hold_before_decoding(tmp_path):
    frame = pd.DataFrame({"timestamp": [0, 1, 2], "PV9": [0.1, 0.2, 0.3]})
    assert read(_write(tmp_path, frame, "parquet"), None, WANTED, 10, 10).timestamps == ("0", "1", "2")
    with pytest.raises(TooLarge, match="declares 3 rows"):  # from the Parquet footer, nothing decoded
        read(_write(tmp_path, frame, "parquet"), None, WANTED, 2, 10)
    with pytest.raises(TooLarge, match="more than 2 rows"):
        read(_write(tmp_path, frame, "csv"), None, WANTED, 2, 10)
    wide = pd.DataFrame({"time": ["a"], **{f"load_bus{b}": [1.0] for b in NET.load_buses[:5]}})
    with pytest.raises(TooLarge, match="5 profile columns"):
        read(_write(tmp_path, wide, "csv"), None, WANTED, 10, 4)
    sink = io.BytesIO(b"time,PV9,PV9\na,1,1\n")
    path = tmp_path / "twice.csv"
    path.write_bytes(sink.getvalue())
    with pytest.raises(InputError, match="more than once"):
        read(path, None, WANTED, 10, 10)
    fake = tmp_path / "fake.parquet"
    fake.write_bytes(b"time,PV9\na,1\n")
    with pytest.raises(InputError, match="not a Parquet file"):
        read(fake, "fake.parquet", WANTED, 10, 10)


def test_a_dictionary_label_bomb_is_refused_from_its_dictionary(tmp_path):
    """One 4 kB time label in a Parquet dictionary page, indexed by every row: refused naming the time column's
    first row before it is copied into each (the label check used to run on the expanded strings)."""
    rows = 20_000
    labels = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array(["t" * 4096]))
    path = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"time": labels, "PV9": np.ones(rows)}), path, compression="zstd", use_dictionary=True)
    assert path.stat().st_size < 40_000  # against 80 MB decoded plainly
    with pytest.raises(InputError) as refused:
        read(path, "bomb.parquet", WANTED, rows, column_limit(NET))
    assert (refused.value.row, refused.value.column) == (1, "time") and "longer than" in refused.value.message


def test_a_number_the_csv_reader_refuses_is_named_never_read_as_another(tmp_path):
    """`1_0` (Python's float() reads 10) is refused naming its row and column like any cell not a number."""
    frame = pd.DataFrame({"time": [f"t{i}" for i in range(5)], "PV9": ["0.5", "0.5", "0.5", "1_0", "0.5"]})
    with pytest.raises(InputError) as refused:
        read(_write(tmp_path, frame, "csv"), None, WANTED, max_rows=10, max_columns=column_limit(NET))
    assert (refused.value.row, refused.value.column) == (4, "PV9") and "'1_0' is not a number" in refused.value.message


@pytest.mark.parametrize("column", ["time", "PV9"])
def test_a_20_mib_label_or_cell_is_named_by_its_row_and_column(tmp_path, column):
    """Longer than the block the CSV reader takes at once: it refuses the row naming neither row nor column."""
    frame = pd.DataFrame({"time": [f"t{i}" for i in range(6)], "PV9": [0.5] * 6, "load": [1.0] * 6})
    frame[column] = frame[column].astype(object)
    frame.loc[4, column] = "7" * (20 << 20)
    with pytest.raises(InputError) as refused:
        read(_write(tmp_path, frame, "csv"), None, WANTED, max_rows=10, max_columns=column_limit(NET))
    assert (refused.value.row, refused.value.column) == (5, column), refused.value
    assert refused.value.message.startswith(f"a value of {20 << 20} bytes")
    assert ("label" in refused.value.expected) == (column == "time"), refused.value.expected


@pytest.mark.parametrize("name", [" load", "load\u00a0", "load\t"])
def test_a_header_name_with_blanks_around_it_is_refused_naming_it(tmp_path, name):
    """` load` was `load` to the header check and no column to the reader (a 500: ArrowKeyError)."""
    path = tmp_path / "profiles.csv"
    pd.DataFrame({"time": ["a", "b"], name: [1.0, 0.5], "PV9": [0.0, 0.5]}).to_csv(path, index=False)
    with pytest.raises(InputError) as refused:
        read(path, None, WANTED, max_rows=10, max_columns=column_limit(NET))
    assert refused.value.column == name and "'load', without blanks" in refused.value.expected


def test_a_short_row_is_named_by_its_row(tmp_path):
    path = tmp_path / "profiles.csv"
    path.write_text("time,load,PV9\na,1,0\nb,1\nc,1,0\n")
    with pytest.raises(InputError) as refused:
        read(path, None, WANTED, max_rows=10, max_columns=column_limit(NET))
    assert refused.value.row == 2 and "2 cells where the header names 3 columns" in refused.value.message


def test_each_column_kind_keeps_the_json_fields_range_and_a_stray_per_bus_column_is_named(tmp_path):
    """User trial: `load` = -1 passed in a file (consumption turned into generation) where JSON refuses it, and
    load_bus99 on IEEE 33 was only listed as ignored; an empty Parquet table was "type null is not numeric"."""

    def refused(frame, kind="csv"):
        with pytest.raises(InputError) as info:
            read(_write(tmp_path, frame, kind), None, WANTED, max_rows=10, max_columns=column_limit(NET))
        return info.value

    for column in ("load", "load_bus18"):
        error = refused(pd.DataFrame({"time": ["a", "b"], column: [1.0, -1.0]}))
        assert (error.row, error.column) == (2, column) and "within [0, 100]" in error.expected, error
    night = pd.DataFrame({"time": ["a", "b"], "pv": [-0.01, 1.0], "pv_bus18": [1.0, -0.5], "PV9": [-0.2, 1.0]})
    table = read(_write(tmp_path, night, "csv"), None, WANTED, 10, column_limit(NET))  # generation may dip below 0
    assert table.columns["pv_bus18"][1] == -0.5
    for column in ("load_bus99", "pv_bus1", "load_bus018"):
        error = refused(pd.DataFrame({"time": ["a"], column: [2.0], "load": [1.0]}))
        assert error.column == column and "names no load bus" in error.message and "2, 3, 4" in error.expected
    empty = pd.DataFrame({"time": pd.Series([], dtype=object), "load": pd.Series([], dtype=float)})
    for kind in ("csv", "parquet"):
        assert refused(empty, kind).message == "the table has no data rows"


def test_a_class_the_request_defines_needs_a_column_when_the_table_names_profiles(tmp_path):
    from service.engine.profile_table import check_class_columns

    frame = pd.DataFrame({"time": ["a"], "H0-A": [0.5], "hmoes": [1.0], "PV9": [0.3], "load": [1.0]})
    table = read(_write(tmp_path, frame, "csv"), None, WANTED, 10, column_limit(NET))
    assert table.ignored == ("hmoes",)
    with pytest.raises(InputError) as refused:
        check_class_columns(table, ["H0-A", "G1-A"], ["PV9"])
    assert refused.value.column == "G1-A" and "no column for class 'G1-A'" in refused.value.message
    assert "'G1-A_pload'" in refused.value.expected and "hmoes" in refused.value.message
    check_class_columns(table, ["H0-A"], ["PV9"])  # every class has its column
    flat = read(_write(tmp_path, frame[["time", "PV9", "load"]], "csv"), None, WANTED, 10, column_limit(NET))
    check_class_columns(flat, ["H0-A", "G1-A"], ["PV9"])  # no class profile at all (the DER's PV9 aside): x1 meant

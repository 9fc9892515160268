"""service.jobs.csv_cells: a result's text cells a spreadsheet would run as formulas, quoted in CSV only."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.csv as pcsv

from service.jobs.csv_cells import safe_batch, safe_table


def test_text_cells_starting_a_formula_are_quoted_and_numbers_stay_numbers():
    names = ['=HYPERLINK("http://x","y")', "+1", "-2", "@SUM(1)", "\tx", "\rx", "plain", "a=b", None]
    table = pa.table(
        {
            "scenario": pa.array(names, pa.string()),
            "bus_name": pa.array(["=1+1"] * len(names), pa.string()).dictionary_encode(),
            "p_mw": pa.array([-0.5] * len(names)),
            "year": pa.array([-1] * len(names), pa.int64()),
        }
    )
    safe = safe_table(table)
    assert safe.column("scenario").to_pylist() == [
        "'=HYPERLINK(\"http://x\",\"y\")", "'+1", "'-2", "'@SUM(1)", "'\tx", "'\rx", "plain", "a=b", None,
    ]  # fmt: skip
    assert set(safe.column("bus_name").to_pylist()) == {"'=1+1"}
    assert safe.column("p_mw").equals(table.column("p_mw")) and safe.column("year").equals(table.column("year"))
    batch = safe_batch(table.to_batches()[0])
    assert batch.column(0).to_pylist() == safe.column("scenario").to_pylist()
    text = io.BytesIO()
    pcsv.write_csv(safe, text)
    assert ",-0.5,-1" in text.getvalue().decode()  # numbers written as numbers

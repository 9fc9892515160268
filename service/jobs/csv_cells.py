"""Text cells made safe for a spreadsheet before a result is written as CSV (formula injection).

Why: a study's scenario name, a step label or an uploaded network's bus name is the caller's text, written
into the CSV a planner opens in a spreadsheet; a cell starting with = + - @ (or a tab or carriage return) is
read there as a formula (`=HYPERLINK(...)`). Such a text cell gets a leading single quote, as OWASP advises;
numeric columns are never touched (a negative load stays a number), and Parquet carries the text as it is.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

FORMULA_START = r"^([=+\-@\t\r])"  # the first characters a spreadsheet reads as the start of a formula


def _safe_column(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    kind = column.type
    if pa.types.is_dictionary(kind) and (
        pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)
    ):
        column = column.cast(kind.value_type)
        kind = kind.value_type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return column
    return pc.replace_substring_regex(column, pattern=FORMULA_START, replacement=r"'\1")


def safe_table(table: pa.Table) -> pa.Table:
    """`table` with every text cell that a spreadsheet would read as a formula prefixed with a single quote."""
    return pa.table([_safe_column(column) for column in table.columns], names=table.column_names)


def safe_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """`safe_table` for one record batch."""
    return pa.RecordBatch.from_arrays([_safe_column(column) for column in batch.columns], names=batch.schema.names)

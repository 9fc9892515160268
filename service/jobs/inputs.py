"""Uploaded CSV / Parquet files -> the job's input: Parquet with one row group per chunk.

Validation streams the file in row batches (bounded memory whatever its size) and stops at the
first bad cell, naming its row (1-based, header excluded) and column; a load outside the range JSON
requests get is such a cell. Rows are counted before they are written: a Parquet file declaring more
than the job's row limit is refused from its footer (service.engine.parquet_limits, which also bounds
what its pages decompress to), a CSV at the first batch past the limit, so nothing past it is ever
written. A UTF-8 byte-order mark before a CSV header is allowed (spreadsheet exports). The canonical input has the
model's feature columns in card order as float64, written so that row group i is chunk i, which is
what lets a resumed worker read exactly the chunk it needs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from service.engine import parquet_limits
from service.engine.errors import TooLarge
from service.engine.load_table import (
    HEADER_READ_BYTES,
    InputError,
    as_load,
    check_columns,
    csv_batches,
    csv_header_names,
    locate_csv_error,
)
from service.jobs.results import WRITE_OPTIONS

CSV_BLOCK_BYTES = 4 << 20  # and a row longer than this is refused, named by its longest cell
MAX_ROWS_SETTING = "GRIDPFN_JOB_MAX_ROWS"
PARQUET_MAGIC = b"PAR1"


def detect_format(path: Path, filename: str | None = None) -> str:
    """'parquet' by magic bytes (or name), 'csv' otherwise."""
    with open(path, "rb") as handle:
        if handle.read(4) == PARQUET_MAGIC:
            return "parquet"
    if filename and filename.lower().endswith((".parquet", ".pq")):
        raise InputError("the file is named .parquet but is not a Parquet file", "a Parquet or CSV file")
    return "csv"


class ChunkWriter:
    """Writes float64 feature batches (then any `labels` columns) so that every row group holds exactly
    `chunk_rows` rows."""

    def __init__(self, path: Path, features: Sequence[str], chunk_rows: int, labels: Sequence[pa.Field] = ()) -> None:
        self.schema = pa.schema([(f, pa.float64()) for f in features] + list(labels))
        self.path, self.tmp, self.chunk_rows = path, path.with_suffix(".tmp"), chunk_rows
        self.writer = pq.ParquetWriter(self.tmp, self.schema, **WRITE_OPTIONS)
        self.pending: list[pa.Table] = []
        self.pending_rows = self.rows = 0

    def write(self, columns: Sequence[Any]) -> None:
        table = pa.Table.from_arrays(
            [pa.array(c, type=field.type) for c, field in zip(columns, self.schema, strict=True)], schema=self.schema
        )
        self.pending.append(table)
        self.pending_rows += table.num_rows
        self.rows += table.num_rows
        while self.pending_rows >= self.chunk_rows:
            self._flush(self.chunk_rows)

    def _flush(self, n: int) -> None:
        table = pa.concat_tables(self.pending)
        self.writer.write_table(table.slice(0, n), row_group_size=n)
        rest = table.slice(n)
        self.pending, self.pending_rows = ([rest] if rest.num_rows else []), rest.num_rows

    def close(self) -> int:
        if self.pending_rows:
            self._flush(self.pending_rows)
        self.writer.close()
        os.replace(self.tmp, self.path)
        return self.rows

    def abort(self) -> None:
        self.writer.close()
        self.tmp.unlink(missing_ok=True)


def _parquet_batches(path: Path, features: Sequence[str], batch_rows: int, max_rows: int) -> Iterator[pa.RecordBatch]:
    """Checked at once (footer, page headers, columns); the batches then come a row group at a time."""
    source = parquet_limits.open_file(path, features, max_rows, MAX_ROWS_SETTING)  # no pre-buffering: no read-ahead
    check_columns(source.schema_arrow.names, features)
    return parquet_limits.batches(source, features, batch_rows)


def _csv_header(path: Path, features: Sequence[str]) -> None:
    with open(path, "rb") as handle:  # a bounded read: a file of one endless line is refused from its start
        names = csv_header_names(handle.read(HEADER_READ_BYTES))  # a BOM is no name
    if not names:
        raise InputError("the file is empty", "a header row with the feature names, then data rows")
    check_columns(names, features)


def _open_csv(path: Path, features: Sequence[str], as_text: bool = False):
    kind = pa.string() if as_text else pa.float64()
    return pcsv.open_csv(
        path,
        read_options=pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
        convert_options=pcsv.ConvertOptions(column_types={f: kind for f in features}, strings_can_be_null=True),
    )


def _locate_csv_type_error(path: Path, features: Sequence[str], exc: Exception) -> InputError:
    """The first row (and its first column) holding something not a number, or a row too long to read."""
    located = locate_csv_error(
        lambda: _open_csv(path, features, as_text=True), features, path, CSV_BLOCK_BYTES, lambda _: "a finite number"
    )
    return located or InputError(
        f"unreadable CSV: {str(exc)[:200]}", "a comma-separated file with a header row and numbers"
    )


def _csv_batches(path: Path, features: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """The header checked at once; the rows then come a block at a time."""
    _csv_header(path, features)
    return _csv_rows(path, features)


def _csv_rows(path: Path, features: Sequence[str]) -> Iterator[pa.RecordBatch]:
    return csv_batches(lambda: _open_csv(path, features), lambda exc: _locate_csv_type_error(path, features, exc))


def ingest(path: Path, fmt: str, features: Sequence[str], dest: Path, chunk_rows: int, max_rows: int) -> int:
    """Validate `path` (csv/parquet) and write the canonical input to `dest`; returns the row count."""
    batches = (
        _parquet_batches(path, features, chunk_rows, max_rows) if fmt == "parquet" else _csv_batches(path, features)
    )  # a footer or header refused here writes nothing
    writer: ChunkWriter | None = None
    try:
        offset = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if offset + batch.num_rows > max_rows:  # before the write: no row past the limit reaches the disk
                raise TooLarge("file", f"more than {max_rows} rows", f"at most {max_rows} rows ({MAX_ROWS_SETTING})")
            names = batch.schema.names
            columns = [as_load(batch.column(names.index(f)), f, offset) for f in features]
            writer = writer or ChunkWriter(dest, features, chunk_rows)  # the input file once a batch passed
            writer.write(columns)
            offset += batch.num_rows
        if writer is None:
            raise InputError("the file has no data rows", "at least one row of load vectors")
        return writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise


def write_simulated(x_chunks: Iterator[np.ndarray], features: Sequence[str], dest: Path, chunk_rows: int) -> int:
    """Canonical input from generated (m, d) load-vector chunks."""
    writer = ChunkWriter(dest, features, chunk_rows)
    try:
        for x in x_chunks:
            writer.write([x[:, j] for j in range(x.shape[1])])
        return writer.close()
    except BaseException:
        writer.abort()
        raise


# A study's row labels (gridsim.scenarios.Block): which scenario, year and time step each row is
STUDY_LABELS = (pa.field("scenario", pa.string()), pa.field("year", pa.int64()), pa.field("timestamp", pa.string()))


def write_study(blocks: Iterator[Any], features: Sequence[str], dest: Path, chunk_rows: int) -> int:
    """Canonical input from a study's blocks (gridsim.scenarios.Block; the caller counted the rows and its
    iterator checks each block): the load features, then each row's scenario, year and timestamp (null
    without a time series). An error from the iterator leaves nothing behind."""
    writer = ChunkWriter(dest, features, chunk_rows, STUDY_LABELS)
    try:
        for block in blocks:
            n = len(block.rows)
            stamps = block.timestamps if block.timestamps is not None else [None] * n
            writer.write([*block.rows.T, [block.scenario] * n, np.full(n, block.year, dtype=np.int64), stamps])
        return writer.close()
    except BaseException:
        writer.abort()
        raise


def write_hosting(loads: np.ndarray, profile: np.ndarray, features: Sequence[str], dest: Path) -> int:
    """A hosting-capacity job's input: its load rows and each row's PV output share (`pv_profile`), one row
    group (every chunk reads all of them)."""
    writer = ChunkWriter(dest, features, max(1, len(loads)), (pa.field("pv_profile", pa.float64()),))
    try:
        writer.write([*np.asarray(loads, dtype=np.float64).T, np.asarray(profile, dtype=np.float64)])
        return writer.close()
    except BaseException:
        writer.abort()
        raise

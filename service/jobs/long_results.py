"""A batch job's result in the long layout: one row per (input row, bus), as pandapower's res_bus is a row
per bus, converted from the wide result.parquet a slice at a time and streamed out as Parquet or CSV.

Why: the wide file is a column per statistic and bus (`mean_vm_pu_bus18`, `p_outside_vm_pu_bus18`, ...:
224 columns on IEEE 33 with three quantiles); a planner filters, groups and plots by bus, which wants the
bus as a column and its name beside it. The conversion is a reshape and nothing else: every value of the
wide file is in the long one, bit for bit, nulls kept (a ground-truth power flow that did not converge):

- `row` (the input row, 0-based: the wide file's position; batch inputs carry only load columns, so there
  is no timestamp or scenario column to carry over), `bus`, `bus_name`;
- per statistic and bus (`mean`, `std`, `q<level>`..., `p_outside`, `true`, `err`): its value at that bus;
- per row (`converged`, `extrapolation`, `extrapolated`): repeated on each of the row's buses;
- per bus, from the result's metadata (`metered`, `readings`, `determined`: which buses the context read);
- the row's load at the bus (`p_mw`, `q_mvar`, from the input columns; null at a bus without a load).

Memory is bounded by one wide row group being read (a job chunk) and one slice of `SLICE_ROWS` input rows,
wide and long, whatever the file's size; the Parquet written has one row group per slice.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from service.jobs.csv_cells import safe_batch
from service.jobs.results import METADATA_KEY

log = logging.getLogger(__name__)

SLICE_ROWS = 4096  # input rows per long slice: 131,072 long rows on IEEE 33
PER_BUS_METADATA = ("metered", "readings", "determined", "tap_steps", "reading_offsets")
LOADS = (("p_mw", "p_mw_bus"), ("q_mvar", "q_mvar_bus"))  # long column, the input feature's prefix
# repetitive columns take Parquet's dictionary encoding; the statistics are floats that never repeat
DICTIONARY_COLUMNS = ("bus", "bus_name", *PER_BUS_METADATA)


class LayoutError(RuntimeError):
    """The wide file does not have the columns its job's spec says it has (a service fault, never the caller's)."""


@dataclass(frozen=True)
class WideLayout:
    """Which columns of a wide result are what: per (statistic, bus), per row, the inputs, and the per-bus
    facts in its metadata."""

    outputs: tuple[str, ...]  # vm_pu_busK, in the result's bus order
    buses: tuple[int, ...]
    bus_names: tuple[str, ...]
    stats: tuple[str, ...]  # mean, std, q0.05, ..., p_outside, true, err: column `<stat>_<output>`
    per_row: tuple[str, ...]  # converged, extrapolation, extrapolated
    loads: tuple[tuple[str, tuple[str | None, ...]], ...]  # (p_mw, the feature at each bus or None), (q_mvar, ...)
    per_bus: tuple[tuple[str, tuple[object, ...]], ...]  # (metered, a value per bus), ...
    metadata: bytes | None  # the wide file's `gridpfn` metadata, kept on the long one

    @classmethod
    def of(
        cls,
        schema: pa.Schema,
        features: Sequence[str],
        outputs: Sequence[str],
        buses: Sequence[int],
        bus_names: Sequence[str],
    ) -> WideLayout:
        """The layout of a result whose job had these input `features` and `outputs` (one per bus in `buses`)."""
        if not (len(outputs) == len(buses) == len(bus_names)) or not outputs:
            raise LayoutError(f"{len(outputs)} outputs for {len(buses)} buses and {len(bus_names)} names")
        names = list(schema.names)
        suffix = f"_{outputs[0]}"
        stats = [name[: -len(suffix)] for name in names if name.endswith(suffix) and name not in features]
        per_stat = {f"{stat}_{output}" for stat in stats for output in outputs}
        missing = sorted(per_stat - set(names))
        if missing:
            raise LayoutError(f"the result lacks {missing[:3]}: not one column per bus for each statistic")
        per_row = [name for name in names if name not in per_stat and name not in features]
        have = set(features)
        loads = tuple(
            (column, tuple(f"{prefix}{bus}" if f"{prefix}{bus}" in have else None for bus in buses))
            for column, prefix in LOADS
        )
        metadata = (schema.metadata or {}).get(METADATA_KEY)
        about = orjson.loads(metadata) if metadata else {}
        per_bus = tuple((key, tuple(about[key])) for key in PER_BUS_METADATA if key in about)
        for key, values in per_bus:
            if len(values) != len(outputs):
                raise LayoutError(f"metadata {key} has {len(values)} values for {len(outputs)} buses")
        return cls(
            tuple(outputs), tuple(buses), tuple(bus_names), tuple(stats), tuple(per_row), loads, per_bus, metadata
        )

    def columns(self, stat: str) -> list[str]:
        """The wide columns of one statistic, in bus order."""
        return [f"{stat}_{output}" for output in self.outputs]

    def long_schema(self, wide: pa.Schema) -> pa.Schema:
        """The long layout's columns and types (each statistic and per-row column keeps its wide type)."""
        fields = [pa.field("row", pa.int64()), pa.field("bus", pa.int64()), pa.field("bus_name", pa.string())]
        fields += [pa.field(stat, wide.field(self.columns(stat)[0]).type) for stat in self.stats]
        fields += [pa.field(name, wide.field(name).type) for name in self.per_row]
        fields += [pa.field(key, pa.array(values).type) for key, values in self.per_bus]
        fields += [pa.field(column, pa.float64()) for column, _ in self.loads]
        schema = pa.schema(fields)
        return schema if self.metadata is None else schema.with_metadata({METADATA_KEY: self.metadata})

    def long_batch(self, wide: pa.RecordBatch, first_row: int, schema: pa.Schema) -> pa.RecordBatch:
        """`wide`'s rows (the first being input row `first_row`) as n x buses long rows, row-major."""
        n, k = wide.num_rows, len(self.outputs)
        row_of = pa.array(np.repeat(np.arange(n, dtype=np.int64), k))  # each long row's wide row
        bus_of = pa.array(np.tile(np.arange(k, dtype=np.int64), n))  # and its bus
        # the (stat, bus) columns laid end to end are bus-major; this picks them row-major
        interleave = pa.array((np.arange(n, dtype=np.int64)[:, None] + np.arange(k, dtype=np.int64) * n).ravel())
        arrays = [pa.array(np.repeat(np.arange(first_row, first_row + n, dtype=np.int64), k))]
        arrays += [pa.array(self.buses, pa.int64()).take(bus_of), pa.array(self.bus_names, pa.string()).take(bus_of)]
        for stat in self.stats:
            arrays.append(pa.concat_arrays([wide.column(name) for name in self.columns(stat)]).take(interleave))
        arrays += [wide.column(name).take(row_of) for name in self.per_row]
        arrays += [pa.array(values).take(bus_of) for _, values in self.per_bus]
        for _, features in self.loads:
            at_bus = [pa.nulls(n, pa.float64()) if f is None else wide.column(f).cast(pa.float64()) for f in features]
            arrays.append(pa.concat_arrays(at_bus).take(interleave))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def long_batches(source: pq.ParquetFile, layout: WideLayout, slice_rows: int | None = None) -> Iterator[pa.RecordBatch]:
    """The whole result in the long layout, `slice_rows` (SLICE_ROWS) input rows at a time, in input order."""
    schema = layout.long_schema(source.schema_arrow)
    first = 0
    for wide in wide_slices(source, slice_rows or SLICE_ROWS):
        yield layout.long_batch(wide, first, schema)
        first += wide.num_rows
    if first != source.metadata.num_rows:
        raise LayoutError(f"converted {first} rows of {source.metadata.num_rows}")


def wide_slices(source: pq.ParquetFile, slice_rows: int, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The wide file's rows in order, `slice_rows` at most at a time, one row group read at a time
    (ParquetFile.iter_batches kept every row group it had read: the whole file by the end)."""
    for group in range(source.num_row_groups):
        yield from source.read_row_group(group, columns=columns).to_batches(max_chunksize=slice_rows)


class _Sink(io.RawIOBase):
    """A write-only file that keeps what it was given until `take` (what ParquetWriter wrote so far)."""

    def __init__(self) -> None:
        self.blocks: list[bytes] = []
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:
        block = bytes(data)
        self.blocks.append(block)
        self.position += len(block)
        return len(block)

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        out, self.blocks = b"".join(self.blocks), []
        return out


def parquet_stream(path: Path, layout: WideLayout, slice_rows: int | None = None) -> Iterator[bytes]:
    """The long layout as one Parquet file, yielded as its row groups are written (footer last)."""
    source = pq.ParquetFile(path)
    schema = layout.long_schema(source.schema_arrow)
    sink = _Sink()
    present = [name for name in DICTIONARY_COLUMNS if name in schema.names]
    writer = pq.ParquetWriter(sink, schema, compression="none", use_dictionary=present)
    rows = 0
    try:
        for batch in long_batches(source, layout, slice_rows):
            writer.write_batch(batch, row_group_size=batch.num_rows)
            rows += batch.num_rows
            yield sink.take()
    finally:
        writer.close()
    yield sink.take()
    log.info("long result of %s: %d rows x buses streamed as Parquet", path.parent.name, rows)


def csv_stream(path: Path, layout: WideLayout, slice_rows: int | None = None) -> Iterator[bytes]:
    """The long layout as CSV text, a slice at a time (header once); text cells a spreadsheet would read as a
    formula quoted (service.jobs.csv_cells)."""
    source = pq.ParquetFile(path)
    rows = 0
    for batch in long_batches(source, layout, slice_rows):
        buffer = io.BytesIO()
        pcsv.write_csv(safe_batch(batch), buffer, write_options=pcsv.WriteOptions(include_header=rows == 0))
        rows += batch.num_rows
        yield buffer.getvalue()
    log.info("long result of %s: %d rows x buses streamed as CSV", path.parent.name, rows)

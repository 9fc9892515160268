"""Result files: one Parquet part per chunk, assembled in chunk order into result.parquet
(or streamed into it as the chunks finish, when one process ran the whole job).

Parts are written to a temporary name of their own (several workers may write the same part: a chunk
retaken from a worker presumed dead) and renamed, so a part either exists whole or not at all;
rewriting a part gives the same bytes. Assembly copies part by part (one chunk in memory), checks each
part's row count against the spec, and is itself atomic, so the result holds every input row exactly
once, in input order.
"""

from __future__ import annotations

import io
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from service.jobs.csv_cells import safe_table
from service.jobs.jobspec import JobSpec, result_columns

if TYPE_CHECKING:  # the engine imports torch: a Dask coordinator, which only assembles, does without
    from service.engine.answers import Answer, OffContext
    from service.engine.sparse import Metering

# Float columns barely compress and never repeat: no compression and no dictionary encoding (a
# dictionary attempt per float column made writing several times slower: bench/results/service-notes.md).
# Column statistics stay on, so query engines can skip row groups (say, where p_outside is 0).
WRITE_OPTIONS = dict(compression="none", use_dictionary=False)
METADATA_KEY = b"gridpfn"  # the result's schema metadata: the context's per-bus `metered`, `readings` (`determined`)


class JobFiles:
    """Paths of one job under the shared jobs directory."""

    def __init__(self, root: Path, job_id: str) -> None:
        self.dir = Path(root) / job_id
        self.input, self.context = self.dir / "input.parquet", self.dir / "context.bin"
        self.network = self.dir / "network.json"  # an uploaded network's pandapower JSON (built-ins: absent)
        self.parts, self.result = self.dir / "parts", self.dir / "result.parquet"
        self.solved = self.dir / "voltages"  # network-fit's voltages per chunk, from the power-flow check
        self.streaming = self.dir / "result.streaming"  # a StreamedResult in progress (or left by a killed worker)

    def part(self, index: int) -> Path:
        return self.parts / f"part-{index:06d}.parquet"

    def voltages(self, index: int) -> Path:
        """network-fit's voltages at chunk `index`'s rows, left by the power-flow check (service.jobs.voltages)."""
        return self.solved / f"chunk-{index:06d}.npz"

    def remove_parts(self) -> None:
        """The parts and what the chunks were to read (the job ended, or its result is published)."""
        shutil.rmtree(self.parts, ignore_errors=True)
        shutil.rmtree(self.solved, ignore_errors=True)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def chunk_table(
    spec: JobSpec,
    inputs: pa.Table,
    answer: Answer,
    placed: OffContext,
    truth: tuple[np.ndarray, np.ndarray] | None = None,
    metering: Metering | None = None,
) -> pa.Table:
    """Input columns then the statistics in `result_columns` order (voltages float64, the rest float32,
    as in an Arrow answer: service.engine.answers.Statistics), then each row's extrapolation measure;
    which buses the context read (`metering`) in the schema metadata `gridpfn`, as in Arrow answers."""
    from service.engine.answers import Statistics, on_the_wire

    arrays = list(inputs.columns)
    arrays += [pa.array(column) for _, column in Statistics.of(answer, spec.quantiles).columns(spec.outputs)]
    if spec.with_ground_truth:
        vm, converged = truth
        missing = ~converged
        for values, voltage in ((vm, True), (answer.mean - vm, False)):
            columns = on_the_wire(np.asarray(values).T, voltage)
            arrays += [pa.array(column, mask=missing) for column in columns]
        arrays.append(pa.array(converged))
    arrays += [pa.array(column) for _, column in placed.columns()]
    table = pa.Table.from_arrays(arrays, names=result_columns(spec))
    if metering is None:
        return table
    about = {"context_id": spec.context_id, "outputs": list(spec.outputs), **metering.json()}
    return table.replace_schema_metadata({METADATA_KEY: orjson.dumps(about)})


def hosting_table(spec: JobSpec, first: int, result: Any) -> pa.Table:
    """A hosting-capacity chunk's rows, candidates `first`.. of the job (as POST /v1/hosting-capacity answers
    them, kW): bus, bus_name, hosting_capacity_kw, at_max_kw, risk_without_pv, curve_kw, curve_risk."""
    assert spec.hosting is not None
    n = len(result.capacity_mw)
    return pa.table(
        {
            "bus": pa.array(spec.hosting.buses[first : first + n], pa.int64()),
            "bus_name": pa.array(spec.hosting.bus_names[first : first + n], pa.string()),
            "hosting_capacity_kw": pa.array(result.capacity_mw * 1e3),
            "at_max_kw": pa.array(result.at_max),
            "risk_without_pv": pa.array(result.base_risk),
            "curve_kw": pa.array(list(result.curve_mw * 1e3), pa.list_(pa.float64())),
            "curve_risk": pa.array(list(result.curve_risk), pa.list_(pa.float64())),
        }
    )


def _private_tmp(path: Path) -> Path:
    """A temporary name beside `path` that no other writer (thread, process or host) uses."""
    return path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}.tmp")


def write_whole(path: Path, write: Callable[[Path], None]) -> None:
    """`path` in a directory of the job's, whole or not at all (`write` fills a temporary name, then it is
    renamed). The job's directory is not recreated: a deleted job's chunk fails (FileNotFoundError) instead
    of leaving a directory behind."""
    path.parent.mkdir(exist_ok=True)
    tmp = _private_tmp(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_part(files: JobFiles, index: int, table: pa.Table) -> None:
    """Part `index`, whole or not at all."""
    write_whole(files.part(index), lambda tmp: pq.write_table(table, tmp, **WRITE_OPTIONS))


class StreamedResult:
    """result.parquet written chunk by chunk as they finish, when one process runs a job from its start.

    Parts are still written: a worker that dies leaves them to the next one, which assembles. This
    only spares the final assembly pass (a re-read and re-write of every part) when nothing was
    interrupted; anything else aborts it and `assemble` does the work.
    """

    def __init__(self, files: JobFiles) -> None:
        self.files, self.tmp = files, files.streaming
        self.writer: pq.ParquetWriter | None = None
        self.next_index = self.rows = 0

    def append(self, index: int, table: pa.Table) -> None:
        if index != self.next_index:
            raise RuntimeError(f"chunk {index} streamed out of order (expected {self.next_index})")
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.tmp, table.schema, **WRITE_OPTIONS)
        self.writer.write_table(table, row_group_size=table.num_rows)
        self.next_index, self.rows = index + 1, self.rows + table.num_rows

    def commit(self, spec: JobSpec) -> bool:
        """Publish result.parquet if every chunk came through here with the right rows; else abort, False."""
        if self.writer is None or self.next_index != spec.chunks or self.rows != spec.rows:
            self.abort()
            return False
        self.writer.close()
        self.writer = None
        os.replace(self.tmp, self.files.result)
        self.files.remove_parts()
        return True

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        self.tmp.unlink(missing_ok=True)


def assemble(files: JobFiles, spec: JobSpec) -> int:
    """Concatenate the parts in order into result.parquet; returns the row count. A result already
    published whole (an assembler that died before recording the job done) is kept as it is."""
    if files.result.exists() and not files.parts.exists():
        rows = int(pq.ParquetFile(files.result).metadata.num_rows)
        if rows == spec.rows:
            files.streaming.unlink(missing_ok=True)
            return rows
    tmp = _private_tmp(files.result)
    writer, total = None, 0
    try:
        for index in range(spec.chunks):
            table = pq.read_table(files.part(index))
            if table.num_rows != spec.chunk_size(index):
                raise RuntimeError(f"part {index} has {table.num_rows} rows, expected {spec.chunk_size(index)}")
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema, **WRITE_OPTIONS)
            writer.write_table(table, row_group_size=table.num_rows)
            total += table.num_rows
    except BaseException:
        if writer is not None:
            writer.close()
        tmp.unlink(missing_ok=True)
        raise
    if writer is not None:
        writer.close()
    if total != spec.rows:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"assembled {total} rows, the input has {spec.rows}")
    os.replace(tmp, files.result)
    files.remove_parts()
    files.streaming.unlink(missing_ok=True)  # what a killed worker was streaming
    return total


def csv_stream(path: Path) -> Iterator[bytes]:
    """result.parquet as CSV text, one row group at a time (header once); text cells a spreadsheet would read as
    a formula quoted (service.jobs.csv_cells)."""
    source = pq.ParquetFile(path)
    for index in range(source.num_row_groups):
        buffer = io.BytesIO()
        table = safe_table(source.read_row_group(index))
        pcsv.write_csv(table, buffer, write_options=pcsv.WriteOptions(include_header=index == 0))
        yield buffer.getvalue()

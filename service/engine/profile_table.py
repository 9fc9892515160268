"""A study's time series uploaded as a table (CSV or Parquet, SimBench-style), read under bounds.

Why its own reader: a profile table is a column of step labels beside columns of factors named by what they
shape, and a SimBench year carries many profiles a given network never uses. So the header is read first
(bounded: service.engine.load_table, service.engine.parquet_limits), only the columns the study uses are
decoded, and rows are counted as they stream, against the study's own row limit (GRIDPFN_MAX_STUDY_ROWS):
memory is bounded by what a study may expand to, never by what the file claims. A bad cell is refused
naming its row (1-based, header excluded) and column.

Columns (any order; others are reported as ignored, never decoded):
- `time` (or `timestamp`, `timestamps`): the steps' labels, text of at most 64 characters (numbers: their text);
- `load`, `pv`: the consumption factor and generation output share of every bus per step;
- `load_bus<k>`, `pv_bus<k>`: the same for load bus k alone (times `load` / `pv` when both are given);
- a profile per name: a customer class's (`H0-A`: its P and Q; SimBench's `H0-A_pload`, `H0-A_qload`: apart;
  a generation class's `PV5`), or one a DER names (`der[].profile`).
Each factor within its kind's range, as a JSON time series' (service.engine.factor_ranges): `load` and
`load_bus<k>` within [0, 100], the rest within [-1, 100] (generation may dip below 0 at night). A per-bus
column naming no load bus is refused, naming it and the load buses (it would be ignored silently).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from gridsim.network import Network
from gridsim.scenarios import P_SUFFIX, Q_SUFFIX, Classes, TimeSeries
from service.engine import parquet_limits
from service.engine.errors import TooLarge
from service.engine.factor_ranges import PER_BUS_COLUMN, column_range
from service.engine.load_table import (
    HEADER_READ_BYTES,
    MAX_COLUMNS,
    InputError,
    as_float,
    csv_batches,
    csv_header_names,
    locate_csv_error,
    plain_text,
    too_many_columns,
    within,
)

TIME_COLUMNS = ("time", "timestamp", "timestamps")
MAX_LABEL = 64  # characters of a step's label, as a JSON time series' timestamps
LABEL_EXPECTED = f"a step's label: text of 1 to {MAX_LABEL} characters"
EXTRA_COLUMNS = 64  # columns read beyond one per load bus and kind: overall factors and class profiles
ROWS_SETTING = "GRIDPFN_MAX_STUDY_ROWS"
CSV_BLOCK_BYTES = 4 << 20  # and a row longer than this is refused, named by its longest cell
PARQUET_MAGIC = b"PAR1"
BUSES_SHOWN = 40  # load bus numbers an error lists


@dataclass(frozen=True)
class ProfileFile:
    """An uploaded table on disk, and the name the client gave it (a .parquet name must be Parquet)."""

    path: Path
    filename: str | None


@dataclass(frozen=True)
class ProfileTable:
    """The steps' labels, the used columns' factors (steps,) each, and the header names left unread."""

    timestamps: tuple[str, ...]
    columns: dict[str, np.ndarray]
    ignored: tuple[str, ...]


def wanted_columns(net: Network, classes: Classes, der_profiles: Sequence[str]) -> set[str]:
    """The column names a study on `net` with `classes` (and DERs following `der_profiles`) reads."""
    names = {"load", "pv", *der_profiles}
    for bus in net.load_buses:
        names.update((f"load_bus{bus}", f"pv_bus{bus}"))
    for name in classes.names:
        names.update((name, name + P_SUFFIX, name + Q_SUFFIX))
    return names


def column_limit(net: Network) -> int:
    """Factor columns a table may have the study read: one per load bus and kind, and EXTRA_COLUMNS more."""
    return net.n_features + EXTRA_COLUMNS


def read(path: Path, filename: str | None, wanted: set[str], max_rows: int, max_columns: int) -> ProfileTable:
    """The table at `path`: its time column and the `wanted` columns it has (InputError naming the row and
    column of the first bad cell; TooLarge past `max_rows` rows or `max_columns` used columns)."""
    parquet = _is_parquet(path, filename)
    names = _parquet_names(path, max_rows) if parquet else _csv_names(path)
    if len(names) > MAX_COLUMNS:
        raise too_many_columns(len(names))
    twice = sorted(name for name, count in Counter(names).items() if count > 1)
    if twice:
        raise InputError(f"column(s) {twice[:5]} appear more than once", "each column once", column=twice[0])
    time = next((name for name in TIME_COLUMNS if name in names), None)
    if time is None:
        raise InputError(
            f"no time column among {names[:5]}{' ...' if len(names) > 5 else ''}",
            "a column named time (or timestamp): the steps' labels, then one column per profile",
            column="time",
        )
    _refuse_stray_per_bus(names, wanted)
    used = [name for name in names if name != time and name in wanted]
    if len(used) > max_columns:
        raise TooLarge(
            "file",
            f"{len(used)} profile columns the study uses",
            f"at most {max_columns} for this network (one per load bus and kind, and {EXTRA_COLUMNS} more)",
        )
    batches = _parquet_batches(path, time, used, max_rows) if parquet else _csv_batches(path, time, used)
    labels: list[str] = []
    chunks: dict[str, list[np.ndarray]] = {name: [] for name in used}
    for batch in batches:
        offset = len(labels)
        if offset + batch.num_rows > max_rows:
            raise TooLarge(
                "file", f"more than {max_rows} rows (time steps)", f"at most {max_rows} rows ({ROWS_SETTING})"
            )
        labels += _labels(batch.column(time), time, offset)
        for name in used:
            chunks[name].append(_factors(batch.column(name), name, offset))
    if not labels:
        raise InputError("the table has no data rows", "a row per time step")
    columns = {name: np.concatenate(parts) for name, parts in chunks.items()}
    ignored = tuple(name for name in names if name != time and name not in wanted)
    return ProfileTable(tuple(labels), columns, ignored)


def _refuse_stray_per_bus(names: Sequence[str], wanted: set[str]) -> None:
    """A `load_bus<k>` / `pv_bus<k>` column for a k that is no load bus of the network is refused naming it and
    the load buses (left unread it was a typo passing silently, as bus_load_scale's "99" is refused in JSON)."""
    stray = [name for name in names if PER_BUS_COLUMN.fullmatch(name) and name not in wanted]
    if not stray:
        return
    buses = sorted({int(m.group(2)) for name in wanted if (m := PER_BUS_COLUMN.fullmatch(name)) is not None})
    shown = f"{buses[:BUSES_SHOWN]}{' ...' if len(buses) > BUSES_SHOWN else ''}"
    more = f" ({len(stray)} such columns: {stray[:5]}{' ...' if len(stray) > 5 else ''})" if len(stray) > 1 else ""
    raise InputError(
        f"column {stray[0]!r} names no load bus of this network{more}",
        f"load_bus<k> / pv_bus<k> for a load bus k (bus number, no leading zeros), one of {shown}",
        column=stray[0],
    )


def classes_without_profile(defined: Sequence[str], profiles: Sequence[str]) -> list[str]:
    """The classes among `defined` that none of the `profiles` names (`<class>`, `<class>_pload`, `_qload`)."""
    given = set(profiles)
    return [name for name in defined if not {name, name + P_SUFFIX, name + Q_SUFFIX} & given]


def check_class_columns(table: ProfileTable, defined: Sequence[str], followed: Sequence[str] = ()) -> None:
    """When the table names any class profile (a column other than the time, `load`, `pv`, per-bus ones and those
    `followed` by added PV, read or not), every class the request defines (`defined`) needs a column: one without
    ran at x1 silently, and a misspelt one (`hmoes`) was only listed as ignored. InputError naming the first."""
    skip = {*TIME_COLUMNS, "load", "pv", *followed}
    profiles = [n for n in (*table.columns, *table.ignored) if n not in skip and not PER_BUS_COLUMN.fullmatch(n)]
    missing = classes_without_profile(defined, profiles)
    if not profiles or not missing:
        return
    name = missing[0]
    raise InputError(
        f"no column for class {name!r} (defined in the spec's `classes`)"
        + (f", nor for {missing[1:6]}" if len(missing) > 1 else "")
        + f"; the table's profile columns: {sorted(profiles)[:20]}",
        f"a column {name!r} (or {name + P_SUFFIX!r} / {name + Q_SUFFIX!r}) of the class's factors per step "
        "(1 keeps it at its base), or the class left out of `classes`",
        column=name,
    )


def time_series(table: ProfileTable, net: Network, step_hours: float) -> TimeSeries:
    """The study's TimeSeries: overall and per-bus factors combined, every other column a profile."""
    steps = len(table.timestamps)
    load, pv = _factor(table, net, "load", steps), _factor(table, net, "pv", steps)
    reserved = {"load", "pv"} | {f"{kind}_bus{bus}" for bus in net.load_buses for kind in ("load", "pv")}
    profiles = {name: values for name, values in table.columns.items() if name not in reserved}
    return TimeSeries(table.timestamps, load, pv, step_hours, profiles)


def _factor(table: ProfileTable, net: Network, kind: str, steps: int) -> np.ndarray:
    """(steps,) from the `kind` column alone, (steps, n_load) when a bus has its own column."""
    overall = table.columns.get(kind, np.ones(steps))
    per_bus = [(i, table.columns.get(f"{kind}_bus{bus}")) for i, bus in enumerate(net.load_buses)]
    if all(values is None for _, values in per_bus):
        return overall
    out = np.repeat(overall[:, None], net.n_load, axis=1)
    for i, values in per_bus:
        if values is not None:
            out[:, i] *= values
    return out


def _is_parquet(path: Path, filename: str | None) -> bool:
    with open(path, "rb") as handle:
        if handle.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC:
            return True
    if filename and filename.lower().endswith((".parquet", ".pq")):
        raise InputError("the file is named .parquet but is not a Parquet file", "a Parquet or CSV file")
    return False


def _parquet_names(path: Path, max_rows: int) -> list[str]:
    """The header; a table without rows refused as such from its footer (its columns' types are then often null,
    which the type check would refuse as not numeric instead)."""
    source = parquet_limits.open_file(path, [], max_rows, ROWS_SETTING)
    if source.metadata.num_rows == 0:
        raise InputError("the table has no data rows", "a row per time step")
    return list(source.schema_arrow.names)


def _csv_names(path: Path) -> list[str]:
    with open(path, "rb") as handle:  # a bounded read: a file of one endless line is refused from its start
        names = csv_header_names(handle.read(HEADER_READ_BYTES))
    if not names:
        raise InputError("the file is empty", "a header row (time and profile names), then a row per step")
    return names


def _parquet_batches(path: Path, time: str, used: list[str], max_rows: int) -> Iterator[pa.RecordBatch]:
    """Checked at once (footer, page headers, types); the batches then come a row group at a time."""
    try:
        source = parquet_limits.open_file(path, [time, *used], max_rows, ROWS_SETTING)
    except InputError as exc:
        if exc.column == time:
            raise InputError(
                exc.message, "labels as text (ISO 8601) or numbers: write a datetime column as text", column=time
            ) from None
        raise
    return parquet_limits.batches(source, [time, *used], 65536)


def _open_csv(path: Path, time: str, used: list[str], as_text: bool = False) -> pcsv.CSVStreamingReader:
    kind = pa.string() if as_text else pa.float64()
    return pcsv.open_csv(
        path,
        read_options=pcsv.ReadOptions(block_size=CSV_BLOCK_BYTES),
        convert_options=pcsv.ConvertOptions(
            column_types={time: pa.string(), **{name: kind for name in used}},
            include_columns=[time, *used],
            strings_can_be_null=True,
        ),
    )


def _csv_batches(path: Path, time: str, used: list[str]) -> Iterator[pa.RecordBatch]:
    return csv_batches(lambda: _open_csv(path, time, used), lambda exc: _locate_csv_error(path, time, used, exc))


def _locate_csv_error(path: Path, time: str, used: list[str], exc: Exception) -> InputError:
    """The first row (and its first column) holding something not a number, or a row too long to read."""
    located = locate_csv_error(
        lambda: _open_csv(path, time, used, as_text=True),
        used,
        path,
        CSV_BLOCK_BYTES,
        lambda column: _expected(column, time),
    )
    return located or InputError(f"unreadable CSV: {str(exc)[:200]}", "a comma-separated file with a header row")


def _expected(column: str | None, time: str) -> str:
    """What a cell of `column` takes (a label in the time column, a factor in any other)."""
    return LABEL_EXPECTED if column == time else "a factor (a number)"


def _labels(column: pa.ChunkedArray | pa.Array, name: str, offset: int) -> list[str]:
    """The steps' labels: text as it is, numbers as their text; an empty or over-long label is refused."""
    column = plain_text(column, name, offset, 4 * MAX_LABEL)  # a Parquet dictionary: checked before expanded
    if pa.types.is_floating(column.type) or pa.types.is_integer(column.type) or pa.types.is_decimal(column.type):
        values = as_float(column, name, offset)
        return [str(int(v)) if v.is_integer() else repr(float(v)) for v in values]
    labels: list[str] = []
    for i, label in enumerate(column.to_pylist()):
        if not isinstance(label, str) or not label.strip() or len(label) > MAX_LABEL:
            problem = "an empty label" if not isinstance(label, str) or not label.strip() else "a label too long"
            raise InputError(problem, LABEL_EXPECTED, offset + i + 1, name)
        labels.append(label)
    return labels


def _factors(column: pa.ChunkedArray | pa.Array, name: str, offset: int) -> np.ndarray:
    low, high = column_range(name)
    return within(as_float(column, name, offset), low, high, f"a factor within [{low:g}, {high:g}]", name, offset)

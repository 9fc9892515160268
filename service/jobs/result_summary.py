"""A batch job's per-bus risk summary, read from its wide result a slice at a time and fed to the one
summary kernel POST /v1/studies uses (service.engine.bus_summary), so both answer the same question the
same way: per bus the largest and mean P(outside the band), the row where it is largest, the
expected hours outside (rows as a time series of `hours_per_row` each) and the extreme quantiles.

Only the columns the summary needs are read (P(outside), the lowest and the highest quantile asked, the
extrapolation flag): memory is one slice of those, whatever the file's size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from service.engine.bus_summary import BusSummary, BusSummaryAccumulator
from service.jobs.long_results import WideLayout, wide_slices

SLICE_ROWS = 65_536


@dataclass(frozen=True)
class JobSummary:
    """The kernel's per-bus summary, the quantile levels its extremes are of, and the rows beyond the context."""

    buses: BusSummary
    low_level: float | None  # the lowest quantile asked (None: the job asked none)
    high_level: float | None
    extrapolated_rows: int


def quantile_levels(layout: WideLayout) -> dict[str, float]:
    """The result's quantile statistics (`q0.05`, ...) and their levels."""
    levels = {}
    for stat in layout.stats:
        if stat.startswith("q"):
            try:
                levels[stat] = float(stat[1:])
            except ValueError:
                continue  # a statistic named q... that is not a level: not a quantile
    return levels


def _matrix(batch: pa.RecordBatch, names: list[str]) -> np.ndarray:
    """(rows, buses) from one column per bus."""
    return np.column_stack([batch.column(name).to_numpy(zero_copy_only=False) for name in names])


def summarize(
    path: Path, layout: WideLayout, hours_per_row: float | None, group_by: tuple[str, ...] = ()
) -> JobSummary:
    """The summary of every row of the result at `path`; the hours outside per group of rows that share the
    `group_by` columns' values (a study's scenario and year), the largest group's (all rows one group: ())."""
    levels = quantile_levels(layout)
    low = min(levels, key=levels.__getitem__) if levels else None
    high = max(levels, key=levels.__getitem__) if levels else None
    wanted = {
        "p": layout.columns("p_outside") if "p_outside" in layout.stats else [],
        "low": layout.columns(low) if low else [],
        "high": layout.columns(high) if high else [],
    }
    flag = ["extrapolated"] if "extrapolated" in layout.per_row else []
    accumulator = BusSummaryAccumulator(hours_per_row)
    extrapolated = 0
    columns = sorted({c for names in wanted.values() for c in names}) + flag + list(group_by)
    for batch in _batches(path, columns):
        blocks = {key: _matrix(batch, names) if names else None for key, names in wanted.items()}
        groups = list(zip(*(batch.column(name).to_pylist() for name in group_by), strict=True)) if group_by else None
        accumulator.add(blocks["p"], blocks["low"], blocks["high"], groups)
        if flag:
            extrapolated += int(np.count_nonzero(batch.column("extrapolated").to_numpy(zero_copy_only=False)))
    return JobSummary(
        accumulator.result(),
        levels[low] if low else None,
        levels[high] if high else None,
        extrapolated,
    )


def _batches(path: Path, columns: list[str]) -> Iterator[pa.RecordBatch]:
    yield from wide_slices(pq.ParquetFile(path), SLICE_ROWS, columns)


def labels_at(path: Path, rows: np.ndarray, columns: tuple[str, ...]) -> dict[str, list[object]]:
    """The `columns` (a study's scenario, year, timestamp) at each of `rows` (0-based), read from only the
    row groups that hold them."""
    source = pq.ParquetFile(path)
    sizes = [source.metadata.row_group(i).num_rows for i in range(source.num_row_groups)]
    starts = np.cumsum([0] + sizes[:-1])
    wanted = np.asarray(rows, dtype=np.int64)
    groups = np.searchsorted(starts, wanted, side="right") - 1
    found: dict[str, list[object]] = {name: [None] * len(wanted) for name in columns}
    for group in np.unique(groups):
        table = source.read_row_group(int(group), columns=list(columns))
        for i in np.flatnonzero(groups == group):
            for name in columns:
                found[name][i] = table.column(name)[int(wanted[i] - starts[group])].as_py()
    return found

"""What a job is: its immutable spec, its lifecycle states, and the columns of its result."""

from __future__ import annotations

import math
from enum import Enum

from pydantic import BaseModel, ConfigDict


class JobState(str, Enum):  # noqa: UP042 (StrEnum would change str(state) where states are formatted)
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


HOSTING_SOURCE = "hosting-capacity"  # a hosting-capacity job's `source`


class HostingJob(BaseModel):
    """A hosting-capacity study run as a job (models.hosting_capacity): the job's input is the study's load
    rows (read whole by every chunk), its result a row per candidate bus, a chunk a group of candidates."""

    model_config = ConfigDict(frozen=True)

    buses: tuple[int, ...]
    bus_names: tuple[str, ...]
    positions: tuple[int, ...]  # each candidate's P feature position
    upper_pu: float
    alpha: float
    max_mw: float
    curve_points: int
    rows_field: str = "loads"  # what the study's rows were called (loads, load_scales, file): its errors name them


class JobSpec(BaseModel):
    """Everything a worker needs besides the files in the job's directory; fixed at submit."""

    model_config = ConfigDict(frozen=True)

    id: str
    model: str
    model_version: str
    context_id: str
    network: str
    # an uploaded network's bus-number offset (gridsim.feeders.number_offset): its JSON in the job's directory is
    # rebuilt numbered as at submit, so `features`/`outputs` name its buses; None: the JSON reader's own numbering
    # (built-ins, and specs written before it was kept)
    number_offset: int | None = None
    features: tuple[str, ...]
    outputs: tuple[str, ...]
    quantiles: tuple[float, ...] = ()
    voltage_band: tuple[float, float] | None = None
    with_ground_truth: bool = False
    rows: int
    chunk_rows: int
    source: str  # "csv", "parquet", "simulate" or "study"
    # per-row columns carried from the input to the result after the features (a study's scenario, year and
    # timestamp: the summary's groups for the hours outside the band)
    labels: tuple[str, ...] = ()
    hours_per_row: float | None = None  # the hours a row stands for (a study's time step): the summary's default
    hosting: HostingJob | None = None  # a hosting-capacity job: `rows` are its candidate buses
    created_at: float
    owner: str | None = None  # the submitting tenant's tag (service.engine.tenants); None: keys off

    @property
    def chunks(self) -> int:
        return math.ceil(self.rows / self.chunk_rows)

    def chunk_size(self, index: int) -> int:
        return min(self.chunk_rows, self.rows - index * self.chunk_rows)


def quantile_label(level: float) -> str:
    return f"q{float(level)!r}"


def result_columns(spec: JobSpec) -> list[str]:
    """Input features (and the study's row labels), then per statistic one column per bus: mean, std, quantiles, p_outside_band,
    and with ground truth the solved voltage, the error (mean - truth) and the convergence flag; last
    the row's extrapolation measure and flag (service.engine.answers.OffContext)."""
    columns = list(spec.features) + list(spec.labels)
    stats = ["mean", "std"] + [quantile_label(q) for q in spec.quantiles]
    if spec.voltage_band is not None:
        stats.append("p_outside")
    if spec.with_ground_truth:
        stats += ["true", "err"]
    for stat in stats:
        columns += [f"{stat}_{name}" for name in spec.outputs]
    if spec.with_ground_truth:
        columns.append("converged")
    return columns + ["extrapolation", "extrapolated"]

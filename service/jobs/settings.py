"""Batch-job knobs from `GRIDPFN_*` environment variables, beside the service's own Settings.

Kept apart from service.settings so the job machinery can be tuned (and tested with small
chunks and short claim times) without touching the HTTP service's configuration.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic import Field

from service.settings import GridPFNSettings

# Beyond rows x width: the header line or Parquet footer, page headers and per-column statistics.
UPLOAD_FRAMING_BYTES = 64 << 10
COLUMN_FRAMING_BYTES = 1 << 10


class JobSettings(GridPFNSettings):
    """Env var = GRIDPFN_ + upper-case field name (e.g. GRIDPFN_JOBS_DIR)."""

    jobs_dir: Path = Field(
        Path(tempfile.gettempdir()) / "gridpfn-jobs",
        description="job inputs, part files and results; shared by the server and the workers",
    )
    job_chunk_rows: int = Field(16_384, ge=1, description="rows per chunk (one forward pass, one part file)")
    job_max_rows: int = Field(20_000_000, ge=1, description="most rows in one job")
    job_upload_cell_bytes: int = Field(
        25,
        ge=8,
        description="bytes one cell of an uploaded file may take on "
        "average: a float64 written in full with its separator takes at most 25; "
        "sets the upload limit with JOB_MAX_ROWS (upload_limit)",
    )
    job_max_upload_bytes: int | None = Field(
        None,
        ge=1024,
        description="a fixed ceiling on uploaded files below "
        "the one derived from JOB_MAX_ROWS (unset: the derived one alone)",
    )
    job_claim_idle_s: float = Field(
        120.0,
        gt=0,
        description="lease of a chunk: a worker renews the leases it holds every third of this; a chunk whose "
        "worker stopped renewing (died, or cut off from Redis) this long is retaken by another worker",
    )
    job_max_attempts: int = Field(
        5, ge=1, description="times one chunk may be leased (first run and retakes) before its job is failed"
    )
    job_chunk_pause_s: float = Field(
        0.0, ge=0, description="pause between chunks, to leave CPU to interactive traffic on a shared machine"
    )
    job_ttl_s: int = Field(7 * 24 * 3600, ge=60, description="how long job records stay in Redis")
    job_queue: str = Field("gridpfn:jobs", min_length=1, description="Redis key prefix of the job stream and records")
    worker_threads: int | None = Field(
        None,
        ge=1,
        description="threads of `gridpfn worker`: each chunk is cut into "
        "this many blocks run side by side on one torch thread each (unset: the "
        "CPU count)",
    )
    dask_scheduler: str | None = Field(
        None,
        min_length=1,
        description="address of a Dask scheduler (tcp://host:8786, `pip install gridpfn[cluster]`): `gridpfn "
        "worker` then runs no chunk itself but hands the chunks it claims to the cluster's workers, which "
        "must see GRIDPFN_JOBS_DIR and the model directory at the same paths",
    )
    dask_chunks_per_thread: int = Field(
        2, ge=1, description="chunks kept in flight per Dask worker thread, so none waits for its next chunk"
    )

    def upload_limit(self, columns: int) -> int:
        """Largest uploaded file for a network of `columns` load features: JOB_MAX_ROWS rows of
        JOB_UPLOAD_CELL_BYTES per cell, a header, and JOB_MAX_UPLOAD_BYTES when that is lower."""
        derived = self.job_max_rows * (columns * self.job_upload_cell_bytes + 2) + UPLOAD_FRAMING_BYTES
        derived += columns * COLUMN_FRAMING_BYTES
        return derived if self.job_max_upload_bytes is None else min(derived, self.job_max_upload_bytes)

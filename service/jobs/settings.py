"""Batch-job knobs from `GRIDPFN_*` environment variables, beside the service's own Settings.

Kept apart from service.settings so the job machinery can be tuned (and tested with small
chunks and short claim times) without touching the HTTP service's configuration.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class JobSettings(BaseSettings):
    """Env var = GRIDPFN_ + upper-case field name (e.g. GRIDPFN_JOBS_DIR)."""

    model_config = SettingsConfigDict(env_prefix="GRIDPFN_", frozen=True, extra="ignore")

    jobs_dir: Path = Field(Path(tempfile.gettempdir()) / "gridpfn-jobs",
                           description="job inputs, part files and results; shared by the server and the workers")
    job_chunk_rows: int = Field(16_384, ge=1, description="rows per chunk (one forward pass, one part file)")
    job_max_rows: int = Field(20_000_000, ge=1, description="most rows in one job")
    job_max_upload_bytes: int = Field(8 << 30, ge=1024, description="largest uploaded file")
    job_claim_idle_s: float = Field(120.0, gt=0, description="a running job whose worker sent no heartbeat for "
                                    "this long is taken over by another worker; must exceed one chunk's time")
    job_max_attempts: int = Field(5, ge=1, description="times a job may be (re)started before it is failed")
    job_chunk_pause_s: float = Field(0.0, ge=0, description="pause between chunks, to leave CPU to interactive "
                                     "traffic on a shared machine")
    job_ttl_s: int = Field(7 * 24 * 3600, ge=60, description="how long job records stay in Redis")
    job_queue: str = Field("gridpfn:jobs", min_length=1, description="Redis key prefix of the job stream and records")
    worker_threads: int | None = Field(None, ge=1, description="threads of `gridpfn worker`: each chunk is cut into "
                                       "this many blocks run side by side on one torch thread each (unset: the "
                                       "CPU count)")

"""Service configuration from `GRIDPFN_*` environment variables (pydantic-settings).

One frozen object built at start; everything tunable about limits, caches and the store lives here
so operators change behaviour without touching code.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from models.limits import MAX_CONTEXT_ROWS

# models.registry.DEFAULT_ROOT, spelled out so reading settings never imports torch.
_PACKAGE_REGISTRY = Path(__file__).resolve().parents[1] / "models" / "registry"


class GridPFNSettings(BaseSettings):
    """Knobs read from the environment: env var = GRIDPFN_ + upper-case field name, frozen once read,
    other variables ignored. The service's Settings and the batch jobs' JobSettings are both these."""

    model_config = SettingsConfigDict(env_prefix="GRIDPFN_", frozen=True, extra="ignore")


class Settings(GridPFNSettings):
    """Every knob of the HTTP service."""

    model_dir: Path = Field(
        _PACKAGE_REGISTRY,
        description="root of the checkpoint registry (default: the "
        "package's models/registry, wherever the server starts)",
    )
    device: str | None = Field(None, description="torch device for the models (default: cuda when available, else cpu)")
    calibration: bool = Field(
        True,
        description="per-output spread calibration when a context is encoded "
        "(models.calibration: one extra pass over the context; false = intervals as "
        "the network gives them)",
    )
    retain_freed_memory: bool = Field(
        True,
        description="keep memory the models free for the next request "
        "instead of returning it to the OS (models.memory; glibc only): answers take no "
        "page faults once the heap has grown, and the process holds about its peak memory",
    )
    redis_url: str | None = Field(None, description="Redis URL for the context-set store; unset = embedded store")
    api_keys: Annotated[tuple[str, ...], NoDecode] = Field((), description="comma-separated bearer keys for /v1")
    admin_api_key: str | None = Field(
        None,
        repr=False,
        description="a bearer key valid on every route that also "
        "lists, reads, uses, cancels and deletes every key's context sets, batch jobs "
        "and uploaded networks (the other keys each see only their own)",
    )

    max_queries: int = Field(10_000, ge=1, description="most query rows in one /v1/predict or /v1/gp/predict request")
    max_study_rows: int = Field(
        100_000, ge=1, description="most rows a /v1/studies request expands to (a year of 15-minute steps: 35,040)"
    )
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="largest request body accepted")
    max_context_rows: int = Field(
        MAX_CONTEXT_ROWS,
        ge=1,
        description="largest context set stored or sent inline "
        "(default: the largest context the models serve, models.limits)",
    )
    max_simulate: int = Field(1_000, ge=1, description="most power flows in one /v1/simulate or simulated context")
    gp_max_context: int = Field(1_000, ge=1, description="largest context the on-demand exact GP fits")
    gp_max_iter: int | None = Field(
        None, ge=0, description="L-BFGS iterations of the exact GP's hyperparameter fit (unset: models.gp's default)"
    )
    gp_max_queries: int = Field(10_000, ge=1, description="most queries the exact GP answers in one request")
    gp_workers: int = Field(
        1,
        ge=1,
        description="worker processes of the exact GP (service.engine.gp_pool), apart "
        "from the model threads: GP fits never delay model predictions' workers or GIL",
    )
    gp_queue_size: int = Field(2, ge=0, description="GP requests waiting for a GP worker before 429 (Retry-After)")
    gp_timeout_s: float = Field(
        60.0,
        gt=0,
        description="time limit of one GP request in its worker (fit and answer); "
        "past it the worker process is killed and replaced, and the request answered 504",
    )
    gp_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="CPU niceness added to the GP workers, so a busy GP yields the "
        "cores to model predictions (0 = same priority as the server)",
    )

    max_header_bytes: int = Field(
        64 * 1024,
        ge=1024,
        description="largest request head (request line and headers); "
        "beyond it 431 and the connection is closed (service.http.protocol)",
    )
    max_headers: int = Field(100, ge=8, description="most header fields in one request (431 beyond)")
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="a connection whose request head is not complete this long "
        "after it opened or its request began is closed",
    )
    max_connections: int = Field(
        1000,
        ge=1,
        description="concurrent connections and requests one server process takes "
        "(uvicorn's limit_concurrency); beyond them 503",
    )
    max_network_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="largest uploaded network file (POST /v1/networks)"
    )
    upload_memory_mb: int = Field(
        1024,
        ge=64,
        description="address space an uploaded network's reader process may add "
        "(service.engine.upload_sandbox); over it the upload is refused with 413",
    )
    upload_cpu_s: int = Field(10, ge=1, description="CPU seconds an uploaded network's reader process may use")
    upload_timeout_s: float = Field(30.0, gt=0, description="wall-clock limit of reading one uploaded network")
    upload_concurrency: int = Field(
        2,
        ge=0,
        description="uploaded networks that may wait while one is read (one at a "
        "time per server process, each in its own process); more are answered 503 with "
        "Retry-After",
    )

    context_ttl_s: int = Field(24 * 3600, ge=1, description="lifetime of a stored context set")
    context_recheck_s: float = Field(
        1.0,
        ge=0,
        description="how long the in-process copy of a stored context set, or of an uploaded network "
        "rebuilt from the store, is used before the store is asked again whether it still exists: one deleted "
        "or expired in the store (by another replica) stops being answered here within this "
        "time; 0 = ask on every request (a Redis round trip per predict)",
    )
    encoded_cache_size: int = Field(32, ge=1, description="encoded contexts (per model+context) kept in process")
    gp_cache_size: int = Field(8, ge=1, description="fitted GPs (per context) kept in each GP worker process")

    processes: int = Field(
        1,
        ge=1,
        description="server processes sharing the port (`gridpfn serve --processes`); "
        "more than one needs GRIDPFN_REDIS_URL so that every process sees every context set",
    )
    workers: int = Field(2, ge=1, description="threads running model work (per process; the GP has gp_workers)")
    queue_size: int = Field(64, ge=0, description="jobs waiting for a worker before 503")
    batch_window_ms: float = Field(0.5, ge=0, description="how long the micro-batcher collects single queries")
    batch_max_queries: int = Field(64, ge=1, description="query rows that close a micro-batch early")
    hot_routes: bool = Field(
        True,
        description="answer POST /v1/predict and /v1/gp/predict in a lean ASGI layer "
        "(service.http.hot_routes) instead of FastAPI's request machinery; same answers and errors",
    )
    coalesce_writes: bool = Field(
        True,
        description="send a response's header and body writes as one (service.http.protocol, "
        "a subclass of uvicorn's httptools protocol); false = uvicorn's own protocol",
    )
    torch_threads: int | None = Field(
        1,
        ge=1,
        description="torch intra-op threads per process; 1 suits `workers` "
        "threads on a small shared CPU (intra-op spinning contends badly); unset = torch's",
    )
    store_timeout_s: float = Field(1.0, gt=0, description="socket timeout of store operations")

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(key.strip() for key in value.split(",") if key.strip())
        return value

    @model_validator(mode="after")
    def _shared_store(self) -> Settings:
        if self.processes > 1 and not self.redis_url:
            raise ValueError(
                f"processes: {self.processes} server processes need a shared store; set "
                "GRIDPFN_REDIS_URL (the embedded store lives inside one process)"
            )
        return self

    @model_validator(mode="after")
    def _admin_key_apart(self) -> Settings:
        if self.admin_api_key is not None and self.admin_api_key in self.api_keys:
            raise ValueError("admin_api_key: the admin key is also in GRIDPFN_API_KEYS; give the admin its own key")
        return self

    @field_validator("redis_url", "device", "admin_api_key", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value


def is_loopback(host: str) -> bool:
    """True when `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

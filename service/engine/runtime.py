"""One running service's engine, assembled from parts that each do one thing.

- `models`: the registry's models by name and network (lookup),
- `networks`: the built-in and uploaded feeders a request names (resolve),
- `uploads`: the sandbox processes that read and validate uploaded feeders (isolation),
- `contexts`: the context sets in the store, recently used ones in memory (storage),
- `checks`: the configured limits and row shapes (checks),
- `readings`: a context's voltage readings held to its network model's power flow (checks),
- `fits`: encoded contexts kept in process (caches),
- `executor`: the worker pool and the micro-batcher (executors),
- `gp`: the exact GP's own pool of worker processes, apart from the models' (executors).

Built once by the app's lifespan; the HTTP layer reaches it through `request.app.state.runtime`
and hands its flows (service.engine.inference) plain request objects.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from service.engine.caches import Fits
from service.engine.checks import Checks
from service.engine.context_sets import ContextSets
from service.engine.errors import InvalidInput, NotFound
from service.engine.executor import Executor
from service.engine.gp_pool import GPPool
from service.engine.networks import Networks
from service.engine.readings import Readings
from service.engine.store import Store
from service.engine.upload_sandbox import SandboxLimits, UploadSandbox
from service.metrics import Metrics
from service.settings import Settings

log = logging.getLogger(__name__)


class Models:
    """The registry's models by name and network, and the reasons checkpoints were refused."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def known(self, name: str, field: str = "model") -> None:
        """NotFound (naming a refused checkpoint's reason) when no network has a model by that name."""
        if name in self.registry.models or name in self.registry.width_free:  # every request: no list built
            return
        if name not in self.registry.names():
            problem = NotFound("model", name, field, "path" if field == "name" else "body")
            refused = [why for key, why in self.registry.errors.items() if key.split("/")[0] == name]
            if refused:
                problem.detail += f" (checkpoint refused: {refused[0]})"
            raise problem

    def get(self, name: str, network: Any, field: str = "model", version: str | None = None) -> Any:
        """The model `name` for `network` (a gridsim Network); NotFound for an unknown name, InvalidInput
        naming the model, the network, what the model serves and what serves the network otherwise.

        version: that version (pinned; an older one loads on first use) instead of the served one;
        NotFound naming `version` with the versions there are when the model has no such version."""
        from models.registry import ModelNotServed, VersionNotServed

        self.known(name, field)
        try:
            if version is None:
                return self.registry.get(name, network)
            return self.registry.get(name, network, version=version)
        except ModelNotServed as exc:
            raise InvalidInput(
                field,
                str(exc),
                f"a model serving network {exc.network}: {', '.join(exc.models_for) or 'none yet'} (GET /v1/models)",
            ) from None
        except VersionNotServed as exc:
            missing = NotFound("model version", f"{name} {version}", "version", "body")
            missing.detail = f"{exc} (GET /v1/models lists each model's versions under `available`)"
            raise missing from None

    async def choose(self, name: str, network: Any, version: str | None) -> Any:
        """get() for a request: the served model at once, a pinned version off the event loop (its first
        use loads the checkpoint, 0.1-0.2 s on a 2-core CPU, which would stall every other request)."""
        if version is None:
            return self.get(name, network)
        return await asyncio.to_thread(self.get, name, network, "model", version)


@dataclass
class Runtime:
    settings: Settings
    registry: Any
    store: Store
    gp_method: Any
    metrics: Metrics = field(default_factory=Metrics)
    ready: bool = False

    def __post_init__(self) -> None:
        s = self.settings
        self.models = Models(self.registry)
        self.checks = Checks(s)
        self.contexts = ContextSets(self.store, s.context_ttl_s, s.context_recheck_s, s.encoded_cache_size)
        self.executor = Executor(s.workers, s.queue_size, s.batch_window_ms / 1000.0, s.batch_max_queries, self.metrics)
        self.networks = Networks(self.store, s.context_ttl_s, self.executor.run, s.context_recheck_s)
        self.readings = Readings(self.executor.run)
        self.uploads = UploadSandbox(
            SandboxLimits(s.upload_memory_mb * 2**20, s.upload_cpu_s, s.upload_timeout_s, s.max_network_bytes),
            s.upload_concurrency,
        )
        self.fits = Fits(self.executor.run, self.metrics, s.encoded_cache_size, self.executor.ahead)
        self.gp = GPPool(
            self.gp_method,
            s.gp_workers,
            s.gp_queue_size,
            s.gp_timeout_s,
            s.gp_cache_size,
            s.torch_threads,
            s.gp_nice,
            self.metrics,
        )

    async def close(self) -> None:
        self.executor.shutdown()
        await self.uploads.close()
        await asyncio.to_thread(self.gp.shutdown)
        await self.store.close()

"""One running service's engine, assembled from parts that each do one thing.

- `models`: the registry's loaded models by name (lookup),
- `contexts`: the context sets in the store, recently used ones in memory (storage),
- `checks`: the configured limits and row shapes (checks),
- `fits`: encoded contexts and fitted GPs kept in process (caches),
- `executor`: the worker pool and the micro-batcher (executors).

Built once by the app's lifespan; the HTTP layer reaches it through `request.app.state.runtime`
and hands its flows (service.engine.inference) plain request objects.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from service.engine.caches import Fits
from service.engine.checks import Checks
from service.engine.context_sets import ContextSets
from service.engine.errors import NotFound
from service.engine.executor import Executor
from service.engine.store import Store
from service.metrics import Metrics
from service.settings import Settings

log = logging.getLogger(__name__)


class Models:
    """The registry's loaded models by name, and the reasons checkpoints were refused."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def get(self, name: str, field: str = "model") -> Any:
        """The loaded model; NotFound (naming a refused checkpoint's reason) when none is served by that name."""
        loaded = self.registry.models.get(name)
        if loaded is None:
            problem = NotFound("model", name, field, "path" if field == "name" else "body")
            refused = [why for key, why in self.registry.errors.items() if key.split("/")[0] == name]
            if refused:
                problem.detail += f" (checkpoint refused: {refused[0]})"
            raise problem
        return loaded


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
        self.fits = Fits(self.executor.run, self.gp_method, self.metrics, s.encoded_cache_size, s.gp_cache_size)

    async def close(self) -> None:
        self.executor.shutdown()
        await self.store.close()

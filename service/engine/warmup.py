"""Start-up work of the engine: load the registry, and warm every model (and the exact GP) so the
first request pays no first-call costs."""
from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import numpy as np

from service.engine import gridsim_calls
from service.engine.runtime import Runtime
from service.settings import Settings

log = logging.getLogger(__name__)


def load_registry(settings: Settings) -> Any:
    from models.registry import load_registry as load

    try:
        return load(settings.model_dir, device=settings.device, calibrate=settings.calibration)
    except Exception as exc:  # an unusable model dir leaves the service alive but not ready
        log.error("could not load the model registry at %s: %s", settings.model_dir, exc)
        return SimpleNamespace(models={}, errors={"*": f"{type(exc).__name__}: {exc}"})


def warm(rt: Runtime) -> None:
    """One fit + predict per model and one GP fit, so the first request pays no first-call costs."""
    rng = np.random.default_rng(0)
    n_features, n_outputs = rt.checks.n_features, rt.checks.n_outputs
    for name, loaded in list(rt.registry.models.items()):
        sizes = loaded.card.get("context_size") or {}
        n = int(min(max(16, int(sizes.get("min", 1))), int(sizes.get("max", 16))))
        x, y = rng.normal(size=(n, n_features)), 1.0 + 0.01 * rng.normal(size=(n, n_outputs))
        try:
            encoded = loaded.method.fit(x, y)
            for m in (1, 8):
                loaded.method.predict(encoded, rng.normal(size=(m, n_features))).quantile([0.5])
        except Exception as exc:
            log.exception("warm-up of model %s failed; it will not be served", name)
            rt.registry.models.pop(name)
            rt.registry.errors[name] = f"warm-up failed: {type(exc).__name__}: {exc}"
    x, y = rng.normal(size=(16, n_features)), 1.0 + 0.01 * rng.normal(size=(16, n_outputs))
    quick_gp = gp_method(rt.settings, max_iter=1)  # exercises the GP code paths, not its optimiser
    quick_gp.predict(quick_gp.fit(x, y), x[:2])
    # gridsim pulls in pandapower (pandas, scipy, networkx, sympy: ~130k objects); imported here, they
    # are frozen with the rest of start-up instead of making every later full GC pass ~100 ms long
    loads, _, _ = gridsim_calls.simulate_context(SimpleNamespace(n=2, delta=0.1, seed=0, network="ieee33"))
    gridsim_calls.solve(loads, "ieee33")


def gp_method(settings: Settings, max_iter: int | None = None) -> Any:
    from models.gp import ExactGP

    max_iter = settings.gp_max_iter if max_iter is None else max_iter
    return ExactGP(linear_term=False) if max_iter is None else ExactGP(linear_term=False, max_iter=max_iter)

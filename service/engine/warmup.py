"""Start-up work of the engine: load the registry (the newest checkpoint per model and network, and
physics-fit for any network), and warm every served model (and the exact GP) so the first request pays
no first-call costs; describe the built-in networks once, for the network list. Older versions are not
loaded here: a request that pins one (`version`) loads it, with the registry's own warm-up pass, so
start-up time does not grow with the releases kept."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from models.limits import MIN_CONTEXT_ROWS
from service.engine import gridsim_calls, networks
from service.engine.runtime import Runtime
from service.settings import Settings

log = logging.getLogger(__name__)


def one_blas_thread() -> None:
    """numpy's BLAS on one thread for the whole process. The service's parallelism is its worker threads
    (one block each, torch beside them); OpenBLAS's own threads spin while they wait, and a (2250, 64) @
    (64, 64) product in one worker then took ~30 ms instead of ~1 ms beside the other's forward pass."""
    threadpool_limits(limits=1, user_api="blas")


def registry_from(settings: Settings) -> Any:
    """The models the settings name (the server's and the batch worker's one way to load them); raises when
    the model directory cannot be read."""
    from models.registry import load_registry as load

    return load(
        settings.model_dir,
        device=settings.device,
        calibrate=settings.calibration,
        width_free=True,
        max_context=settings.max_context_rows,
        retain_memory=settings.retain_freed_memory,
    )


def load_registry(settings: Settings) -> Any:
    try:
        return registry_from(settings)
    except Exception as exc:  # an unusable model dir leaves the service alive but not ready
        log.error("could not load the model registry at %s: %s", settings.model_dir, exc)
        from models.registry import Registry

        return Registry(errors={"*": f"{type(exc).__name__}: {exc}"})


def _warm_one(loaded: Any, rng: np.random.Generator, base_x: np.ndarray, n_outputs: int) -> None:
    """One fit and two small answers at loads around the network's base ones (a model that runs the
    network's power flow needs loads the feeder can carry)."""
    sizes = loaded.card.get("context_size") or {}
    n = int(min(max(MIN_CONTEXT_ROWS, int(sizes.get("min", 1))), int(sizes.get("max", MIN_CONTEXT_ROWS))))

    def loads(rows: int) -> np.ndarray:
        return base_x * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, size=(rows, base_x.shape[0])))

    encoded = loaded.method.fit(loads(n), 1.0 + 0.01 * rng.normal(size=(n, n_outputs)))
    for m in (1, 8):
        loaded.method.summarize(encoded, loads(m), (0.5,))


def warm(rt: Runtime) -> None:
    """One fit + predict per checkpoint (at its network's widths) and for physics-fit on IEEE 33, and
    one GP fit, so the first request pays no first-call costs."""
    rng = np.random.default_rng(0)
    for name, network in sorted(rt.registry.checkpoints):
        try:
            served = rt.registry.get(name, network)  # as served: widened off the context by the network's power flow
            _warm_one(served, rng, gridsim_calls.built_in_network(network).base_x, len(served.card["outputs"]))
        except Exception as exc:
            log.exception("warm-up of model %s for %s failed; it will not be served", name, network)
            rt.registry.refuse(name, network, f"warm-up failed: {type(exc).__name__}: {exc}")
    ieee33 = gridsim_calls.built_in_network()
    n_features, n_outputs = ieee33.n_features, ieee33.n_outputs
    for name in rt.registry.width_free:
        _warm_one(rt.registry.get(name, ieee33), rng, ieee33.base_x, n_outputs)
    x, y = rng.normal(size=(16, n_features)), 1.0 + 0.01 * rng.normal(size=(16, n_outputs))
    quick_gp = gp_method(rt.settings, max_iter=1)  # exercises the GP code paths, not its optimiser
    quick_gp.predict(quick_gp.fit(x, y), x[:2])
    # gridsim pulls in pandapower (pandas, scipy, networkx, sympy: ~130k objects); imported here, they
    # are frozen with the rest of start-up instead of making every later full GC pass long (bench/results/service-notes.md)
    loads, _, _ = gridsim_calls.simulate_context(SimpleNamespace(n=2, delta=0.1, seed=0), ieee33)
    gridsim_calls.solve(loads, ieee33)
    # the built-ins' descriptions, once: GET /v1/networks then never waits for a worker thread behind model work
    for name in networks.built_in_names():
        networks.built_in(name)


def gp_method(settings: Settings, max_iter: int | None = None) -> Any:
    from models.gp import ExactGP

    max_iter = settings.gp_max_iter if max_iter is None else max_iter
    return ExactGP(linear_term=False) if max_iter is None else ExactGP(linear_term=False, max_iter=max_iter)

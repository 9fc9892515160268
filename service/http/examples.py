"""Request examples shown at /docs, all from gridsim on IEEE 33: its nominal load vector as the
queries and the simulate example's loads, its power flows as the inline contexts.

They are real requests: the simulate example creates a context set whose id the by-id example
carries, and every inline context is a set of converged power flows, so each example runs as shown
(one sparse, with nulls where a bus or load is not metered, for network-fit).
They are built on the first schema request (service.http.openapi), when the server's warm-up has
already built the feeder, never at import.
"""

from __future__ import annotations

import functools

from service.engine.gridsim_calls import DEFAULT_NETWORK, built_in_network

NETWORK = DEFAULT_NETWORK
DEFAULT_MODEL = "tiny-dva"  # named when no served model is known yet
CONTEXT_SIMULATE = {"simulate": {"network": NETWORK, "delta": 0.1, "n": 500, "seed": 0}}
_ASKED = {"quantiles": [0.05, 0.5, 0.95], "voltage_band": [0.95, 1.05]}  # the statistics the examples ask for


@functools.lru_cache(maxsize=1)
def nominal_loads() -> list[float]:
    """The feeder's nominal load vector (P then Q of each load bus, MW / Mvar): gridsim's base loads."""
    return built_in_network(NETWORK).base_x.round(6).tolist()


def _simulated(n: int, seed: int) -> dict[str, list]:
    """An inline context of n real power flows (rounded for a compact example)."""
    import gridsim

    result = gridsim.simulate(n, 0.1, seed, network=NETWORK)
    ok = result.converged
    return {"x": result.x[ok].round(5).tolist(), "y": result.vm_pu[ok].round(6).tolist()}


def _sparse(n: int, seed: int) -> dict[str, list]:
    """An inline context metered sparsely (null: not measured): bus 7 never read, bus 5's P never metered."""
    context = _simulated(n, seed)
    for row in context["y"]:
        row[5] = None
    for row in context["x"]:
        row[3] = None
    return context


@functools.lru_cache(maxsize=1)
def simulated_context_id() -> str:
    """The content-addressed id of CONTEXT_SIMULATE's context set."""
    import gridsim
    from service.engine.context_sets import context_id

    spec = CONTEXT_SIMULATE["simulate"]
    result = gridsim.simulate(spec["n"], spec["delta"], spec["seed"], network=spec["network"])
    return context_id(result.x[result.converged], result.vm_pu[result.converged])


@functools.lru_cache(maxsize=4)
def live(model: str, min_rows: int) -> dict[str, list[dict]]:
    """Examples per request schema for the served registry: its model name, inline contexts of a size
    it accepts, and the id the simulate example really gets."""
    queries = [nominal_loads()]
    small = _simulated(20, seed=2)
    return {
        "PredictRequest": [
            {"model": model, "context_id": simulated_context_id(), "queries": queries, **_ASKED},
            {
                "model": model,
                "context": _simulated(max(min_rows, 8), seed=1),
                "queries": queries,
                **_ASKED,
                "compare_gp": True,
            },
            {"model": "network-fit", "context": _sparse(max(min_rows, 20), seed=3), "queries": queries, **_ASKED},
        ],
        "GPPredictRequest": [
            {"context": small, "queries": queries, "quantiles": [0.05, 0.95], "voltage_band": _ASKED["voltage_band"]}
        ],
        "ContextSetCreate": [CONTEXT_SIMULATE, small],
        "SimulateRequest": [{"network": NETWORK, "loads": queries}],
    }

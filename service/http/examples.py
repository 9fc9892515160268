"""Request examples shown at /docs, all on the IEEE 33-bus feeder (`ieee33`): its nominal load vector as
the queries, its power flows (gridsim) as the contexts.

Each runs as shown on a fresh server: every example that needs a context carries it inline (a set of
converged power flows; one sparse, with nulls where a bus or load is not metered, for network-fit and meter
placement), so none depends on another having run first. The one exception is a batch job, which by design
names a stored context set: its example (service.http.openapi) carries the id the context-set example's
simulate spec gets, and says so.
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
PLANNING_ROWS = 30  # the planning examples' inline context: network-fit's smallest plus room
PV_BUSES = (14, 18, 25, 30, 33)  # the planner's question: 250 kW of PV at each


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
    """The content-addressed id of CONTEXT_SIMULATE's context set (without API keys: with keys, a tenant's
    id mixes in its key, so the batch-job example's id is the one POST /v1/context-sets answered)."""
    import gridsim
    from service.engine.context_sets import context_id

    spec = CONTEXT_SIMULATE["simulate"]
    result = gridsim.simulate(spec["n"], spec["delta"], spec["seed"], network=spec["network"])
    return context_id(result.x[result.converged], result.vm_pu[result.converged])


def batch_job(model: str) -> dict:
    """A batch job on the context set CONTEXT_SIMULATE stores (it must exist: POST /v1/context-sets first)."""
    return {
        "simulate": {"network": NETWORK, "delta": 0.1, "n": 1000, "seed": 0},
        "model": model,
        "context_id": simulated_context_id(),
        "quantiles": [0.05, 0.5, 0.95],
        "voltage_band": [0.95, 1.05],
    }


@functools.lru_cache(maxsize=4)
def live(model: str, min_rows: int) -> dict[str, list[dict]]:
    """Examples per request schema for the served registry: its model name and inline contexts of a size
    it accepts; each runs on its own."""
    queries = [nominal_loads()]
    small = _simulated(20, seed=2)
    planning = _simulated(PLANNING_ROWS, seed=4)
    sparse = _sparse(max(min_rows, 20), seed=3)
    return {
        "PredictRequest": [
            {"model": model, "context": _simulated(max(min_rows, 8), seed=1), "queries": queries, **_ASKED},
            {"model": model, "context": small, "queries": queries, **_ASKED, "compare_gp": True},
            {"model": "network-fit", "context": sparse, "queries": queries, **_ASKED},
        ],
        "GPPredictRequest": [
            {"context": small, "queries": queries, "quantiles": [0.05, 0.95], "voltage_band": _ASKED["voltage_band"]}
        ],
        "ContextSetCreate": [CONTEXT_SIMULATE, small],
        "SimulateRequest": [{"network": NETWORK, "loads": queries}],
        "StudyRequest": [
            {
                "context": planning,
                "scenarios": [
                    {"name": "+40 % with PV", "load_scale": 1.4, "der": [{"bus": b, "kw": 250} for b in PV_BUSES]}
                ],
                "detail": "summary",
            },
            {
                "context": planning,
                "classes": {"homes": list(range(2, 18)), "shops": list(range(18, 34))},
                "scenarios": [
                    {
                        "name": "shops +30 %, growing",
                        "class_scaling": {"shops": 1.3},
                        "growth_rate": 0.02,
                        "years": [0, 10],
                    }
                ],
                "time_series": {
                    "timestamps": ["2026-07-01T12:00", "2026-07-01T18:00"],
                    "profiles": {"homes": [0.6, 1.3], "shops": [1.2, 0.7]},
                    "step_hours": 6.0,
                },
                "detail": "summary",
            },
        ],
        "HostingCapacityRequest": [{"context": planning, "buses": [18, 33], "load_scales": [0.3, 1.0]}],
        "MeterPlacementRequest": [{"context": sparse, "queries": queries, "top": 3}],
    }

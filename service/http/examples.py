"""Request examples shown at /docs, built from the IEEE 33-bus nominal loads (Baran & Wu 1989).

They are real requests: the simulate example creates a context set, the inline example carries a
small context whose voltages follow the feeder's nominal profile scaled with the load.
"""
from __future__ import annotations

import functools

# Nominal (kW, kvar) at buses 2..33.
_KW = [100, 90, 120, 60, 60, 200, 200, 60, 60, 45, 60, 60, 120, 60, 60, 60,
       90, 90, 90, 90, 90, 90, 420, 420, 60, 60, 60, 120, 200, 150, 210, 60]
_KVAR = [60, 40, 80, 30, 20, 100, 100, 20, 20, 30, 35, 35, 80, 10, 20, 20,
         40, 40, 40, 40, 40, 50, 200, 200, 25, 25, 20, 70, 600, 70, 100, 40]
# Approximate nominal |V| p.u. at buses 2..33 (main feeder drops to ~0.913 at bus 18).
_VM = [0.9970, 0.9829, 0.9755, 0.9681, 0.9497, 0.9462, 0.9413, 0.9351, 0.9292, 0.9284, 0.9269, 0.9208,
       0.9185, 0.9171, 0.9157, 0.9137, 0.9131, 0.9965, 0.9929, 0.9922, 0.9916, 0.9794, 0.9727, 0.9694,
       0.9477, 0.9452, 0.9337, 0.9255, 0.9220, 0.9178, 0.9169, 0.9166]

NOMINAL_LOADS = [round(v / 1000, 4) for v in _KW + _KVAR]
# Placeholder in the static examples; /openapi.json shows the id POST /v1/context-sets answers for
# CONTEXT_SIMULATE (content-addressed, computed once with gridsim), so the two examples chain.
EXAMPLE_CONTEXT_ID = "0" * 64


def _scaled(factor: float) -> tuple[list[float], list[float]]:
    x = [round(v * factor, 5) for v in NOMINAL_LOADS]
    y = [round(1.0 - (1.0 - v) * factor, 5) for v in _VM]
    return x, y


_ROWS = [_scaled(0.8 + 0.025 * i) for i in range(17)]
CONTEXT_INLINE = {"x": [x for x, _ in _ROWS], "y": [y for _, y in _ROWS]}

CONTEXT_SIMULATE = {"simulate": {"network": "ieee33", "delta": 0.1, "n": 500, "seed": 0}}
CONTEXT_UPLOAD = CONTEXT_INLINE
PREDICT_BY_ID = {
    "model": "tiny-dva",
    "context_id": EXAMPLE_CONTEXT_ID,
    "queries": [NOMINAL_LOADS],
    "quantiles": [0.05, 0.5, 0.95],
    "voltage_band": [0.95, 1.05],
}
PREDICT_INLINE = {
    "model": "tiny-dva",
    "context": CONTEXT_INLINE,
    "queries": [NOMINAL_LOADS],
    "quantiles": [0.05, 0.5, 0.95],
    "voltage_band": [0.95, 1.05],
    "compare_gp": True,
}
GP_INLINE = {"context": CONTEXT_INLINE, "queries": [NOMINAL_LOADS], "quantiles": [0.05, 0.95],
            "voltage_band": [0.95, 1.05]}
SIMULATE = {"network": "ieee33", "loads": [NOMINAL_LOADS]}


def _simulated(n: int, seed: int) -> tuple[list, list]:
    """n real power flows (rounded for a compact example)."""
    import gridsim

    result = gridsim.simulate(n, 0.1, seed)
    ok = result.converged
    return (result.x[ok].round(5).tolist(), result.vm_pu[ok].round(6).tolist())


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
    """Examples for the served registry: its model name, inline contexts of a size it accepts, and
    the id the simulate example really gets, so every example at /docs runs as shown."""
    x, y = _simulated(max(min_rows, 8), seed=1)
    small_x, small_y = _simulated(20, seed=2)
    by_id = {**PREDICT_BY_ID, "model": model, "context_id": simulated_context_id()}
    inline = {**PREDICT_INLINE, "model": model, "context": {"x": x, "y": y}}
    return {
        "PredictRequest": [by_id, inline],
        "GPPredictRequest": [{**GP_INLINE, "context": {"x": small_x, "y": small_y}}],
        "ContextSetCreate": [CONTEXT_SIMULATE, {"x": small_x, "y": small_y}],
    }

"""The service's calls into gridsim, run in worker threads; ValueError becomes a 422."""
from __future__ import annotations

from typing import Any

import numpy as np

from service.errors import invalid


def simulate_context(spec: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """(x, vm_pu, dropped) for n simulated power flows; non-converged rows are dropped and counted."""
    import gridsim

    try:
        result = gridsim.simulate(spec.n, spec.delta, spec.seed, network=spec.network)
    except ValueError as exc:
        raise invalid("simulate", str(exc), "a valid gridsim scenario spec") from exc
    ok = np.asarray(result.converged, dtype=bool)
    return np.asarray(result.x)[ok], np.asarray(result.vm_pu)[ok], int((~ok).sum())


def solve(loads: np.ndarray, network: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(output names, vm_pu (m, 32), converged (m,)) of AC power flows for the given loads."""
    import gridsim

    try:
        net = gridsim.network(network)
        result = gridsim.solve(loads, network=network)
    except ValueError as exc:
        raise invalid("loads" if "network" not in str(exc) else "network", str(exc),
                      "load vectors in the network's feature order") from exc
    return list(net.output_names), np.asarray(result.vm_pu), np.asarray(result.converged, dtype=bool)

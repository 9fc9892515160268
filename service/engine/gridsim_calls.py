"""The service's calls into gridsim: the served network's description (the one source of the
load-vector and voltage-vector names and sizes), and simulations and power flows, run in worker
threads, whose ValueError becomes an InvalidInput naming the field.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gridsim.network import KNOWN_NETWORKS, Network, network
from service.engine.errors import InvalidInput

# Request rows follow the served models' network (IEEE 33-bus: 64 loads, 32 voltages), so the
# load-vector routes serve the built-in networks of that shape; the list grows from gridsim's as
# row shapes do (issue 9). Every built-in network can be read through GET /v1/networks.
SERVED_NETWORKS: tuple[str, ...] = tuple(name for name in KNOWN_NETWORKS if name == "ieee33")


def served_network(name: str = SERVED_NETWORKS[0]) -> Network:
    """gridsim's description of a served network: feature_names / n_features (P then Q of each load
    bus), output_names / n_outputs (|V| of each non-slack bus)."""
    return network(name)


def simulate_context(spec: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """(x, vm_pu, dropped) for n simulated power flows; non-converged rows are dropped and counted."""
    import gridsim

    try:
        result = gridsim.simulate(spec.n, spec.delta, spec.seed, network=spec.network)
    except ValueError as exc:
        raise InvalidInput("simulate", str(exc), "a valid gridsim scenario spec") from exc
    ok = np.asarray(result.converged, dtype=bool)
    return np.asarray(result.x)[ok], np.asarray(result.vm_pu)[ok], int((~ok).sum())


def solve(loads: np.ndarray, network: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(output names, vm_pu (m, outputs), converged (m,)) of AC power flows for the given loads."""
    import gridsim

    try:
        net = gridsim.network(network)
        result = gridsim.solve(loads, network=network)
    except ValueError as exc:
        raise InvalidInput("loads" if "network" not in str(exc) else "network", str(exc),
                           "load vectors in the network's feature order") from exc
    return list(net.output_names), np.asarray(result.vm_pu), np.asarray(result.converged, dtype=bool)

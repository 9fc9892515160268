"""The service's calls into gridsim: simulations and power flows on a resolved network (a built-in
or an uploaded feeder, service.engine.networks), run in worker threads. Their inputs are checked
before they get here (the request schemas, service.engine.checks), so an exception gridsim raises,
a ValueError included, is a fault of the service (a 500), never blamed on the request. The
network's description (gridsim's `Network`) is the one source of the load-vector and
voltage-vector names and sizes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gridsim.network import KNOWN_NETWORKS, Network, network

DEFAULT_NETWORK = "ieee33"
BUILT_IN_NETWORKS: tuple[str, ...] = KNOWN_NETWORKS


def built_in_network(name: str = DEFAULT_NETWORK) -> Network:
    """gridsim's description of a built-in network: feature_names / n_features (P then Q of each load
    bus), output_names / n_outputs (|V| of each non-slack bus)."""
    return network(name)


def simulate_context(spec: Any, net: Network) -> tuple[np.ndarray, np.ndarray, int]:
    """(x, vm_pu, dropped) for n simulated power flows on `net`; non-converged rows are dropped and counted."""
    import gridsim

    result = gridsim.simulate(spec.n, spec.delta, spec.seed, network=net)
    ok = np.asarray(result.converged, dtype=bool)
    return np.asarray(result.x)[ok], np.asarray(result.vm_pu)[ok], int((~ok).sum())


def solve(loads: np.ndarray, net: Network) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(output names, vm_pu (m, outputs), converged (m,)) of AC power flows for the given loads."""
    import gridsim

    result = gridsim.solve(loads, network=net)
    return list(net.output_names), np.asarray(result.vm_pu), np.asarray(result.converged, dtype=bool)

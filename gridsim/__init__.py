"""gridsim: AC power-flow scenarios for distribution feeders (context sets and ground truth).

Public API: `network(name)` describes a feeder, `simulate(n, delta, seed, ...)` samples and
solves scenarios, `solve(x, ...)` solves given load vectors, `solve_batched` is the vectorised
solver, `ScenarioOptions` the sampling options. Note `gridsim.network` is the function; import
the class from the module: `from gridsim.network import Network`. Networks: the built-ins in
`KNOWN_NETWORKS`, or any radial pandapower net / pandapower JSON / MATPOWER case through
`gridsim.feeders` (`snapshot`, `from_pandapower_json`, `from_matpower`); `simulate` and `solve`
take either a name or a `Network`.
"""

from gridsim.api import SOLVERS, SimulationResult, simulate, solve
from gridsim.batched import solve_batched
from gridsim.network import KNOWN_NETWORKS, Network, network
from gridsim.sampling import ScenarioOptions, sample_loads

__all__ = [
    "KNOWN_NETWORKS",
    "Network",
    "SOLVERS",
    "ScenarioOptions",
    "SimulationResult",
    "network",
    "sample_loads",
    "simulate",
    "solve",
    "solve_batched",
]

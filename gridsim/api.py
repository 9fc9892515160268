"""The entry points: `simulate` (sample + solve) and `solve` (given load vectors).

Both return a `SimulationResult` whose non-converged rows keep their load vector, carry NaN
voltages and converged=False, and are counted in `n_failed`: never dropped, never numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from gridsim.batched import solve_batched
from gridsim.network import Network
from gridsim.network import network as get_network
from gridsim.sampling import ScenarioOptions, check_n, sample_loads

__all__ = ["SimulationResult", "simulate", "solve", "SOLVERS"]

log = logging.getLogger(__name__)

SOLVERS = ("batched", "pandapower")
# Rows handed to the batched solver per call; also the progress-bar granularity.
SOLVE_CHUNK = 65536


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """Load vectors and solved voltages for one batch of scenarios (NaN where not converged)."""

    network: Network
    x: np.ndarray  # (n, 2*n_load) MW / MVAr, feature order
    vm_pu: np.ndarray  # (n, n_outputs): every non-slack bus
    va_degree: np.ndarray  # (n, n_outputs), relative to the slack
    converged: np.ndarray  # (n,) bool
    solver: str

    @property
    def n(self) -> int:
        return len(self.x)

    @property
    def n_failed(self) -> int:
        return int((~self.converged).sum())

    def to_frame(self, angles: bool = False):
        """pandas DataFrame: feature columns, vm_pu_bus* columns (va_degree_bus* if asked), converged."""
        import pandas as pd

        parts = [self.x, self.vm_pu] + ([self.va_degree] if angles else [])
        names = list(self.network.feature_names) + list(self.network.output_names)
        names += list(self.network.angle_names) if angles else []
        frame = pd.DataFrame(np.concatenate(parts, axis=1), columns=names)
        frame["converged"] = self.converged
        return frame


def _check_solver(solver) -> str:
    if solver not in SOLVERS:
        raise ValueError(f"solver: expected one of {list(SOLVERS)}, got {solver!r}")
    return solver


def _check_x(x, net: Network) -> np.ndarray:
    try:
        array = np.array(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"x: expected numbers of shape (n, {net.n_features}), got {type(x).__name__}") from exc
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] != net.n_features or array.shape[0] < 1:
        raise ValueError(
            f"x: expected shape (n, {net.n_features}) with n >= 1 "
            f"[{net.feature_names[0]} .. {net.feature_names[-1]}], got {np.shape(x)}"
        )
    if not np.isfinite(array).all():
        bad = np.argwhere(~np.isfinite(array))[0]
        raise ValueError(
            f"x: expected finite values, got {array[tuple(bad)]} at row {bad[0]} ({net.feature_names[bad[1]]})"
        )
    return array


def _solve_rows(
    net: Network,
    x: np.ndarray,
    solver: str,
    device,
    progress: Callable[[int], None] | None,
    zbus: tuple[torch.Tensor, torch.Tensor] | None = None,
):
    """|V|, angles and convergence per row; `zbus`: the network's (z, w) when the caller keeps them."""
    if solver == "pandapower":
        from gridsim.reference import solve_pandapower

        return solve_pandapower(net, x, progress=progress)
    z, w = zbus if zbus is not None else net.zbus()
    vm = np.empty((len(x), net.n_outputs))
    va = np.empty_like(vm)
    converged = np.empty(len(x), dtype=bool)
    n = net.n_load
    every_bus = net.load_buses == net.output_buses
    at = net.load_positions
    for start in range(0, len(x), SOLVE_CHUNK):
        stop = min(len(x), start + SOLVE_CHUNK)
        # numpy for the conversions: single-threaded, so no OpenMP barriers on a busy machine
        s = np.empty((stop - start, n), dtype=np.complex128)
        np.divide(x[start:stop, :n], net.sn_mva, out=s.real)
        np.divide(x[start:stop, n:], net.sn_mva, out=s.imag)
        if not every_bus:  # buses without load draw nothing
            s_all = np.zeros((stop - start, net.n_outputs), dtype=np.complex128)
            s_all[:, at] = s
            s = s_all
        s_load = torch.from_numpy(s).to(device)
        v, ok, _ = solve_batched(z, w, s_load)
        v = v.cpu().numpy()
        vm[start:stop] = np.abs(v)
        va[start:stop] = np.degrees(np.angle(v))
        converged[start:stop] = ok.cpu().numpy()
        if progress is not None:
            progress(stop - start)
    return vm, va, converged


def solve(
    x,
    network: str | Network = "ieee33",
    solver: str = "batched",
    device: str | torch.device = "cpu",
    progress: Callable[[int], None] | None = None,
) -> SimulationResult:
    """Solve AC power flow for given load vectors x (n, 2*n_load) [P MW then Q MVAr at the load
    buses; IEEE 33: (n, 64), buses 2..33]. `network`: a built-in name or a `Network` (e.g. from
    gridsim.feeders)."""
    net = get_network(network)
    solver = _check_solver(solver)
    x = _check_x(x, net)
    vm, va, converged = _solve_rows(net, x, solver, torch.device(device), progress)
    vm[~converged] = np.nan  # belt and braces: a non-converged row never carries numbers
    va[~converged] = np.nan
    if not converged.all():
        log.warning(
            "%d of %d scenarios did not converge (%s solver); flagged, voltages NaN",
            int((~converged).sum()),
            len(x),
            solver,
        )
    return SimulationResult(network=net, x=x, vm_pu=vm, va_degree=va, converged=converged, solver=solver)


def simulate(
    n: int,
    delta: float,
    seed,
    network: str | Network = "ieee33",
    solver: str = "batched",
    device: str | torch.device = "cpu",
    progress: Callable[[int], None] | None = None,
    **options,
) -> SimulationResult:
    """Sample n scenarios (see gridsim.sampling for delta and **options) and solve them.

    seed: int or numpy.random.Generator; the same seed gives the same scenarios.
    """
    net = get_network(network)
    solver = _check_solver(solver)
    n = check_n(n)
    opts = ScenarioOptions.from_kwargs(**options)
    if isinstance(seed, np.random.Generator):
        rng = seed
    elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0:
        rng = np.random.default_rng(int(seed))
    else:
        raise ValueError(f"seed: expected an integer >= 0 or a numpy.random.Generator, got {seed!r}")
    x = sample_loads(net, n, delta, rng, opts)
    return solve(x, network=net, solver=solver, device=device, progress=progress)


class VoltageModel:
    """The network model's |V| at load rows, as the fits use it (models.network_fit): the batched
    solver with the reduced impedance matrix computed once, NaN rows where the power flow diverges."""

    def __init__(self, network: str | Network):
        self.network = get_network(network)
        self._zbus = self.network.zbus()

    def __call__(self, x: np.ndarray) -> np.ndarray:
        rows = _check_x(x, self.network)
        vm, _, converged = _solve_rows(self.network, rows, "batched", torch.device("cpu"), None, self._zbus)
        vm[~converged] = np.nan
        return vm

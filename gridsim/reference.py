"""Reference solver: pandapower.runpp, one scenario at a time.

Slow (~25 scenarios/s from scratch, up to ~200/s recycling pandapower's model, on this idle
2-core box without numba) but independent of the batched solver, so it is what the batched
results are checked against. Its tolerance is tight (runpp differs from runpp by ~1e-12 p.u.),
so the comparison measures the batched solver's own error (~1e-10 p.u. at its default tol).
"""

from __future__ import annotations

import logging

import numpy as np

from gridsim.network import Network, pandapower_net

__all__ = ["solve_pandapower", "TOLERANCE_MVA"]

log = logging.getLogger(__name__)

TOLERANCE_MVA = 1e-11


def solve_pandapower(network: Network, x: np.ndarray, progress=None, recycle: bool = True):
    """Run pandapower on each row of x (m, 2*n_load) -> (vm_pu, va_degree, converged), voltages
    (m, n_outputs) at the output buses.

    Rows whose Newton-Raphson does not converge get NaN voltages and converged=False.
    `progress`, if given, is called with the number of rows finished after each row.
    `recycle=True` lets pandapower reuse its internal model between rows (only loads change),
    ~7x faster than rebuilding it every time; `recycle=False` is plain `runpp` from scratch.
    """
    import pandapower as pp

    net = pandapower_net(network)
    net.load = net.load.iloc[0:0]  # replace the shipped loads (and sgens) with exactly one per load bus
    net.sgen = net.sgen.iloc[0:0]
    for bus in network.load_buses:
        pp.create_load(net, bus=network.pandapower_bus(bus), p_mw=0.0, q_mvar=0.0)
    out_idx = [network.pandapower_bus(b) for b in network.output_buses]
    n = network.n_load
    rows = x.shape[0]
    vm = np.full((rows, network.n_outputs), np.nan)
    va = np.full((rows, network.n_outputs), np.nan)
    converged = np.zeros(rows, dtype=bool)
    options = dict(tolerance_mva=TOLERANCE_MVA, max_iteration=50, calculate_voltage_angles=True, numba=False)
    if recycle:
        options["recycle"] = dict(trafo=False, gen=False, bus_pq=True)
    for i in range(rows):
        net.load["p_mw"] = x[i, :n]
        net.load["q_mvar"] = x[i, n:]
        try:
            pp.runpp(net, **options)
        except pp.LoadflowNotConverged:
            log.debug("pandapower did not converge on row %d", i)
        else:
            res = net.res_bus.loc[out_idx]
            vm[i], va[i] = res.vm_pu.to_numpy(), res.va_degree.to_numpy()
            converged[i] = bool(np.isfinite(vm[i]).all() and np.isfinite(va[i]).all())
            if not converged[i]:
                vm[i] = va[i] = np.nan
        if progress is not None:
            progress(1)
    return vm, va, converged

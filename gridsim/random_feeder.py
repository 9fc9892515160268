"""Random radial feeders drawn from a seed: feeders no checkpoint was trained on.

A tree grown bus by bus, each new bus hanging off one of the last few (long trunks with short
laterals, as real feeders have), lines of random length and standard type, a load at most buses,
and the base loads scaled so that the deepest bus sits at `min_vm_pu` at base load. The same
(size, seed) always gives the same feeder; as a network name it is `random-<buses>-<seed>`.
"""

from __future__ import annotations

import re

import numpy as np

NAME_PATTERN = re.compile(r"^random-(\d+)-(\d+)$")
MIN_BUSES, MAX_BUSES = 3, 500
# pandapower standard line types: an MV cable and two MV overhead lines
LINE_TYPES = ("NA2XS2Y 1x95 RM/25 12/20 kV", "149-AL1/24-ST1A 10.0", "94-AL1/15-ST1A 10.0")


def parse_name(name: str) -> tuple[int, int] | None:
    """(buses, seed) of a `random-<buses>-<seed>` name, None for any other name."""
    match = NAME_PATTERN.match(name)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def random_feeder(
    n_buses: int, seed: int, min_vm_pu: float = 0.94, vn_kv: float = 20.0, load_share: float = 0.8, branch_back: int = 4
):
    """A radial pandapower net with `n_buses` buses (bus 0 the slack) drawn from `seed`.

    Bus i > 0 hangs off bus i - 1 - r with r ~ geometric, capped at `branch_back` (mostly the
    previous bus: a trunk; sometimes an earlier one: a lateral). A share `load_share` of the
    non-slack buses (at least one) carries a load of random size and power factor 0.9-0.99.
    """
    import pandapower as pp

    if not MIN_BUSES <= n_buses <= MAX_BUSES:
        raise ValueError(f"n_buses: expected {MIN_BUSES}..{MAX_BUSES}, got {n_buses}")
    rng = np.random.default_rng(seed)
    net = pp.create_empty_network(name=f"random-{n_buses}-{seed}", sn_mva=1.0)
    buses = [pp.create_bus(net, vn_kv=vn_kv, name=f"bus {i}") for i in range(n_buses)]
    pp.create_ext_grid(net, buses[0], vm_pu=1.0)
    for i in range(1, n_buses):
        parent = max(0, i - 1 - min(int(rng.geometric(0.6)) - 1, branch_back))
        pp.create_line(
            net,
            buses[parent],
            buses[i],
            length_km=float(rng.uniform(0.1, 1.2)),
            std_type=LINE_TYPES[int(rng.integers(len(LINE_TYPES)))],
        )
    n_loads = max(1, int(round(load_share * (n_buses - 1))))
    for bus in sorted(rng.choice(np.arange(1, n_buses), size=n_loads, replace=False)):
        p = float(rng.uniform(0.05, 0.4)) * min(1.0, 30.0 / n_buses)  # a first guess; rescaled below
        pf = float(rng.uniform(0.9, 0.99))
        pp.create_load(net, buses[int(bus)], p_mw=p, q_mvar=p * np.tan(np.arccos(pf)))
    _scale_to_min_voltage(net, min_vm_pu)
    return net


def _scale_to_min_voltage(net, target: float, rounds: int = 4) -> None:
    """Scale every load so the lowest bus voltage at base load is about `target` (drops are nearly
    linear in the load, so a few rounds of proportional rescaling settle it)."""
    import pandapower as pp

    for _ in range(rounds + 8):
        try:
            pp.runpp(net, numba=False)
        except pp.LoadflowNotConverged:  # far too heavy to start with: halve and try again
            net.load[["p_mw", "q_mvar"]] *= 0.5
            continue
        drop = 1.0 - float(net.res_bus.vm_pu.min())
        if drop <= 0:
            return
        factor = (1.0 - target) / drop
        net.load[["p_mw", "q_mvar"]] *= factor
        if abs(factor - 1.0) < 1e-3:
            return

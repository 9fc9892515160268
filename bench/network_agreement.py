"""Batched solver against pandapower.runpp on every built-in network (issue 15).

Samples N scenarios per network (paper protocol, --delta, --seed), solves them with both, and
prints per network: buses, load buses, outputs, the largest |V| and angle differences, the
lowest voltage, and both solvers' times.

    .venv/bin/python bench/network_agreement.py [--n 100] [--delta 0.5] [--seed 7] [--network NAME ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gridsim  # noqa: E402
from gridsim.sampling import sample_loads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--delta", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--network", nargs="*", default=list(gridsim.KNOWN_NETWORKS))
    args = parser.parse_args()
    print(f"{args.n} scenarios per network, delta {args.delta}, seed {args.seed}")
    print(
        "| network | buses | load buses | outputs | max abs dV (p.u.) | max abs dVa (deg) | min V | batched s | pandapower s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.network:
        net = gridsim.network(name)
        x = sample_loads(net, args.n, args.delta, np.random.default_rng(args.seed))
        start = time.perf_counter()
        batched = gridsim.solve(x, network=name)
        t_batched = time.perf_counter() - start
        start = time.perf_counter()
        reference = gridsim.solve(x, network=name, solver="pandapower")
        t_reference = time.perf_counter() - start
        both = batched.converged & reference.converged
        dv = np.abs(batched.vm_pu[both] - reference.vm_pu[both]).max()
        da = np.abs(batched.va_degree[both] - reference.va_degree[both]).max()
        print(
            f"| {name} | {len(net.bus_numbers)} | {net.n_load} | {net.n_outputs} | {dv:.1e} | {da:.1e} | "
            f"{np.nanmin(batched.vm_pu):.4f} | {t_batched:.2f} | {t_reference:.2f} |"
            + ("" if both.all() else f" ({int((~both).sum())} not converged by one of them)")
        )


if __name__ == "__main__":
    main()

"""Hosting capacity from the surrogate beside a pandapower brute force, same run.

For each grid: a context of 500 load rows with the network model's voltages (mv_oberrhein_sub0: loads
+-30 % around base; SimBench development grids: the year's first 500 15-minute steps), the service's
`network-fit` fitted on it, and a study of load rows (the base loads scaled by each of --scales, PV at
full output: the rows where PV lifts voltages most). Per candidate bus (--candidates, spread along the
feeder), the largest PV (MW) with P(some bus above --upper) <= --alpha on every row
(models.hosting_capacity), against the brute force: bisection on the same rows with pandapower.runpp,
the largest PV with no bus above --upper on any row. Both bisections stop at the same tolerance.
Prints per grid the relative difference per candidate (target: within +-5 %) and the compute of both
(target: the surrogate >= 100x less, fit included).

    .venv/bin/python bench/hosting_capacity.py [--grids mv_oberrhein_sub0 1-LV-rural1--0-sw ...]
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np

from gridsim import simbench_data
from gridsim.api import simulate
from gridsim.feeders import from_pandapower_json
from gridsim.network import Network, network
from gridsim.reference import solve_pandapower
from models.hosting_capacity import HostingCapacityStudy, hosting_capacity
from models.network_fit import method_for

GRIDS = ("mv_oberrhein_sub0", *simbench_data.DEV_GRIDS)


def context_of(name: str, net: Network, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if name in simbench_data.DEV_GRIDS:
        x, y, _ = simbench_data.simbench_year(name, steps=3000)
        return x[:500], y[:500]
    result = simulate(500, 0.3, network=net, seed=rng)
    return result.x, result.vm_pu


def grid(name: str) -> Network:
    """The grid as the service reads it (a SimBench grid as its upload JSON, which pandapower re-reads too)."""
    if name in simbench_data.DEV_GRIDS:
        return from_pandapower_json(simbench_data.simbench_pandapower_json(name), name=name)
    return network(name)


def brute_force(net: Network, study: HostingCapacityStudy) -> tuple[np.ndarray, int]:
    """Per candidate, the largest PV with no bus above the limit on any row: bisection with runpp."""
    capacities, runs = [], 0
    for position in study.candidates:

        def violates(size: float, position: int = int(position)) -> bool:
            nonlocal runs
            rows = study.loads.copy()
            rows[:, position] -= size * study.profile
            vm, _, converged = solve_pandapower(net, rows)
            runs += len(rows)
            return bool((~converged).any() or np.nanmax(vm) > study.upper_pu)

        lo, hi = 0.0, study.max_mw
        if violates(0.0):
            capacities.append(0.0)
            continue
        if not violates(hi):
            capacities.append(hi)
            continue
        while hi - lo > study.tolerance_mw:
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if violates(mid) else (mid, hi)
        capacities.append(lo)
    return np.array(capacities), runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grids", nargs="+", default=list(GRIDS))
    parser.add_argument("--scales", nargs="+", type=float, default=[0.3, 0.6, 1.0])
    parser.add_argument("--candidates", type=int, default=0, help="candidate buses (0: every load bus)")
    parser.add_argument("--upper", type=float, default=1.05)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"hosting capacity, upper limit {args.upper} p.u., alpha {args.alpha}, rows = base loads x {args.scales}")
    print(
        "grid | candidates | median rel. diff | worst rel. diff | within 5 % | surrogate s: fit + study | runpp s | ratio with fit / study alone"
    )
    for name in args.grids:
        rng = np.random.default_rng(args.seed)
        net = grid(name)
        cx, cy = context_of(name, net, rng)
        base = np.concatenate([net.base_p_mw, net.base_q_mvar])
        loads = np.stack([base * s for s in args.scales])
        max_mw = 2.0 * float(np.sum(np.abs(net.base_p_mw)))
        positions = np.flatnonzero(net.base_p_mw >= 0)
        wanted = args.candidates or len(positions)
        candidates = np.sort(rng.choice(positions, size=min(wanted, len(positions)), replace=False))
        study = HostingCapacityStudy(
            loads=loads,
            profile=np.ones(len(loads)),
            candidates=candidates,
            upper_pu=args.upper,
            alpha=args.alpha,
            max_mw=max_mw,
            tolerance_mw=max_mw / 4096,
        )
        t0 = time.perf_counter()
        method = method_for(net)
        fitted = method.fit(cx, cy)
        t1 = time.perf_counter()
        answer = hosting_capacity(method, fitted, study)
        study_s, surrogate_s = time.perf_counter() - t1, time.perf_counter() - t0
        t0 = time.perf_counter()
        truth, runs = brute_force(net, study)
        brute_s = time.perf_counter() - t0
        rel = (answer.capacity_mw - truth) / np.maximum(truth, study.tolerance_mw)
        print(
            f"{name} | {len(candidates)} | {np.median(rel):+.2%} | {rel[np.argmax(np.abs(rel))]:+.2%} | "
            f"{np.mean(np.abs(rel) <= 0.05):.0%} | {surrogate_s - study_s:.2f} + {study_s:.2f} ({answer.rows_asked} rows) | "
            f"{brute_s:.1f} ({runs} runpp) | {brute_s / surrogate_s:.0f}x / {brute_s / study_s:.0f}x"
        )
        for bus, got, want in zip(candidates, answer.capacity_mw, truth, strict=True):
            print(f"    {net.feature_names[bus]}: surrogate {got * 1e3:.1f} kW, pandapower {want * 1e3:.1f} kW")


if __name__ == "__main__":
    main()

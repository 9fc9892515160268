"""Speed of the batched solver vs pandapower.runpp on the same scenarios (issue 2).

Solves N scenarios (delta = 0.5, seed 0) with the batched torch solver, and the first
--pp-sample of them with pandapower (plain runpp from scratch, and runpp recycling its model),
prints scenarios/s for each, the ratios, and the largest |V| difference on the shared sample.

    .venv/bin/python bench/gridsim_speed.py [--n 100000] [--pp-sample 300] [--device cpu]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gridsim  # noqa: E402
from gridsim.network import network as get_network  # noqa: E402
from gridsim.reference import solve_pandapower  # noqa: E402
from gridsim.sampling import sample_loads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--pp-sample", type=int, default=300)
    parser.add_argument("--delta", type=float, default=0.5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=3, help="batched timings: best of this many")
    args = parser.parse_args()

    net = get_network("ieee33")
    x = sample_loads(net, args.n, args.delta, np.random.default_rng(0))
    device = torch.device(args.device)
    print(
        f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}"
    )
    print(
        f"scenarios: {args.n} at delta={args.delta} (IEEE 33-bus, seed 0); "
        f"load average now {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (other jobs share them)"
    )

    z, w = net.zbus()
    s_load = net.loads_to_pu(torch.from_numpy(x)).to(device)
    gridsim.solve_batched(z, w, s_load[:4096])  # warm-up
    rates = {}
    for workers in sorted({1, torch.get_num_threads()}):
        times = []
        for _ in range(args.repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            v, ok, iters = gridsim.solve_batched(z, w, s_load, workers=workers)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0, time.process_time() - c0))
        wall, cpu = min(times)
        rates[workers] = args.n / wall
        label = f"{workers} worker{'s' if workers > 1 else ' '}"
        print(
            f"batched solve_batched, {label}: {rates[workers]:10,.0f} scenarios/s  "
            f"(best of {args.repeats}: {wall:.3f} s wall, {cpu:.3f} s CPU = {args.n / cpu:,.0f} per CPU-second; "
            f"iterations mean "
            f"{iters.float().mean():.2f}, max {int(iters.max())}; converged {int(ok.sum())}/{args.n})"
        )
    rate_core = max(rates.values())

    t0 = time.perf_counter()
    result = gridsim.solve(x, solver="batched", device=device)
    t_api = time.perf_counter() - t0
    rate_api = args.n / t_api
    print(
        f"batched gridsim.solve:          {rate_api:10,.0f} scenarios/s  "
        f"(end to end incl. validation and numpy: {t_api:.3f} s)"
    )

    sample = x[: args.pp_sample]
    timings = {}
    for recycle in (False, True):
        t0 = time.perf_counter()
        vm_pp, _, ok_pp = solve_pandapower(net, sample, recycle=recycle)
        timings[recycle] = time.perf_counter() - t0
        diff = np.abs(vm_pp - result.vm_pu[: args.pp_sample]).max()
        label = "pandapower runpp + recycle:    " if recycle else "pandapower runpp (plain):      "
        print(
            f"{label} {len(sample) / timings[recycle]:10,.1f} scenarios/s  ({len(sample)} scenarios, "
            f"converged {int(ok_pp.sum())}/{len(sample)}, max |dV| vs batched {diff:.2e} p.u.)"
        )
    for recycle in (False, True):
        rate_pp = len(sample) / timings[recycle]
        what = "runpp with recycle" if recycle else "plain runpp"
        print(
            f"ratio vs {what:18s}: solve_batched {rate_core / rate_pp:8,.0f}x   "
            f"gridsim.solve {rate_api / rate_pp:8,.0f}x"
        )
    met = rate_core >= 100_000 and rate_core / (len(sample) / timings[False]) >= 3000
    print(
        f"target >= 100,000 scenarios/s and >= 3000x plain runpp: {'met' if met else 'NOT met'} "
        f"(best solve_batched figure, wall clock, on this machine at this load)"
    )


if __name__ == "__main__":
    main()

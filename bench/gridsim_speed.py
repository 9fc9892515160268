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
    print(f"machine: {os.cpu_count()} CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}")
    print(f"scenarios: {args.n} at delta={args.delta} (IEEE 33-bus, seed 0)")

    z, w = net.zbus()
    s_load = net.loads_to_pu(torch.from_numpy(x)).to(device)
    gridsim.solve_batched(z, w, s_load[:4096])  # warm-up
    core = []
    for _ in range(args.repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        v, ok, iters = gridsim.solve_batched(z, w, s_load)
        if device.type == "cuda":
            torch.cuda.synchronize()
        core.append(time.perf_counter() - t0)
    rate_core = args.n / min(core)
    print(f"batched solve_batched:   {rate_core:12,.0f} scenarios/s  (best of {args.repeats}: {min(core):.3f} s; "
          f"iterations mean {iters.float().mean():.2f}, max {int(iters.max())}; converged {int(ok.sum())}/{args.n})")

    t0 = time.perf_counter()
    result = gridsim.solve(x, solver="batched", device=device)
    t_api = time.perf_counter() - t0
    rate_api = args.n / t_api
    print(f"batched gridsim.solve:   {rate_api:12,.0f} scenarios/s  (end to end incl. validation and numpy: {t_api:.3f} s)")

    sample = x[: args.pp_sample]
    timings = {}
    for recycle in (False, True):
        t0 = time.perf_counter()
        vm_pp, _, ok_pp = solve_pandapower(net, sample, recycle=recycle)
        timings[recycle] = time.perf_counter() - t0
        diff = np.abs(vm_pp - result.vm_pu[: args.pp_sample]).max()
        label = "pandapower runpp+recycle" if recycle else "pandapower runpp:       "
        print(f"{label} {len(sample) / timings[recycle]:12,.1f} scenarios/s  ({len(sample)} scenarios, "
              f"converged {int(ok_pp.sum())}/{len(sample)}, max |dV| vs batched {diff:.2e} p.u.)")
    for recycle in (False, True):
        rate_pp = len(sample) / timings[recycle]
        what = "runpp with recycle" if recycle else "plain runpp"
        print(f"ratio vs {what:18s}: solve_batched {rate_core / rate_pp:8,.0f}x   gridsim.solve {rate_api / rate_pp:8,.0f}x")
    print(f"target: >= 100,000 scenarios/s and >= 3000x plain runpp -> "
          f"{'met' if rate_core >= 100_000 and rate_core / (len(sample) / timings[False]) >= 3000 else 'NOT met'} (solve_batched)")


if __name__ == "__main__":
    main()

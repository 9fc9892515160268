"""Speed per query and bus on every network, side by side in one run (issue 15's speed target).

For each network, the served model for it (its own checkpoint, or physics-fit where it has none)
fits a new 500-row context (encoding and calibration included) and answers 4500 queries
(mean, std, 2.5 % and 97.5 % quantiles); the best of `--repeats` runs, in process, one torch
thread. Per bus and per query-and-bus figures make feeders of different sizes comparable.
Writes bench/results/network-speed.md.

    .venv/bin/python bench/network_speed.py
    .venv/bin/python bench/network_speed.py --networks ieee33 random-200-2027 --repeats 5
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench.report

import gridsim  # noqa: E402
from bench import report  # noqa: E402
from models.physics_fit import NAME as PHYSICS_FIT  # noqa: E402
from models.physics_fit import method_for
from models.registry import DEFAULT_ROOT, load_registry  # noqa: E402

N_CONTEXT, N_QUERIES, DELTA, SEED = 500, 4500, 0.3, 1030
NETWORKS = ("ieee33", "kerber_landnetz_kabel_1", "mv_oberrhein_sub0", "random-200-2027")


def _served(registry, network: str, model: str):
    """(label, method): `model`'s checkpoint for the network, else physics-fit."""
    try:
        loaded = registry.get(model, network)
        return f"{model} {loaded.version}", loaded.method
    except LookupError:  # ModelNotServed: no checkpoint of `model` for this network
        return PHYSICS_FIT, method_for(gridsim.network(network))


def measure(method, x, y, repeats: int) -> tuple[float, float]:
    """Best (fit seconds, predict seconds) over `repeats` cold fits of the context and answers."""
    best_fit = best_predict = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fitted = method.fit(x[:N_CONTEXT], y[:N_CONTEXT])
        t1 = time.perf_counter()
        method.predict(fitted, x[N_CONTEXT:]).summary((0.025, 0.975))
        t2 = time.perf_counter()
        best_fit, best_predict = min(best_fit, t1 - t0), min(best_predict, t2 - t1)
    return best_fit, best_predict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS))
    parser.add_argument("--model", default="transformer-dva-fast", help="checkpoint used where it serves the network")
    parser.add_argument("--registry", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "network-speed.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("pandapower").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    registry = load_registry(args.registry)
    lines = [
        "# Speed per network",
        "",
        f"{report.provenance('bench/network_speed.py')}, 1 thread. A new {N_CONTEXT}-row context (fit: base fit, encoding, calibration) and "
        f"{N_QUERIES} queries (predict: mean, std, two quantiles), delta {DELTA:.0%}, batched-solver data; best of "
        f"{args.repeats}.",
        "",
        "| network | buses (outputs) | model | fit (ms) | fit per bus (ms) | predict (ms) | per query and bus (us) |",
        "|---|---|---|---|---|---|---|",
    ]
    for network in args.networks:
        sim = gridsim.simulate(N_CONTEXT + N_QUERIES, DELTA, SEED, network=network)
        label, method = _served(registry, network, args.model)
        fit_s, predict_s = measure(method, sim.x, sim.vm_pu, args.repeats)
        k = sim.vm_pu.shape[1]
        row = (
            f"| {network} | {k} | {label} | {fit_s * 1e3:.0f} | {fit_s / k * 1e3:.2f} | {predict_s * 1e3:.0f} | "
            f"{predict_s / N_QUERIES / k * 1e6:.2f} |"
        )
        logging.info(row)
        lines.append(row)
    report.write(args.out, lines)


if __name__ == "__main__":
    main()

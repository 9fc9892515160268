"""What the readings check (service/engine/readings.py) costs a worker, in process: a context of rows no power flow
solves (loads far beyond what the feeder carries) and a legitimate one (loads within +-10 % of base, readings
the network model's own plus meter noise 2e-3 p.u.), with the check's blocks (CHECK_BLOCK) and with one block for
the whole context (as before the block stop); then the legitimate context's check split into its power flow (every
row) and its scatter fit (reading_scatter: SCATTER_MAX_ROWS of the rows), best of three.

    .venv/bin/python bench/readings_check_cost.py [--network random-300-2] [--rows 10000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gridsim.api import VoltageModel  # noqa: E402
from gridsim.network import network  # noqa: E402
from service.engine import readings  # noqa: E402
from service.engine.context_sets import ContextSet  # noqa: E402


def seconds(model: VoltageModel, ctx: ContextSet, base_x: np.ndarray) -> float:
    started = time.perf_counter()
    try:
        readings.check_readings(model, ctx, base_x, "body")
    except (readings.UnsolvedRows, readings.ReadingsRefused, readings.ScatteredReadings):
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="random-300-2")
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    net = network(args.network)
    model = VoltageModel(net)
    x = net.base_x * (1.0 + 0.1 * np.random.default_rng(0).uniform(-1.0, 1.0, (args.rows, net.n_features)))
    contexts = {
        "unsolvable (loads 30x base)": ContextSet.build(30.0 * x, np.ones((args.rows, net.n_outputs))),
        "legitimate": ContextSet.build(
            x, model(x) + np.random.default_rng(1).normal(0.0, 2e-3, (args.rows, net.n_outputs))
        ),
    }
    block = readings.CHECK_BLOCK
    blocks = {f"blocks of {block}": block, "one block": args.rows}
    print(f"{net.name}: {args.rows} rows, {net.n_outputs} buses; seconds per check (this host)")
    for name, ctx in contexts.items():
        cells = []
        for label, size in blocks.items():
            readings.CHECK_BLOCK = size
            cells.append(f"{label} {seconds(model, ctx, net.base_x):.2f} s")
        print(f"- {name}: " + ", ".join(cells))
    readings.CHECK_BLOCK = block
    ctx = contexts["legitimate"]
    solve, fit = [], []
    for _ in range(3):
        started = time.perf_counter()
        v = np.concatenate([model(x[s : s + block]) for s in range(0, args.rows, block)])
        solve.append(time.perf_counter() - started)
        started = time.perf_counter()
        found = readings.reading_scatter(ctx.x, ctx.y, v)
        assert found is not None
        noise, fitted = found.noise, found.rows
        fit.append(time.perf_counter() - started)
    print(
        f"- legitimate, split: power flow of {args.rows} rows {min(solve):.2f} s, scatter fit of {fitted} rows "
        f"{min(fit):.2f} s (largest inferred noise {np.nanmax(noise):.2e} p.u.)"
    )


if __name__ == "__main__":
    main()

"""transformer-dva-fast 0.2.2 (old prior) beside a candidate trained on the v4 prior, in process, one run.

Table-4 protocol (IEEE 33, loads uniform within +-delta, 500 context rows, batched-solver truth) and
bench/accuracy_v3.py's IEEE 33 scenarios (context +-10 %; queries at 1.3-1.5x growth, PV export at 8
buses, in range; reading noise 0 and 1e-5 p.u.). In process means the checkpoint's own answer with its
in-context calibration, without the service's off-context widening (that is models/off_context.py's,
applied through the HTTP API). Metrics as in accuracy_v3: MAE, ratio to least squares, worst-bus coverage.

    .venv/bin/python bench/prior_v4.py --candidate /tmp/reg/transformer-dva-fast/0.4.0 --queries 1500
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gridsim  # noqa: E402
from bench.accuracy_v3 import ieee33_scenarios, metrics  # noqa: E402
from models.linear import LeastSquares  # noqa: E402
from models.registry import load_checkpoint  # noqa: E402

SERVED = Path(__file__).resolve().parents[1] / "models" / "registry" / "transformer-dva-fast" / "0.2.2"


def table4(methods: dict, queries: int, seed: int) -> list[str]:
    net = gridsim.network("ieee33")
    rows = []
    for i, delta in enumerate((0.05, 0.10, 0.30, 0.50)):
        rng = np.random.default_rng([seed, i])
        x = net.base_x * (1.0 + delta * rng.uniform(-1.0, 1.0, (500 + queries, net.n_features)))
        y = gridsim.solve(x, network=net, solver="batched").vm_pu
        cx, cy, qx, qy = x[:500], y[:500], x[500:], y[500:]
        ls = np.abs(LeastSquares()(cx, cy, qx).mean - qy).mean(axis=0).max()
        for name, method in methods.items():
            pred = method(cx, cy, qx)
            low, high = pred.interval(0.95)
            r = metrics(pred.mean, low, high, qy)
            rows.append(
                f"| Table 4, delta {delta:.2f} | {name} | {r['max_bus_mae']:.2e} | {r['max_bus_mae'] / ls:.4f} | "
                f"{r['coverage_worst']:.3f} | {r['coverage_mean']:.3f} |"
            )
            logging.info(rows[-1])
    return rows


def operating(methods: dict, queries: int, seed: int) -> list[str]:
    args = SimpleNamespace(ieee_queries=queries, n_context=500, ieee_noises=[0.0, 1e-5], load_noise=0.0)
    rows = []
    for s in ieee33_scenarios(args, seed):
        ls = np.abs(LeastSquares()(s.cx, s.cy, s.qx).mean - s.qy).mean()
        for name, method in methods.items():
            pred = method(s.cx, s.cy, s.qx)
            low, high = pred.interval(0.95)
            r = metrics(pred.mean, low, high, s.qy)
            rows.append(
                f"| {s.kind}, noise {s.noise:g} | {name} | {r['mae']:.2e} | {r['mae'] / ls:.4f} | "
                f"{r['coverage_worst']:.3f} | {r['coverage_mean']:.3f} |"
            )
            logging.info(rows[-1])
    return rows


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", type=Path, required=True, help="a registry checkpoint directory")
    parser.add_argument("--queries", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=2900)
    args = parser.parse_args()
    methods = {}
    for path in (SERVED, args.candidate):
        loaded = load_checkpoint(path, device="cpu", warmup=False)
        methods[f"{loaded.name} {loaded.version}"] = loaded.method
    head = [
        "| scenario | model | MAE (Table 4: worst bus) | / least squares | cov95 worst | cov95 mean |",
        "|---|---|---|---|---|---|",
    ]
    print(
        "\n".join(head + table4(methods, args.queries, args.seed) + operating(methods, args.queries, args.seed + 100))
    )


if __name__ == "__main__":
    main()

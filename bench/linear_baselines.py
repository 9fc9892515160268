"""Linear baselines on IEEE 33-bus power flow: the figures every surrogate is judged against.

For each delta: 500 context scenarios, 4500 queries (gridsim, seed per delta), all 32 buses.
Prints per method the max-over-buses MAE, the 95 % interval coverage, the mean NLL and the
fit / predict seconds side by side.

    .venv/bin/python bench/linear_baselines.py [--deltas 0.05 0.2 0.5] [--context 500] [--queries 4500]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gridsim.api import simulate  # noqa: E402
from models.linear import BayesianLinearRegression, LeastSquares, MeanPredictor  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=float, nargs="+", default=[0.05, 0.2, 0.5])
    parser.add_argument("--context", type=int, default=500)
    parser.add_argument("--queries", type=int, default=4500)
    args = parser.parse_args()
    print(f"{'delta':>6} {'method':>16} {'maxbus MAE':>11} {'cov95':>6} {'NLL':>8} {'fit s':>7} {'pred s':>7}")
    for i, delta in enumerate(args.deltas):
        sim = simulate(args.context + args.queries, delta, seed=100 + i)
        ok = sim.converged
        x, y = sim.x[ok], sim.vm_pu[ok]
        cx, cy, qx, qy = x[: args.context], y[: args.context], x[args.context :], y[args.context :]
        for method in (BayesianLinearRegression(), LeastSquares(), MeanPredictor()):
            pred = method(cx, cy, qx)
            err = np.abs(pred.mean - qy)
            low, high = pred.interval(0.95)
            cov = ((qy >= low) & (qy <= high)).mean()
            nll = -pred.log_prob(qy).mean()
            print(f"{delta:6.2f} {method.name:>16} {err.mean(0).max():11.3e} {cov:6.3f} {nll:8.2f} "
                  f"{pred.timing.fit_s:7.3f} {pred.timing.predict_s:7.3f}")


if __name__ == "__main__":
    main()

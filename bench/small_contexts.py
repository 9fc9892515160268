"""Coverage on small contexts over several contexts per size: the sweep in bench/accuracy.py draws one
context per size, and at 16-150 rows one context's worst bus is mostly luck of the draw.

For each model served for the feeder (IEEE 33 unless `--network`) and physics-fit, each size n and
`--contexts` contexts (seeds 900 + i, delta 10 % and 30 % alternating, batched-solver truth, 2000
queries each): the worst bus's 95 % coverage (mean and min over the contexts), the mean coverage,
max-over-bus MAE / least squares where n exceeds the inputs + 1 (65 on IEEE 33), max-over-bus MAE /
ridge regression with leave-one-out penalty (issue 14: no worse than ridge at 16 and 50 rows; mean and
largest over the contexts), and how far the 95 % intervals move when the context's voltages change in
their 13th digit (a relative perturbation of 1e-13: rounding, another thread count or a GPU do as
much), as the largest move of either end over the contexts, in median half-widths. In process (the
service answers the same numbers, tests/service/engine/test_precision.py; bench/accuracy.py checks
coverage through HTTP).
Writes bench/results/small-contexts.md (small-contexts-<network>.md for another feeder).

    .venv/bin/python bench/small_contexts.py
    .venv/bin/python bench/small_contexts.py --sizes 16 50 --contexts 12
    .venv/bin/python bench/small_contexts.py --network kerber_landnetz_kabel_1   # -> small-contexts-<network>.md
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench.report

import gridsim  # noqa: E402
from bench import report  # noqa: E402
from models.linear import RidgeLOO  # noqa: E402
from models.physics_fit import NAME as PHYSICS_FIT  # noqa: E402
from models.physics_fit import method_for
from models.registry import DEFAULT_ROOT, load_registry  # noqa: E402

N_QUERIES = 2000
# Relative change of the context voltages for the stability column: far below any reading's precision.
PERTURBATION = 1e-13


def _least_squares_mae(cx, cy, qx, qy) -> float:
    coef = np.linalg.lstsq(np.c_[np.ones(len(cx)), cx], cy, rcond=None)[0]
    return float(np.abs(np.c_[np.ones(len(qx)), qx] @ coef - qy).mean(axis=0).max())


def _max_mae(pred_mean, qy) -> float:
    return float(np.abs(pred_mean - qy).mean(axis=0).max())


def evaluate(method, n: int, contexts: int, network: str = "ieee33") -> dict[str, float]:
    worst, mean, ratio, vs_ridge, moved = [], [], [], [], []
    for i in range(contexts):
        sim = gridsim.simulate(n + N_QUERIES, 0.3 if i % 2 else 0.1, seed=900 + i, network=network)
        cx, cy, qx, qy = sim.x[:n], sim.vm_pu[:n], sim.x[n:], sim.vm_pu[n:]
        pred = method.predict(method.fit(cx, cy), qx)
        low, high = pred.interval(0.95)
        covered = ((qy >= low) & (qy <= high)).mean(axis=0)
        worst.append(covered.min())
        mean.append(covered.mean())
        ratio.append(_max_mae(pred.mean, qy) / _least_squares_mae(cx, cy, qx, qy))
        vs_ridge.append(_max_mae(pred.mean, qy) / _max_mae(RidgeLOO()(cx, cy, qx).mean, qy))
        noisy = cy * (1.0 + PERTURBATION * np.random.default_rng(950 + i).standard_normal(cy.shape))
        low2, high2 = method.predict(method.fit(cx, noisy), qx).interval(0.95)
        moved.append(max(np.abs(low2 - low).max(), np.abs(high2 - high).max()) / np.median(0.5 * (high - low)))
    return {
        "worst_mean": float(np.mean(worst)),
        "worst_min": float(np.min(worst)),
        "mean": float(np.mean(mean)),
        "mae_ls": float(np.mean(ratio)),
        "ridge_mean": float(np.mean(vs_ridge)),
        "ridge_max": float(np.max(vs_ridge)),
        "moved": float(np.max(moved)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 50, 100, 150])
    parser.add_argument("--contexts", type=int, default=6)
    parser.add_argument("--registry", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--network", default="ieee33", help="a gridsim built-in feeder")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default bench/results/small-contexts.md (IEEE 33) or small-contexts-<network>.md",
    )
    args = parser.parse_args()
    suffix = "" if args.network == "ieee33" else f"-{args.network}"
    out = args.out or Path(__file__).parent / "results" / f"small-contexts{suffix}.md"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("pandapower").setLevel(logging.WARNING)
    registry = load_registry(args.registry, network=args.network)
    methods = [(f"{name} {loaded.version}", loaded.method) for name, loaded in sorted(registry.models.items())]
    net = gridsim.network(args.network)
    methods.append((PHYSICS_FIT, method_for(net)))
    determined = net.n_features + 1  # least squares is minimum-norm up to this many rows
    lines = [
        f"# Coverage on small {args.network} contexts, several contexts per size",
        "",
        f"{report.provenance('bench/small_contexts.py')}. {args.contexts} contexts per size (seeds 900 + i, delta 10 % / 30 % alternating), "
        f"{N_QUERIES} queries each, batched-solver truth, in process. MAE / LS: max-over-bus MAE over least squares "
        f"(minimum-norm up to {determined} rows, so not given there). MAE / ridge: the same over ridge regression with "
        "leave-one-out penalty, mean and largest over the contexts. Moved: the largest move of a 95 % interval's end when "
        f"the context voltages change by {PERTURBATION:.0e} relative, in median half-widths.",
        "",
        "| n | model | worst-bus cov95, mean over contexts | worst-bus cov95, lowest context | mean cov95 | MAE / LS | "
        "MAE / ridge, mean (largest) | moved |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in args.sizes:
        for label, method in methods:
            r = evaluate(method, n, args.contexts, args.network)
            mae_ls = f"{r['mae_ls']:.3f}" if n > determined else "–"
            row = (
                f"| {n} | {label} | {r['worst_mean']:.3f} | {r['worst_min']:.3f} | {r['mean']:.3f} | {mae_ls} | "
                f"{r['ridge_mean']:.2f} ({r['ridge_max']:.2f}) | {r['moved']:.1e} |"
            )
            logging.info(row)
            lines.append(row)
    report.write(out, lines)


if __name__ == "__main__":
    main()

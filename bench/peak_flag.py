"""Load growth past the context's peak hours, where loads follow household profiles: is it flagged `extrapolated`?

IEEE 33 with each load bus carrying 8 households of SimBench 1-LV-semiurb4 (a development grid; their P and Q
profiles summed, scaled to the bus's base load at their year's peak): a context of 400 hourly rows (from day 20,
exact readings), every bus metered, or half the load buses with no meter at all (loads and voltages null). Queries
through the HTTP API (a real `gridpfn serve`, the Python client, network-fit): `between`, the hours between the
context's (drawn like it: the issue asks <= 5 % flagged), and `peak x1.3-1.5`, the context's 40 highest-demand hours
scaled 1.3-1.5 (a planner's "what if demand grows": beyond the context where their total passes its highest).
Figures: the share flagged, the share of those queries whose total P passes the context's highest, and the answer's
worst-bus 95 % coverage and MAE against pandapower-equivalent truth (gridsim's batched solver).

    .venv/bin/python bench/peak_flag.py      # ~1 min on 2 cores -> bench/results/peak-flag.md
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gridsim  # noqa: E402
from bench import report as bench_report  # noqa: E402
from bench.http_accuracy import served  # noqa: E402
from bench.partial_metering import answer  # noqa: E402
from gridsim import simbench_data  # noqa: E402
from models.registry import DEFAULT_ROOT  # noqa: E402
from service.client import GridPFNClient  # noqa: E402

HOUSEHOLDS = "1-LV-semiurb4--0-sw"
PER_BUS, ROWS, PEAKS, SEEDS = 8, 400, 40, (0, 1, 2)
OUT = Path(__file__).parent / "results" / "peak-flag.md"


def loads(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(context x, `between` x, `peak x1.3-1.5` x) on IEEE 33, its buses carrying households' profiles."""
    net = gridsim.network("ieee33")
    profiles = simbench_data.simbench_profiles(HOUSEHOLDS)
    p, q = profiles[("load", "p_mw")], profiles[("load", "q_mvar")]
    rng = np.random.default_rng(seed)
    shape_p, shape_q = np.zeros((len(p), net.n_load)), np.zeros((len(p), net.n_load))
    for bus in range(net.n_load):
        homes = rng.choice(p.shape[1], PER_BUS, replace=False)
        shape_p[:, bus], shape_q[:, bus] = p[:, homes].sum(axis=1), q[:, homes].sum(axis=1)
    shape_p /= np.abs(shape_p).max(axis=0)
    shape_q /= np.abs(shape_q).max(axis=0)
    base = np.asarray(net.base_x, dtype=np.float64)

    def at(steps: np.ndarray) -> np.ndarray:
        return np.concatenate([shape_p[steps] * base[: net.n_load], shape_q[steps] * base[net.n_load :]], axis=1)

    steps = 20 * 96 + 4 * np.arange(ROWS)  # hourly (15-minute steps)
    context = at(steps)
    peaks = np.argsort(context[:, : net.n_load].sum(axis=1))[-PEAKS:]
    return context, at(steps + 2), context[peaks] * np.linspace(1.3, 1.5, PEAKS)[:, None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    net = gridsim.network("ieee33")
    rows = []
    with served(DEFAULT_ROOT, max_rows=ROWS) as url, GridPFNClient(url) as client:
        for seed in SEEDS:
            cx, between, grown = loads(seed)
            cy = gridsim.solve(cx, network=net, solver="batched").vm_pu
            never = np.random.default_rng([seed, 1]).random(net.n_load) < 0.5
            sparse_x, sparse_y = cx.copy(), np.array(cy, dtype=np.float64)
            sparse_x[:, np.r_[never, never]] = np.nan
            sparse_y[:, net.load_positions[never]] = np.nan
            highest = cx[:, : net.n_load].sum(axis=1).max()
            for metering, (x, y) in (("every bus", (cx, cy)), ("half with no meter", (sparse_x, sparse_y))):
                for kind, qx in (("between", between), ("peak x1.3-1.5", grown)):
                    qy = gridsim.solve(qx, network=net, solver="batched").vm_pu
                    r = answer(client, x, y, qx, qy, "ieee33")
                    past = float((qx[:, : net.n_load].sum(axis=1) > highest).mean())
                    rows.append(
                        f"| {seed} | {metering} | {kind} | {r['flag_rate']:.3f} | {past:.3f} | "
                        f"{r['coverage_worst']:.3f} | {r['mae']:.2e} |"
                    )
                    logging.info("seed %d %s %s: %s", seed, metering, kind, rows[-1])
    lines = [
        "# Load growth past the context's peak hours: flagged `extrapolated`? (issue 29)",
        "",
        f"{bench_report.provenance('bench/peak_flag.py')}. Through the HTTP API (network-fit). Definitions: the "
        "script's docstring.",
        "",
        "| seed | metering | queries | flagged | total P past the context's highest | cov95 worst | MAE p.u. |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]
    bench_report.write(args.out, lines)


if __name__ == "__main__":
    main()

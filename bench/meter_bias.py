"""One biased meter: does network-fit name it, and does the answer still hold the truth at its bus?

A meter that reads a constant offset high (a miscalibrated transducer, a wrong CT or PT ratio) is the commonest bad
reading an operator has. Each cell takes a context of bench/accuracy_v3.py (IEEE 33 within +-10 % with queries in
range and at 1.3-1.5x load; SimBench grids, 500 random steps of the year), adds `bias` p.u. to every reading of one
bus (three buses in turn), and asks network-fit through the HTTP API (the Python client, Arrow): which buses its
answer names in `reading_offsets`, and how the biased bus's answer and every bus's 95 % interval fare against the
noise-free truth. Beside it, in process, the same fit with the check off (models.branch_correction.MAX_SUSPECT = 0:
the answer before the check existed). Bias 0: honest meters, where any name is a false alarm.

    .venv/bin/python bench/meter_bias.py            # -> stdout and bench/results/meter-bias.md (~5 min)
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import accuracy_v3  # noqa: E402
from bench import report as bench_report  # noqa: E402
from bench.http_accuracy import served  # noqa: E402
from models import branch_correction, network_fit  # noqa: E402
from models.registry import DEFAULT_ROOT  # noqa: E402

OUT = Path(__file__).parent / "results" / "meter-bias.md"
BIASES = (0.0, 2e-4, 5e-4, 2e-3)
IEEE_BUSES = (7, 18, 31)  # mid-feeder, the main feeder's last bus, a lateral's
LEVELS = (0.025, 0.975)
GRIDS = ("1-LV-semiurb4--0-sw", "1-MV-rural--0-sw")


def _buses(scenario: accuracy_v3.Scenario, rng: np.random.Generator) -> list[int]:
    if scenario.group.startswith("ieee33"):
        return [scenario.network.output_buses.index(b) for b in IEEE_BUSES]
    return sorted(rng.choice(scenario.cy.shape[1], 3, replace=False).tolist())


def _scores(mean: np.ndarray, low: np.ndarray, high: np.ndarray, truth: np.ndarray, j: int) -> tuple:
    covered = ((truth >= low) & (truth <= high)).mean(axis=0)
    return float(np.abs(mean[:, j] - truth[:, j]).mean()), float(covered[j]), float(covered.min())


def _without_check(scenario: accuracy_v3.Scenario, cy: np.ndarray, qx: np.ndarray, qy: np.ndarray, j: int) -> tuple:
    """In process, the meter check off: network-fit as it answered before it."""
    method = network_fit.method_for(scenario.network)
    kept, branch_correction.MAX_SUSPECT = branch_correction.MAX_SUSPECT, 0
    try:
        summary = method.summarize(method.fit(scenario.cx, cy), qx, LEVELS)
    finally:
        branch_correction.MAX_SUSPECT = kept
    return _scores(summary.mean, summary.quantiles[0], summary.quantiles[1], qy, j)


def cell(server: accuracy_v3.Server, scenario: accuracy_v3.Scenario, bias: float, buses: list[int]) -> str:
    net_id = server.network_id(scenario)
    right, others, before, after = 0, 0, [], []
    for j in buses:
        cy = scenario.cy.copy()
        cy[:, j] += bias
        context_id = server.client.create_context(scenario.cx, cy, network=net_id)
        try:
            frame = server.client.predict(
                scenario.qx, model="network-fit", context_id=context_id, quantiles=[q for q in LEVELS]
            )
        finally:
            server.client.delete_context(context_id)
        named = np.flatnonzero(np.asarray(frame.attrs["reading_offsets"]))
        right += int(bias > 0 and named.tolist() == [j])
        others += int(np.count_nonzero(named != j))
        outputs = frame.attrs["outputs"]
        mean, low, high = (
            frame[[f"{column}_{o}" for o in outputs]].to_numpy(np.float64)
            for column in ("mean", f"q{LEVELS[0]}", f"q{LEVELS[1]}")
        )
        after.append(_scores(mean, low, high, scenario.qy, j))
        before.append(_without_check(scenario, cy, scenario.qx, scenario.qy, j))
    b, a = np.array(before), np.array(after)
    return (
        f"| {scenario.title} | {bias:g} | {right}/{len(buses) if bias > 0 else 0} | {others} | "
        f"{b[:, 0].mean():.1e} -> {a[:, 0].mean():.1e} | {b[:, 1].min():.2f} -> {a[:, 1].min():.2f} | "
        f"{b[:, 2].min():.2f} -> {a[:, 2].min():.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=4100)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    setup = argparse.Namespace(
        steps=accuracy_v3.STEPS,
        n_context=accuracy_v3.N_CONTEXT,
        max_queries=args.queries,
        ieee_queries=args.queries,
        simbench_noises=[1e-3],
        ieee_noises=[1e-5, 1e-3],
        load_noise=0.0,
    )
    scenarios = [s for s in accuracy_v3.ieee33_scenarios(setup, args.seed) if s.kind in ("in range", "growth")]
    for i, code in enumerate(GRIDS):
        scenarios += [s for s in accuracy_v3.simbench_scenarios(code, setup, args.seed + 1 + i) if s.kind == "random"]
    rng = np.random.default_rng(args.seed)
    rows = []
    from service.client import GridPFNClient

    with served(DEFAULT_ROOT, max_rows=5000) as url, GridPFNClient(url, timeout_s=600.0) as client:
        server = accuracy_v3.Server(client, http_gp=False)
        for scenario in scenarios:
            buses = _buses(scenario, rng)  # the same three for every bias
            for bias in BIASES:
                rows.append(cell(server, scenario, bias, buses))
                logging.warning("%s", rows[-1])
    lines = [
        "# One biased meter: named, set aside, held (network-fit)",
        "",
        bench_report.provenance("bench/meter_bias.py") + ".",
        "",
        "The docstring of bench/meter_bias.py. Each row: three contexts, each with one bus's readings `bias` p.u. "
        f"high; {args.queries} queries; through HTTP (after) beside the same fit in process with the check off "
        "(before). Named: contexts whose `reading_offsets` name exactly the biased bus; others: buses named besides "
        "it, over the three. MAE and coverage of the biased bus (mean MAE, least coverage), and the least worst-bus "
        "coverage of the 95 % interval, over the three.",
        "",
        "| cell | bias p.u. | named | others named | biased bus MAE, before -> after | biased bus cov95 | "
        "worst-bus cov95 |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]
    bench_report.write(args.out, lines)


if __name__ == "__main__":
    main()

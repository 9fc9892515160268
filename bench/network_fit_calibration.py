"""Is network-fit's spread calibrated across contexts, when one context's intervals look several times too wide?

bench/accuracy_v3.py scores each context once: its width / cover divides the mean 95 % interval width by the width
that would just have covered *this* context's errors. network-fit's error at a bus is mostly one draw shared by
every query of the context (the fitted offset, a branch's correction), so even an exactly calibrated interval is
several times that width in most contexts and too narrow in a few. This redraws the readings' noise many times on
accuracy_v3's noisy cells (same loads and truth, in process, network-fit only) and reports, per cell:

- rms z: rms of error / std with the spread's simultaneous (all-buses) factor taken out (1 = calibrated, below 1 =
  too wide by 1 / rms z), and the pooled share of |z| <= 1.96 (0.95 = calibrated per query and bus);
- per draw, the worst bus's coverage of the served 95 % interval (median and least) and the width / cover
  accuracy_v3 would report (median);
- width / cover pooled over the draws: the mean 95 % interval width over the mean per-bus 2 x 95th percentile of
  |error| across every draw and query (the width that would just have covered 95 % of the contexts' errors, not one
  context's: the served interval also holds the worst of the k buses, so a calibrated one is about the simultaneous
  factor wide on this scale).

    .venv/bin/python bench/network_fit_calibration.py [--draws 20] [--queries 300]
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
from gridsim import simbench_data  # noqa: E402
from models import network_fit  # noqa: E402

OUT = Path(__file__).parent / "results" / "network-fit-calibration.md"


def cell(scenario: accuracy_v3.Scenario, clean: np.ndarray, draws: int, queries: int) -> str:
    method = network_fit.method_for(scenario.network)
    qx, qy = scenario.qx[:queries], scenario.qy[:queries]
    z, worst, ratio, errors, widths = [], [], [], [], []
    for draw in range(draws):
        readings = simbench_data.add_meter_noise(clean, scenario.noise, np.random.default_rng([7, draw]))
        fitted = method.fit(scenario.cx, readings)
        answer = method.predict(fitted, qx)
        error = answer.mean - qy
        z.append((error / (answer.std / fitted.simultaneous)).ravel())
        worst.append(float((np.abs(error) <= 1.96 * answer.std).mean(axis=0).min()))
        width = 2 * 1.96 * answer.std
        ratio.append(float(width.mean() / (2 * np.quantile(np.abs(error), 0.95, axis=0)).mean()))
        errors.append(np.abs(error))
        widths.append(width)
    pooled = np.concatenate(z)
    pooled_cover = (2 * np.quantile(np.concatenate(errors), 0.95, axis=0)).mean()
    return (
        f"| {scenario.title} | {np.sqrt(np.mean(pooled**2)):.2f} | {np.mean(np.abs(pooled) <= 1.96):.3f} | "
        f"{np.median(worst):.3f} / {min(worst):.3f} | {np.median(ratio):.2f} | "
        f"{np.mean(widths) / pooled_cover:.2f} | {fitted.simultaneous:.2f} |"
    )


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=2900)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    setup = argparse.Namespace(
        steps=accuracy_v3.STEPS,
        n_context=accuracy_v3.N_CONTEXT,
        max_queries=args.queries,
        ieee_queries=args.queries,
        simbench_noises=list(accuracy_v3.SIMBENCH_NOISES),
        ieee_noises=list(accuracy_v3.IEEE_NOISES),
        load_noise=0.0,
    )
    scenarios = []
    for i, code in enumerate(simbench_data.DEV_GRIDS):
        scenarios += accuracy_v3.simbench_scenarios(code, setup, args.seed + i)
    scenarios += accuracy_v3.ieee33_scenarios(setup, args.seed + 100)
    scenarios += accuracy_v3.ieee33_scenarios(setup, args.seed + 200, departure="lines")
    rows = []
    for s in scenarios:
        if s.noise == 0:
            continue
        twin = next(t for t in scenarios if (t.group, t.kind, t.noise) == (s.group, s.kind, 0.0))
        rows.append(cell(s, twin.cy, args.draws, args.queries))
    lines = [
        "# network-fit's spread across contexts (issue 29)",
        "",
        bench_report.provenance("bench/network_fit_calibration.py") + ".",
        "",
        f"The docstring of bench/network_fit_calibration.py: accuracy_v3's noisy cells, {args.draws} draws of the "
        f"readings' noise each, {args.queries} queries, in process.",
        "",
        "| cell | rms z (no simultaneous factor) | share of abs(z) <= 1.96 | worst-bus cov95 per draw, median / least "
        "| width / cover per draw, median | width / cover pooled over draws | simultaneous factor (last draw) |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]
    bench_report.write(args.out, lines)


if __name__ == "__main__":
    main()

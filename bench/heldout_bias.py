"""How far the spread calibration's masked held-out pass overstates the error at new queries, per served model.

The calibration (models/calibration.py) predicts every context point with its own attention key
masked and scores it against its leave-one-out residual. The other points' values are leave-one-out
residuals of fits that *include* the masked point, so they carry less of its residual than they
carry of a new query's; a model that leans on its neighbours' residuals misses held-out points by
more than new ones, and its factors come out too wide. This script measures, for every served
IEEE 33 model, side by side:

1. exact leave-one-out: the rms error (standardised) of `--loo-points` context points of the
   Table-4 delta-5 % context predicted masked, and truly left out (context re-encoded without them);
2. on the Table-4 contexts (500 rows, 4500 test points, batched truth): the base fit's median
   leverage, the median over buses of held-out factor (uncorrected) / the factor the test points
   needed, and the worst-bus coverage of the uncorrected and of the served factors (divided by
   exp(slope * leverage), the slope from the model's card; models/heldout_bias.py);
3. the slope measured afresh on the checkpoint's own training prior (models.heldout_bias.measure:
   `--datasets` contexts of 300-512 rows, 2000 new queries each), beside the card's.

    .venv/bin/python bench/heldout_bias.py            # -> bench/results/heldout-bias.md
"""

from __future__ import annotations

import argparse
import datetime
import logging
import platform
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gridsim  # noqa: E402
from models.calibration import CALIBRATION_LEVEL  # noqa: E402
from models.heldout_bias import context_leverage, measure, needed_factor  # noqa: E402
from models.pfn import EncodedContext, PFNMethod  # noqa: E402
from models.registry import DEFAULT_ROOT, load_registry  # noqa: E402

log = logging.getLogger("heldout_bias")
DELTAS = (0.05, 0.10, 0.30, 0.50)
N_CONTEXT, N_TEST = 500, 4500
TAIL = (1.0 - CALIBRATION_LEVEL) / 2.0


def coverage_with(raw: PFNMethod, encoded: EncodedContext, qx, qy, spread: np.ndarray) -> float:
    """Worst-bus coverage of the central 95 % interval of an encoded context's answer, stretched by `spread`."""
    stats = raw.summarize(EncodedContext(encoded.cache, spread), qx, (TAIL, 1.0 - TAIL))
    return float(((qy >= stats.quantiles[0]) & (qy <= stats.quantiles[1])).mean(axis=0).min())


@torch.inference_mode()
def exact_loo(method: PFNMethod, cx, cy, points: int) -> tuple[float, float]:
    """Median over buses of the rms standardised error of `points` context points: masked, and truly left out."""
    raw = PFNMethod(method.model, device=method.device, calibrate=False)
    cache = raw.fit(cx, cy).cache
    logits, _, _ = raw.model.predict(
        cache, torch.as_tensor(cx, dtype=torch.float64, device=raw.device)[None], held_out=True
    )
    masked_mean = raw.bar.mean(logits[0, :, :points].float().cpu()).T.numpy()  # (points, k)
    masked = cache.targets[0, :, :points].T.cpu().numpy() - masked_mean
    left_out = []
    for i in range(points):
        keep = np.arange(len(cx)) != i
        encoded = raw.fit(cx[keep], cy[keep])
        scale = encoded.cache.stats.y_scale[0].cpu().numpy()
        mean = raw.summarize(encoded, cx[i : i + 1]).mean[0]
        left_out.append((cy[i] - mean) / scale)
    rms = lambda e: float(np.median(np.sqrt(np.mean(np.square(e), axis=0))))  # noqa: E731
    return rms(masked), rms(np.array(left_out))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=64, help="prior datasets per model")
    parser.add_argument("--loo-points", type=int, default=40, help="context points re-encoded without themselves")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "heldout-bias.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.threads:
        torch.set_num_threads(args.threads)
    registry = load_registry(DEFAULT_ROOT, device="cpu", network="ieee33")
    data = {}
    for delta in DELTAS:
        sim = gridsim.simulate(N_CONTEXT + N_TEST, delta, seed=1000 + int(round(100 * delta)), solver="batched")
        data[delta] = (sim.x[:N_CONTEXT], sim.vm_pu[:N_CONTEXT], sim.x[-N_TEST:], sim.vm_pu[-N_TEST:])
    lines = [
        "# Held-out calibration pass vs new queries",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} {platform.node()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads. Command: `.venv/bin/python bench/heldout_bias.py"
        f" --datasets {args.datasets} --loo-points {args.loo_points} --seed {args.seed}`.",
        "",
        "Ratio = median over buses of (held-out factor / factor the new points needed); > 1: the calibration "
        "widens more than new points need. Coverage: worst bus, central 95 % interval, in process.",
        "",
        "| model | rms error masked / truly left out (delta 5 %) | Table-4 leverage | Table-4 ratio at delta 5 / 10 / "
        "30 / 50 % | worst-bus cov, uncorrected factors | worst-bus cov, served (card's slope) | slope: card / measured "
        "now (95 % interval) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, loaded in sorted(registry.models.items()):
        raw = PFNMethod(loaded.method.model, device=loaded.method.device, calibrate=False)
        plain = PFNMethod(loaded.method.model, device=loaded.method.device)  # no slope: the pass as it is
        masked, left_out = exact_loo(loaded.method, *data[0.05][:2], args.loo_points)
        leverage, ratios, plain_cov, served_cov = [], [], [], []
        for _delta, (cx, cy, tx, ty) in data.items():
            encoded = plain.fit(cx, cy)
            leverage.append(context_leverage(plain, encoded, cx, cy))
            ratios.append(float(np.median(encoded.spread / needed_factor(raw, encoded, tx, ty))))
            plain_cov.append(coverage_with(raw, encoded, tx, ty, encoded.spread))
            served_cov.append(coverage_with(raw, encoded, tx, ty, loaded.method.fit(cx, cy).spread))
        card_slope = (loaded.card.get("calibration") or {}).get("heldout_slope", 0.0)
        fresh = measure(DEFAULT_ROOT / loaded.name / loaded.version, datasets=args.datasets, seed=args.seed)
        low, high = fresh["slope_interval95"]
        row = (
            f"| {name} {loaded.version} | {masked:.3f} / {left_out:.3f} | {min(leverage):.3f}-{max(leverage):.3f} | "
            f"{' / '.join(f'{r:.3f}' for r in ratios)} | {' / '.join(f'{c:.3f}' for c in plain_cov)} | "
            f"{' / '.join(f'{c:.3f}' for c in served_cov)} | {card_slope} / {fresh['measured_slope']:.3f} "
            f"({low:.3f}-{high:.3f}) |"
        )
        log.info(row)
        lines.append(row)
    args.out.write_text("\n".join(lines) + "\n")
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

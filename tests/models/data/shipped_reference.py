"""Reference answers of the shipped checkpoints, to prove a refactor of the base fit changes none.

How `shipped_reference.json` was made: with the code of commit f82a43d (before the base fit was
split into models/base_fit.py and its ridge / leave-one-out kernels merged), from the repository root:

    .venv/bin/python -m tests.models.data.shipped_reference

For every case below it loads the checkpoint through the registry (`load_checkpoint`, calibration
on, as the service serves it), fits a gridsim context (fixed network, size, delta and seed) and
records, for the QUERIES rows after the context and every OUTPUT_STEP-th output: the base fit's
location and, relative to it, the predictive mean and the 2.5 % / 97.5 % quantiles (so a relative
tolerance on them bites on the spread, not on a voltage near 1), to SIGNIFICANT digits.
`physics-fit` is the closed form alone (models.physics_fit). The context's sums are recorded too,
so a change in gridsim reads as such and not as a change of the model.
tests/models/test_shipped_reference.py compares.
Re-running this script overwrites the file: do that only when a change of the answers is intended.
2026-11-26: the mv_oberrhein_sub0 case's context was recomputed alone (same model code) when gridsim
began to model a line cut at one end by an open switch as pandapower does (its live end's charging):
that feeder's voltages moved by up to ~9e-5 p.u.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import gridsim
from models import physics_fit
from models.registry import DEFAULT_ROOT, load_checkpoint

PATH = Path(__file__).with_name("shipped_reference.json")
QUERIES = 2
OUTPUT_STEP = 2
SIGNIFICANT = 10
DELTA = 0.3
SEED = 3203
LEVELS = (0.025, 0.975)
# (checkpoint "name/version" or "physics-fit", network, context sizes): one per model family and
# base kind (ridge, physics with the design's or the loads' leverage, a feeder whose outputs are not
# its load buses), at context sizes within each card's range on both sides of
# physics_base.CV_BELOW_POINTS (the physics base's small-context path) and, for the physics base,
# below the 64 inputs (where the guard of the leave-one-out choice matters). Not
# kerber_landnetz_kabel_1: pandapower draws its cable types with an unseeded `random`, so its
# voltages differ from one process to the next (~5e-7 relative).
CASES = (
    ("transformer-dva/0.6.0", "ieee33", (100,)),
    ("transformer-dva/0.7.0", "ieee33", (24,)),
    ("transformer-dva/0.9.0", "ieee33", (24, 100, 300)),
    ("transformer-dva-fast/0.1.0", "ieee33", (300,)),
    ("transformer-dva-fast/0.2.2", "ieee33", (24, 300)),
    ("transformer-dva-fast/0.3.1-mv_oberrhein_sub0", "mv_oberrhein_sub0", (300,)),
    ("cnn-dva/0.2.0", "ieee33", (100,)),
    ("cnn-dva/0.3.1", "ieee33", (24, 300)),
    ("physics-fit", "ieee33", (24, 300)),
)


def context(network: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Context inputs (n, d), targets (n, k) and QUERIES query rows, from one fixed simulation."""
    sim = gridsim.simulate(n + QUERIES, DELTA, seed=SEED, network=network)
    return sim.x[:n], sim.vm_pu[:n], sim.x[n:]


def method_of(name: str, network: str):
    if name == physics_fit.NAME:
        return physics_fit.method_for(gridsim.network(network))
    return load_checkpoint(DEFAULT_ROOT / name, device="cpu", warmup=False).method


def answers(method, network: str, n: int) -> dict[str, list]:
    """What the reference records for one method and context: (QUERIES, outputs) lists per field."""
    cx, cy, qx = context(network, n)
    pred = method.predict(method.fit(cx, cy), qx)
    loc = np.asarray(pred.mu if hasattr(pred, "mu") else pred.loc)  # StudentTPredictive / BarPredictive
    low, high = pred.quantile(LEVELS)
    fields = {"loc": loc, "mean-loc": pred.mean - loc, "q025-loc": low - loc, "q975-loc": high - loc}
    return {
        "x_sum": float(cx.sum()),
        "y_sum": float(cy.sum()),
        **{
            key: [[float(f"{v:.{SIGNIFICANT}g}") for v in row[::OUTPUT_STEP]] for row in value]
            for key, value in fields.items()
        },
    }


def main() -> None:
    out = {"delta": DELTA, "seed": SEED, "queries": QUERIES, "output_step": OUTPUT_STEP, "cases": []}
    for name, network, sizes in CASES:
        method = method_of(name, network)
        for n in sizes:
            out["cases"].append({"model": name, "network": network, "n": n, **answers(method, network, n)})
    PATH.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes, {len(out['cases'])} cases)")


if __name__ == "__main__":
    main()

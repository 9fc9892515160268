"""Why no checkpoint trains on shifted queries (issue 29, item 6): the targets it would have to predict.

A PFN here predicts each query's residual from the physics base fit in units of the context's own residual
scale, over bars fixed at training start (models.train: `_set_borders`; a warm start keeps its init weights'
borders). This draws batches of the training prior of the feeder-agnostic config with `p_shifted` 0 and 1
(every dataset's queries moved off the context: load growth, PV export, a wider spread, another season;
models/priors/shift.py) on a few of its random feeders, and prints the standardised targets' |quantiles|
beside the bars' range: shifted queries land hundreds to tens of thousands of scales out, where the bars'
half-normal tails give NLLs of 1e6 and more.

    .venv/bin/python bench/shifted_targets.py
    .venv/bin/python bench/shifted_targets.py --config models/configs/any-transformer-dva-fast-probe.json  # the probe's unit
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.config import TrainConfig  # noqa: E402
from models.train import Trainer, _generator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "models" / "configs" / "any-transformer-dva-fast.json"
INIT = ROOT / "models" / "registry" / "transformer-dva-fast" / "0.2.2" / "model.safetensors"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="a training config (its model's target_scale)")
    config = parser.parse_args().config
    print(f"{config}: target_scale {TrainConfig.load(config).model.target_scale}")
    for p_shifted in (0.0, 1.0):
        cfg = TrainConfig.load(config)
        cfg = dataclasses.replace(cfg, prior={**cfg.prior, "p_shifted": p_shifted, "feeder_seeds": [100000, 100004]})
        trainer = Trainer(cfg, tempfile.mkdtemp(), init_weights=INIT, init_partial=True)
        g = _generator(7, -2)
        values = []
        for _ in range(3):
            n_context = 300
            batch = trainer._bind(trainer.prior.sample(8, n_context + 100, g, n_context=n_context))
            with torch.no_grad():
                values.append(trainer.standardised_targets(trainer._split(batch, n_context, g)).abs().flatten())
        v = torch.cat(values)
        quantiles = ", ".join(f"{float(v.quantile(q)):.3g}" for q in (0.5, 0.9, 0.99))
        borders = trainer.model.borders
        print(
            f"p_shifted {p_shifted}: |standardised target| median, 90th, 99th percentile {quantiles}; "
            f"max {float(v.max()):.3g}; bars span {float(borders[0]):.2f}..{float(borders[-1]):.2f}"
        )


if __name__ == "__main__":
    main()

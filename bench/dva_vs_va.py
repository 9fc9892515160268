"""DVA vs vanilla attention at equal training budgets on the paper's GP priors (1-D and 5-D).

Trains the same small Transformer twice per dimension — attention="dva" and attention="va",
same steps, data stream, seed and size — then prints the validation NLL and the MSE of the
predictive mean on held-out prior datasets, next to the MSE of the exact GP posterior mean
with the prior's true hyperparameters (the Bayes-optimal answer the PFN approximates).

    .venv/bin/python bench/dva_vs_va.py [--steps 400] [--dims 1 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import tempfile
import time

import torch

from models.bar_distribution import BarDistribution
from models.config import ModelConfig, TrainConfig
from models.priors.gp import PAPER_GP_PRIORS
from models.train import Trainer

# Smaller than Table 12 so both variants train in minutes on a CPU; identical for both.
MODEL = ModelConfig(
    d_in=1, emb_dim=64, value_dim=64, n_layers=2, n_heads=4, ffn_dim=128, head_dim=64, n_bars=100, base="none"
)


def gp_posterior_mse(prior, cx, cy, qx, qy) -> float:
    """MSE of the exact GP posterior mean with the prior's own hyperparameters."""

    def kernel(a, b):
        return prior.variance * torch.exp(-0.5 * torch.cdist(a, b).pow(2) / prior.lengthscale**2)

    cx, qx = cx.double(), qx.double()
    mean = cy.mean(dim=1, keepdim=True)  # the shift is unknown to the GP: centre on the context
    k_cc = kernel(cx, cx) + prior.noise * torch.eye(cx.shape[1], dtype=torch.float64)
    alpha = torch.linalg.solve(k_cc, cy - mean)
    pred = kernel(qx, cx) @ alpha + mean
    return float((pred - qy).pow(2).mean())


def evaluate(trainer: Trainer, prior_cfg) -> tuple[float, float, float]:
    """Validation NLL, PFN mean MSE and GP MSE on the trainer's fixed validation datasets."""
    cfg = trainer.config
    n_context = max(cfg.n_context)
    x, y = trainer.val_batches[0].x, trainer.val_batches[0].y  # one feeder: every dataset in one batch
    cx, cy, qx, qy = x[:, :n_context], y[:, :n_context], x[:, n_context:], y[:, n_context:]
    trainer.model.eval()
    with torch.no_grad():
        logits, loc, scale = trainer.model(cx, cy, qx)
        bar = BarDistribution(trainer.model.borders)
        mean = (loc + scale * bar.mean(logits).double()).transpose(-1, -2)
    return trainer.validate(), float((mean - qy).pow(2).mean()), gp_posterior_mse(prior_cfg, cx, cy, qx, qy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--dims", type=int, nargs="+", default=[1, 5])
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(f"{'dim':>3} {'attention':>9} {'steps':>6} {'val NLL':>9} {'PFN MSE':>10} {'GP MSE':>10} {'train s':>8}")
    for dim in args.dims:
        prior = PAPER_GP_PRIORS[dim]
        n_points = 100 if dim <= 2 else 400
        for attention in ("dva", "va"):
            config = TrainConfig(
                model=dataclasses.replace(MODEL, d_in=dim, attention=attention),
                prior=prior.to_dict(),
                steps=args.steps,
                batch_size=16,
                lr=1e-3,
                warmup_steps=max(1, args.steps // 10),
                n_context=(n_points // 10, n_points - 50),
                n_query=50,
                val_every=args.steps,
                val_datasets=32,
                border_samples=64,
                checkpoint_minutes=1e9,
                seed=0,
            )
            with tempfile.TemporaryDirectory() as run_dir:
                trainer = Trainer(config, run_dir)
                started = time.perf_counter()
                trainer.run(show_progress=False)
                seconds = time.perf_counter() - started
                nll, mse, gp_mse = evaluate(trainer, prior)
            print(
                f"{dim:>3} {attention:>9} {args.steps:>6} {nll:>9.3f} {mse:>10.3e} {gp_mse:>10.3e} {seconds:>8.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()

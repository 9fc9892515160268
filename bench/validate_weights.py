"""Validation NLL of trained weights on many prior datasets, side by side.

A run picks its best step on its config's few validation datasets (16), which flatters the pick;
this scores any number of weights files on more datasets, drawn with another seed, so versions
can be compared on data none of them was selected on.

    .venv/bin/python bench/validate_weights.py --config models/configs/ieee33-transformer-dva.json \
        --datasets 128 --seed 12345 WEIGHTS.safetensors [WEIGHTS ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.config import TrainConfig  # noqa: E402
from models.train import Trainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("weights", nargs="+", type=Path, help="model.safetensors files of one architecture")
    parser.add_argument("--config", required=True, type=Path, help="the TrainConfig the weights were trained with")
    parser.add_argument("--datasets", type=int, default=128, help="validation datasets drawn from the config's prior")
    parser.add_argument("--seed", type=int, default=12345, help="seed of those datasets (a run validates with its own)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = dataclasses.replace(TrainConfig.load(args.config), val_datasets=args.datasets, seed=args.seed)
    print(f"{args.datasets} validation datasets of {args.config}'s prior, seed {args.seed}")
    for weights in args.weights:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as run_dir:
            nll = Trainer(config, run_dir, init_weights=weights).validate()
        print(f"{weights}: val NLL {nll:.4f} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()

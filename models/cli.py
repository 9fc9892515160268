"""`gridpfn train`, `gridpfn export` and `gridpfn measure-bias`: train on a prior, publish a run into the
registry, measure a checkpoint's held-out calibration bias (models.heldout_bias)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    train = subparsers.add_parser("train", help="train a DVA-PFN on a prior (resumable)")
    train.add_argument("--config", required=True, type=Path, help="TrainConfig JSON file")
    train.add_argument("--run-dir", type=Path, help="where checkpoints go (default runs/<config stem>)")
    train.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    train.add_argument("--max-minutes", type=float, help="stop (with a checkpoint) after this many minutes")
    train.add_argument("--steps", type=int, help="override the config's total steps (e.g. to extend a run)")
    train.add_argument("--lr", type=float, help="override the config's peak learning rate")
    train.add_argument(
        "--network",
        help="train for this feeder instead of the config's (a gridsim built-in "
        "name): the prior's network, the model's inputs and load positions",
    )
    train.add_argument(
        "--init-weights",
        type=Path,
        help="start a new run from these weights (e.g. a registry checkpoint's model.safetensors): "
        "fresh optimizer, the config's warmup and cosine schedule; recorded in the card",
    )
    train.add_argument(
        "--init-partial",
        action="store_true",
        help="with --init-weights from a model of other widths: tensors whose name and shape match "
        "transfer, the rest start fresh (e.g. a narrow y stream beside a teacher's x stream)",
    )
    train.set_defaults(func=_train)

    export = subparsers.add_parser("export", help="publish a run's best weights as a registry checkpoint")
    export.add_argument("--run-dir", required=True, type=Path)
    export.add_argument("--name", required=True)
    export.add_argument("--version", required=True)
    export.add_argument("--registry", type=Path, help="registry root (default: the package's models/registry)")
    export.add_argument("--card", type=Path, help="JSON with extra card fields (e.g. the accuracy summary)")
    export.set_defaults(func=_export)

    bias = subparsers.add_parser(
        "measure-bias",
        help="measure how far a checkpoint's held-out calibration pass "
        "overstates new queries' errors, on its prior (models.heldout_bias)",
    )
    bias.add_argument("checkpoint", type=Path, help="a registry checkpoint directory (model.safetensors + card.json)")
    bias.add_argument("--datasets", type=int, default=64, help="prior datasets to measure on (default 64)")
    bias.add_argument("--seed", type=int, default=0)
    bias.add_argument("--write", action="store_true", help="store the result as the card's `calibration`")
    bias.set_defaults(func=_measure_bias)


def _train(args: argparse.Namespace) -> int:
    import dataclasses

    from models.config import TrainConfig
    from models.train import Trainer, for_network

    config = TrainConfig.load(args.config)
    if args.network:
        config = for_network(config, args.network)
    if args.steps:
        config = dataclasses.replace(config, steps=args.steps)
    if args.lr:
        config = dataclasses.replace(config, lr=args.lr)
    run_dir = args.run_dir or Path("runs") / (args.config.stem + (f"-{args.network}" if args.network else ""))
    if args.init_partial and not args.init_weights:
        raise SystemExit("--init-partial: needs --init-weights")
    trainer = Trainer(
        config, run_dir, resume=args.resume, init_weights=args.init_weights, init_partial=args.init_partial
    )
    progress = trainer.run(max_minutes=args.max_minutes)
    log.info(
        "stopped at step %d, best validation NLL %.4f at step %d",
        progress.step,
        progress.best_val_nll,
        progress.best_step,
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    from models.export import export_run
    from models.registry import DEFAULT_ROOT

    extra = json.loads(args.card.read_text()) if args.card else {}
    out = export_run(args.run_dir, args.name, args.version, args.registry or DEFAULT_ROOT, extra)
    print(out)
    return 0


def _measure_bias(args: argparse.Namespace) -> int:
    from models.heldout_bias import measure
    from models.registry import update_card

    if args.datasets < 8:
        raise SystemExit(f"--datasets: expected at least 8 datasets for a bootstrap interval, got {args.datasets}")
    entry = measure(args.checkpoint, datasets=args.datasets, seed=args.seed)
    print(json.dumps(entry, indent=2))
    if args.write:
        log.info("wrote %s", update_card(args.checkpoint, "calibration", entry))
    return 0

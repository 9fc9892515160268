"""Publish a training run's best weights as a registry checkpoint with its model card."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from gridsim.network import network
from models.config import TrainConfig
from models.model import DVAPFN, PHYSICS_CONTEXT_SIZES
from models.physics_fit import ANY_FEATURES, ANY_OUTPUTS
from models.registry import EVERY_NETWORK, write_checkpoint
from models.train import LATEST, init_record


def _context_sizes(config: TrainConfig) -> dict[str, int]:
    """The physics base serves any context in PHYSICS_CONTEXT_SIZES; other bases what they trained on."""
    low, high = PHYSICS_CONTEXT_SIZES if config.model.base == "physics" else config.n_context
    return {"min": low, "max": high}


def export_run(
    run_dir: str | Path, name: str, version: str, registry_root: str | Path, extra: dict[str, Any] | None = None
) -> Path:
    """Card = architecture, prior, feature/output order, context sizes, training record, extras."""
    run_dir = Path(run_dir)
    config = TrainConfig.load(run_dir / "config.json")
    latest = json.loads((run_dir / LATEST).read_text())["checkpoint"]
    progress = json.loads((run_dir / latest / "progress.json").read_text())
    model = DVAPFN(config.model)
    model.load_state_dict(load_file(str(run_dir / "best.safetensors")))
    prior = config.prior_config()
    threads = progress.get("threads") or 1
    if config.model.any_network:  # one checkpoint for every feeder: its widths are each network's
        served: dict[str, Any] = {
            "network": EVERY_NETWORK,
            "features": ANY_FEATURES,
            "outputs": ANY_OUTPUTS,
        }
    else:
        net = network(getattr(prior, "network", "ieee33"))
        served = {"network": net.name, "features": list(net.feature_names), "outputs": list(net.output_names)}
    card = {
        "name": name,
        "version": version,
        "architecture": {
            "backbone": config.model.backbone,
            "attention": config.model.attention,
            "base": config.model.base,
        },
        **served,
        "prior": prior.to_dict(),
        "context_size": _context_sizes(config),
        "training": {
            "steps": progress["step"],
            "best_step": progress["best_step"],
            "datasets": progress["datasets_seen"],
            "batch_size": config.batch_size,
            "wall_hours": round(progress["train_seconds"] / 3600, 3),
            "device": progress["device"],
            "cpu_threads": threads if progress["device"] == "cpu" else None,
            "cpu_hours_upper_bound": round(progress["train_seconds"] / 3600 * threads, 3)
            if progress["device"] == "cpu"
            else None,
            "lr": config.lr,
            "seed": config.seed,
            **({"initialised_from": progress["init"]} if progress.get("init") else {}),
            **(
                {
                    "distilled_from": {
                        **init_record(Path(config.teacher) / "model.safetensors"),
                        "distill_weight": config.distill_weight,
                    }
                }
                if config.teacher
                else {}
            ),
        },
        "validation_nll": progress["best_val_nll"],
        "validation_nll_units": "standardised residual (z) of the prior's held-out points",
        **(extra or {}),
    }
    return write_checkpoint(model, card, Path(registry_root) / name / version)

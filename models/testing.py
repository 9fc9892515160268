"""Tiny checkpoints for tests: real files through the real registry, no training needed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import torch

from gridsim.network import network
from models.config import ModelConfig
from models.model import DVAPFN
from models.physics_fit import ANY_FEATURES, ANY_OUTPUTS
from models.registry import EVERY_NETWORK, write_checkpoint

TINY_CONFIG = ModelConfig(
    emb_dim=16, value_dim=16, n_layers=2, n_heads=4, ffn_dim=32, head_dim=32, n_bars=32, cnn_channels=4
)


def tiny_model(config: ModelConfig = TINY_CONFIG, seed: int = 0) -> DVAPFN:
    """A random-init model whose head is not zero, so outputs depend on the inputs."""
    torch.manual_seed(seed)
    model = DVAPFN(config)
    torch.nn.init.normal_(cast(torch.nn.Linear, model.head[-1]).weight, std=0.1)
    return model


def tiny_card(name: str, version: str = "0.0.1", feeder: str = "ieee33") -> dict[str, Any]:
    net = network(feeder)
    return {
        "name": name,
        "version": version,
        "description": "untrained tiny model for tests; its predictions are not meaningful",
        "architecture": {"backbone": "transformer", "attention": "dva"},
        "network": feeder,
        "features": list(net.feature_names),
        "outputs": list(net.output_names),
        "context_size": {"min": 8, "max": 2000},
        "training": {"steps": 0},
    }


# A tiny checkpoint of any feeder (ModelConfig.inputs="principal"): served on every network, built-in or uploaded.
TINY_ANY_CONFIG = replace(TINY_CONFIG, d_in=0, base="physics", leverage="loads", inputs="principal", n_principal=4)


def tiny_any_card(name: str, version: str = "0.0.1") -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "description": "untrained tiny model of any feeder for tests; its predictions are not meaningful",
        "architecture": {"backbone": "transformer", "attention": "dva", "base": "physics"},
        "network": EVERY_NETWORK,
        "features": ANY_FEATURES,
        "outputs": ANY_OUTPUTS,
        "context_size": {"min": 16, "max": 10_000},
        "training": {"steps": 0},
    }


def build_tiny_registry(
    root: str | Path,
    names: tuple[str, ...] = ("tiny-dva",),
    config: ModelConfig = TINY_CONFIG,
    networks: tuple[str, ...] = ("ieee33",),
    any_network: tuple[str, ...] = (),
) -> Path:
    """Write one tiny checkpoint per name and network under `root` and return root. Versions are
    directories, so another network's checkpoint of a name lives under `0.0.1-<network>`.
    any_network: names of tiny checkpoints of any feeder (TINY_ANY_CONFIG) to write beside them."""
    root = Path(root)
    for i, name in enumerate(any_network):
        write_checkpoint(tiny_model(TINY_ANY_CONFIG, seed=100 + i), tiny_any_card(name), root / name / "0.0.1")
    for i, name in enumerate(names):
        for feeder in networks:
            net = network(feeder)
            fitted = replace(
                config,
                d_in=net.n_features,
                load_positions=None if feeder == "ieee33" else tuple(int(p) for p in net.load_positions),
            )
            card = tiny_card(name, feeder=feeder)
            if config.base == "physics":
                card["context_size"] = {"min": 16, "max": 10_000}
            version_dir = "0.0.1" if feeder == "ieee33" else f"0.0.1-{feeder}"
            write_checkpoint(tiny_model(fitted, seed=i), card, root / name / version_dir)
    return root

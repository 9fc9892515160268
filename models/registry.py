"""Registry of pretrained checkpoints: `<root>/<name>/<version>/{model.safetensors, card.json}`.

Loading checks each checkpoint (card fields, sha256 of the weights, config, tensor names and
shapes), places it on the GPU when there is one, runs a warm-up forward pass, and refuses a
corrupted or incompatible checkpoint with a clear reason while the others still load.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from models.config import ModelConfig
from models.model import DVAPFN
from models.pfn import PFNMethod

log = logging.getLogger(__name__)

WEIGHTS = "model.safetensors"
CARD = "card.json"
DEFAULT_ROOT = Path(__file__).parent / "registry"
REQUIRED_CARD_FIELDS = ("name", "version", "config", "features", "outputs", "context_size", "weights_sha256")


class CheckpointError(ValueError):
    """A checkpoint that cannot be served, with the reason."""


@dataclass
class LoadedModel:
    name: str
    version: str
    card: dict[str, Any]
    method: PFNMethod
    device: str


@dataclass
class Registry:
    models: dict[str, LoadedModel] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # "<name>/<version>" -> why it was refused

    def get(self, name: str) -> LoadedModel:
        if name not in self.models:
            raise KeyError(name)
        return self.models[name]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def write_checkpoint(model: DVAPFN, card: dict[str, Any], directory: str | Path) -> Path:
    """Write weights then card (with the weights' sha256) atomically into `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (WEIGHTS + ".tmp")
    save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}, str(tmp))
    os.chmod(tmp, 0o644)
    os.replace(tmp, directory / WEIGHTS)
    card = {**card, "config": model.cfg.to_dict(), "weights_sha256": sha256_file(directory / WEIGHTS)}
    card_tmp = directory / (CARD + ".tmp")
    card_tmp.write_text(json.dumps(card, indent=2) + "\n")
    os.replace(card_tmp, directory / CARD)
    return directory


def load_checkpoint(directory: str | Path, device: str | None = None, warmup: bool = True,
                    calibrate: bool = True) -> LoadedModel:
    """Load and check one checkpoint directory; raises CheckpointError with the reason.

    calibrate: the in-context spread calibration of every fit (models.calibration) on or off.
    """
    directory = Path(directory)
    device = device or default_device()
    try:
        card = json.loads((directory / CARD).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{directory}: unreadable {CARD}: {exc}") from exc
    missing = [f for f in REQUIRED_CARD_FIELDS if f not in card]
    if missing:
        raise CheckpointError(f"{directory}: card lacks field(s) {missing}")
    weights = directory / WEIGHTS
    if not weights.exists():
        raise CheckpointError(f"{directory}: {WEIGHTS} is missing")
    actual = sha256_file(weights)
    if actual != card["weights_sha256"]:
        raise CheckpointError(f"{directory}: sha256 of {WEIGHTS} is {actual}, card says {card['weights_sha256']}")
    try:
        cfg = ModelConfig.from_dict(card["config"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{directory}: invalid config: {exc}") from exc
    if len(card["features"]) != cfg.d_in:
        raise CheckpointError(f"{directory}: card lists {len(card['features'])} features, config d_in is {cfg.d_in}")
    model = DVAPFN(cfg)
    _check_tensors(directory, weights, model)
    model.load_state_dict(load_file(str(weights)))
    method = PFNMethod(model, device=device, calibrate=calibrate)
    if warmup:
        _warm_up(method, card)
    return LoadedModel(card["name"], str(card["version"]), {**card, "device": device}, method, device)


def _check_tensors(directory: Path, weights: Path, model: DVAPFN) -> None:
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    try:
        with safe_open(str(weights), framework="pt") as handle:
            found = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
    except Exception as exc:  # safetensors raises its own error types for malformed files
        raise CheckpointError(f"{directory}: unreadable weights: {exc}") from exc
    if set(found) != set(expected):
        raise CheckpointError(
            f"{directory}: tensor names differ from the config's model: missing {sorted(set(expected) - set(found))[:5]}, "
            f"unexpected {sorted(set(found) - set(expected))[:5]}"
        )
    for name, shape in expected.items():
        if found[name] != shape:
            raise CheckpointError(f"{directory}: tensor {name} has shape {found[name]}, config expects {shape}")


def _warm_up(method: PFNMethod, card: dict) -> None:
    """One forward pass at the smallest supported context, so the first request is not slow."""
    rng = np.random.default_rng(0)
    n = int(card["context_size"]["min"])
    k = len(card["outputs"])
    x = rng.normal(size=(n + 4, method.d_in))
    y = x[:, :1] @ np.ones((1, k)) * 1e-3 + 1.0 + 1e-4 * rng.normal(size=(n + 4, k))
    predictive = method.predict(method.fit(x[:n], y[:n]), x[n:])
    if not np.isfinite(predictive.mean).all():
        raise CheckpointError(f"{card['name']}: warm-up produced non-finite predictions")


def load_registry(root: str | Path = DEFAULT_ROOT, device: str | None = None, warmup: bool = True,
                  calibrate: bool = True) -> Registry:
    """Every `<name>/<version>` under root; the newest version of each name is served."""
    registry = Registry()
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"model_dir: {root} is not a directory")
    for card_path in sorted(root.glob(f"*/*/{CARD}")):
        directory = card_path.parent
        key = f"{directory.parent.name}/{directory.name}"
        try:
            loaded = load_checkpoint(directory, device=device, warmup=warmup, calibrate=calibrate)
        except CheckpointError as exc:
            log.error("refusing checkpoint %s: %s", key, exc)
            registry.errors[key] = str(exc)
            continue
        current = registry.models.get(loaded.name)
        if current is None or _version_key(loaded.version) > _version_key(current.version):
            registry.models[loaded.name] = loaded
        log.info("loaded model %s version %s on %s", loaded.name, loaded.version, loaded.device)
    return registry


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in version.replace("-", ".").split("."))

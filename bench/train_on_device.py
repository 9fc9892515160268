"""Train a checkpoint on a GPU lent for a few minutes, and bring its run state back without pickles.

A lease is minutes long and its speed is unknown in advance, so the run is sized on the machine:
train with a schedule far too long for `--probe-minutes`, measure steps per wall second (validation
and checkpoints included), then set the cosine schedule's total steps so it ends when the minutes
are spent, and go on in the same process. The run's state is then written to `--out` as
safetensors and JSON only (the optimizer's moments flattened into `optimizer.safetensors`, its
settings in `optimizer.json`); `unpack` turns that back into a run directory that `gridpfn train
--resume` and `gridpfn export` read.

    python3 bench/train_on_device.py train --config models/configs/ieee33-transformer-dva-fast-v4-gpu.json \\
        --run-dir /tmp/run --out "$OUT" --minutes 7.5 --init-weights models/registry/transformer-dva-fast/0.2.2/model.safetensors
    .venv/bin/python bench/train_on_device.py unpack --state <files from $OUT> --run-dir runs/ieee33-transformer-dva-fast-v4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from models.config import TrainConfig  # noqa: E402
from models.train import LATEST, Trainer  # noqa: E402

log = logging.getLogger("train_on_device")
STATE_FILES = ("config.json", "progress.json", "best.safetensors", "model.safetensors", "optimizer.safetensors")


def train(args: argparse.Namespace) -> None:
    config = TrainConfig.load(args.config)
    started = time.monotonic()
    trainer = Trainer(
        dataclasses.replace(config, steps=10**6), args.run_dir, init_weights=args.init_weights, resume=False
    )
    log.info(
        "device %s (%s), set up in %.1f s", trainer.device, _device_name(trainer.device), time.monotonic() - started
    )
    probe_start = time.monotonic()
    trainer.run(max_minutes=args.probe_minutes, show_progress=False)
    done = trainer.progress.step
    rate = done / (time.monotonic() - probe_start)
    left = args.minutes * 60 - (time.monotonic() - started)
    steps = max(done + 1, done + int(rate * left * args.margin))
    log.info("probe: %d steps at %.2f steps/s; the schedule ends at step %d (%.0f s left)", done, rate, steps, left)
    trainer.config = dataclasses.replace(config, steps=steps)
    trainer.config.save(Path(args.run_dir) / "config.json")
    trainer.run(max_minutes=max(left, 0.0) / 60, show_progress=False)
    p = trainer.progress
    log.info(
        "stopped at step %d of %d after %.1f min: best validation NLL %.4f at step %d",
        p.step,
        steps,
        (time.monotonic() - started) / 60,
        p.best_val_nll,
        p.best_step,
    )
    pack(Path(args.run_dir), Path(args.out), trainer, _device_name(trainer.device))


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def pack(run_dir: Path, out: Path, trainer: Trainer, device_name: str) -> None:
    """The run's latest checkpoint, best weights, config and progress as safetensors + JSON in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    ckpt = run_dir / json.loads((run_dir / LATEST).read_text())["checkpoint"]
    shutil.copy(ckpt / "model.safetensors", out / "model.safetensors")
    best = run_dir / "best.safetensors"  # none before the first validation
    shutil.copy(best if best.exists() else ckpt / "model.safetensors", out / "best.safetensors")
    shutil.copy(run_dir / "config.json", out / "config.json")
    progress = json.loads((ckpt / "progress.json").read_text())
    (out / "progress.json").write_text(json.dumps({**progress, "device_name": device_name}, indent=1))
    state = trainer.optimizer.state_dict()
    tensors = {
        f"{index}.{key}": value.detach().contiguous().cpu()
        for index, entries in state["state"].items()
        for key, value in entries.items()
    }
    save_file(tensors, str(out / "optimizer.safetensors"))
    (out / "optimizer.json").write_text(json.dumps({"param_groups": state["param_groups"]}, indent=1))


def unpack(args: argparse.Namespace) -> None:
    """A resumable run directory from `pack`'s files (the optimizer's state written as torch does here)."""
    state_dir, run_dir = Path(args.state), Path(args.run_dir)
    missing = [name for name in (*STATE_FILES, "optimizer.json") if not (state_dir / name).exists()]
    if missing:
        raise SystemExit(f"--state: {state_dir} lacks {missing}")
    progress = json.loads((state_dir / "progress.json").read_text())
    progress.pop("device_name", None)
    name = f"ckpt-{progress['step']:08d}"
    ckpt = run_dir / name
    ckpt.mkdir(parents=True, exist_ok=True)
    shutil.copy(state_dir / "model.safetensors", ckpt / "model.safetensors")
    shutil.copy(state_dir / "best.safetensors", run_dir / "best.safetensors")
    shutil.copy(state_dir / "config.json", run_dir / "config.json")
    (ckpt / "progress.json").write_text(json.dumps(progress, indent=1))
    flat = load_file(str(state_dir / "optimizer.safetensors"))
    moments: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        index, field = key.split(".", 1)
        moments.setdefault(int(index), {})[field] = value
    groups = json.loads((state_dir / "optimizer.json").read_text())["param_groups"]
    torch.save({"state": moments, "param_groups": groups}, ckpt / "optimizer.pt")
    (run_dir / LATEST).write_text(json.dumps({"checkpoint": name}))
    log.info("run %s at step %d", run_dir, progress["step"])


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(required=True)
    t = sub.add_parser("train")
    t.add_argument("--config", required=True, type=Path)
    t.add_argument("--run-dir", required=True, type=Path)
    t.add_argument("--out", required=True, type=Path)
    t.add_argument("--minutes", type=float, required=True, help="wall minutes for the whole run")
    t.add_argument("--probe-minutes", type=float, default=0.75)
    t.add_argument("--margin", type=float, default=0.95, help="share of the measured rate to plan with")
    t.add_argument("--init-weights", type=Path)
    t.set_defaults(func=train)
    u = sub.add_parser("unpack")
    u.add_argument("--state", required=True, type=Path)
    u.add_argument("--run-dir", required=True, type=Path)
    u.set_defaults(func=unpack)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()

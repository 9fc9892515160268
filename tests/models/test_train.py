"""Training smoke test, resumability and the CLI (tiny models, a few dozen steps)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from models.config import GPPriorConfig, ModelConfig, TrainConfig
from models.train import Trainer, for_network
from service.commands.cli import main

TINY = ModelConfig(
    d_in=1, emb_dim=16, value_dim=16, n_layers=1, n_heads=2, ffn_dim=32, head_dim=32, n_bars=20, base="none"
)


def _config(**overrides) -> TrainConfig:
    base = dict(
        model=TINY,
        prior=GPPriorConfig(dim=1, lengthscale=0.3, variance=1.0, noise=1e-4).to_dict(),
        steps=60,
        batch_size=8,
        lr=3e-3,
        warmup_steps=5,
        n_context=(10, 30),
        n_query=20,
        val_every=20,
        val_datasets=16,
        border_samples=32,
        checkpoint_minutes=100.0,
    )
    return TrainConfig(**{**base, **overrides})


def test_validation_nll_goes_down(tmp_path):
    trainer = Trainer(_config(), tmp_path / "run")
    before = trainer.validate()
    progress = trainer.run(show_progress=False)
    assert progress.step == 60
    assert progress.best_val_nll < before - 0.05, (before, progress.history)
    assert (tmp_path / "run" / "best.safetensors").exists()


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    straight = Trainer(_config(steps=20, val_every=10), tmp_path / "a")
    straight.run(show_progress=False)
    first = Trainer(_config(steps=20, val_every=10), tmp_path / "b")
    first.run(max_minutes=0.0, show_progress=False)  # one step, then a checkpoint
    assert first.progress.step == 1
    resumed = Trainer(_config(steps=20, val_every=10), tmp_path / "b", resume=True)
    assert resumed.progress.step == 1
    resumed.run(show_progress=False)
    for name, tensor in straight.model.state_dict().items():
        torch.testing.assert_close(tensor, resumed.model.state_dict()[name], atol=1e-5, rtol=1e-4)


def test_refuses_to_overwrite_a_run_without_resume(tmp_path):
    Trainer(_config(steps=2), tmp_path / "run").run(show_progress=False)
    with pytest.raises(ValueError, match="run_dir"):
        Trainer(_config(steps=2), tmp_path / "run")


def test_train_and_export_cli(tmp_path):
    cfg_path = tmp_path / "tiny.json"
    _config(
        steps=5,
        val_every=5,
        model=ModelConfig(emb_dim=16, value_dim=16, n_layers=1, n_heads=2, ffn_dim=32, head_dim=32, n_bars=20),
        prior={"kind": "powerflow"},
        n_context=(70, 80),
        n_query=10,
        val_datasets=4,
        batch_size=2,
        border_samples=4,
    ).save(cfg_path)
    run_dir = tmp_path / "run"
    assert main(["train", "--config", str(cfg_path), "--run-dir", str(run_dir)]) == 0
    assert (
        main(
            [
                "export",
                "--run-dir",
                str(run_dir),
                "--name",
                "t",
                "--version",
                "1.0.0",
                "--registry",
                str(tmp_path / "reg"),
            ]
        )
        == 0
    )
    card = json.loads((tmp_path / "reg" / "t" / "1.0.0" / "card.json").read_text())
    assert card["training"]["steps"] == 5 and card["features"][0] == "p_mw_bus2" and len(card["outputs"]) == 32
    weights = load_file(str(tmp_path / "reg" / "t" / "1.0.0" / "model.safetensors"))
    assert weights["borders"].shape == (21,)


def test_sigterm_stops_training_with_a_checkpoint(tmp_path):
    """A background run killed politely (SIGTERM) loses no steps: it checkpoints where it stopped."""
    import signal
    import subprocess
    import sys
    import time

    cfg_path = tmp_path / "long.json"
    _config(steps=1_000_000, val_every=5).save(cfg_path)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.commands.cli", "train", "--config", str(cfg_path), "--run-dir", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "best.safetensors").exists():  # written at the first validation (step 5)
            assert proc.poll() is None and time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    latest = json.loads((run_dir / "latest.json").read_text())["checkpoint"]
    progress = json.loads((run_dir / latest / "progress.json").read_text())
    assert progress["step"] >= 5 and latest == f"ckpt-{progress['step']:08d}"
    assert "stopped by signal" in err


def test_warm_start_from_published_weights_is_recorded_in_the_card(tmp_path):
    """--init-weights: a new run starts from a registry checkpoint's weights (not a fresh init), and
    the exported card names where they came from; a run whose latest checkpoint is gone says how to go on."""
    cfg_path = tmp_path / "tiny.json"
    _config(
        steps=4,
        val_every=2,
        model=ModelConfig(emb_dim=16, value_dim=16, n_layers=1, n_heads=2, ffn_dim=32, head_dim=32, n_bars=20),
        prior={"kind": "powerflow"},
        n_context=(70, 80),
        n_query=10,
        val_datasets=4,
        batch_size=2,
        border_samples=4,
    ).save(cfg_path)
    assert main(["train", "--config", str(cfg_path), "--run-dir", str(tmp_path / "a")]) == 0
    assert (
        main(
            [
                "export",
                "--run-dir",
                str(tmp_path / "a"),
                "--name",
                "t",
                "--version",
                "1.0.0",
                "--registry",
                str(tmp_path / "reg"),
            ]
        )
        == 0
    )
    published = tmp_path / "reg" / "t" / "1.0.0" / "model.safetensors"

    warm = Trainer(TrainConfig.load(cfg_path), tmp_path / "b", init_weights=published)
    for name, tensor in load_file(str(published)).items():
        torch.testing.assert_close(warm.model.state_dict()[name], tensor, atol=0, rtol=0)
    fresh = Trainer(TrainConfig.load(cfg_path), tmp_path / "c")
    assert not torch.equal(fresh.model.head[1].weight, warm.model.head[1].weight)

    assert (
        main(
            [
                "train",
                "--config",
                str(cfg_path),
                "--run-dir",
                str(tmp_path / "d"),
                "--init-weights",
                str(published),
                "--lr",
                "1e-4",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "export",
                "--run-dir",
                str(tmp_path / "d"),
                "--name",
                "t",
                "--version",
                "1.1.0",
                "--registry",
                str(tmp_path / "reg"),
            ]
        )
        == 0
    )
    card = json.loads((tmp_path / "reg" / "t" / "1.1.0" / "card.json").read_text())
    origin = card["training"]["initialised_from"]
    assert (origin["name"], origin["version"], origin["steps"]) == ("t", "1.0.0", 4) and len(origin["sha256"]) == 64
    assert card["training"]["lr"] == 1e-4

    with pytest.raises(ValueError, match="init_weights: .* is not a file"):
        Trainer(TrainConfig.load(cfg_path), tmp_path / "e", init_weights=tmp_path / "missing.safetensors")
    with pytest.raises(ValueError, match="init_weights: .* does not fit"):  # another architecture
        Trainer(
            _config(model=dataclasses.replace(TINY, n_layers=TINY.n_layers + 1)), tmp_path / "f", init_weights=published
        )
    # the same architecture for another width (another feeder): all but the input embedding transfers
    other = Trainer(
        _config(
            model=ModelConfig(
                d_in=1, emb_dim=16, value_dim=16, n_layers=1, n_heads=2, ffn_dim=32, head_dim=32, n_bars=20
            )
        ),
        tmp_path / "g",
        init_weights=published,
    )
    assert other.progress.init["kept_fresh"] == ["embed_x.weight"]
    torch.testing.assert_close(other.model.head[1].weight, warm.model.head[1].weight, atol=0, rtol=0)
    # --init-partial: a narrower y stream inherits the x stream (and whatever else fits); the rest starts fresh
    narrow = dataclasses.replace(TrainConfig.load(cfg_path).model, value_dim=8, value_ffn_dim=16)
    with pytest.raises(ValueError, match="init_weights: .* does not fit"):
        Trainer(_config(model=narrow), tmp_path / "h", init_weights=published)
    student = Trainer(_config(model=narrow), tmp_path / "h", init_weights=published, init_partial=True)
    teacher = load_file(str(published))
    kept = student.progress.init["kept_fresh"]
    assert "layers.0.w_v.weight" in kept and "layers.0.mix_y.up.weight" in kept
    for name in ("embed_x.weight", "layers.0.w_q.weight", "layers.0.w_k.weight", "layers.0.mix_x.up.weight", "borders"):
        assert name not in kept
        torch.testing.assert_close(student.model.state_dict()[name], teacher[name], atol=0, rtol=0)
    with pytest.raises(ValueError, match="init_partial needs the same tensor names"):
        Trainer(
            _config(model=dataclasses.replace(narrow, n_layers=2)),
            tmp_path / "i",
            init_weights=published,
            init_partial=True,
        )

    for ckpt in (tmp_path / "d").glob("ckpt-*"):
        (ckpt / "optimizer.pt").unlink()
    with pytest.raises(ValueError, match="--init-weights"):
        Trainer(TrainConfig.load(cfg_path), tmp_path / "d", resume=True)


def test_network_option_trains_a_physics_model_for_another_feeder(tmp_path):
    """--network: the config's architecture and prior family on Kerber's LV feeder (16 inputs, 17
    outputs at 8 loads): the card lists that feeder's names, and the published model answers it."""
    import gridsim
    from models.registry import load_registry

    cfg_path = tmp_path / "tiny.json"
    _config(
        steps=3,
        val_every=3,
        model=ModelConfig(
            emb_dim=16, value_dim=16, n_layers=1, n_heads=2, ffn_dim=32, head_dim=32, n_bars=20, base="physics"
        ),
        prior={"kind": "powerflow"},
        n_context=(40, 60),
        n_query=10,
        val_datasets=4,
        batch_size=2,
        border_samples=4,
    ).save(cfg_path)
    run_dir = tmp_path / "run"
    assert (
        main(["train", "--config", str(cfg_path), "--network", "kerber_landnetz_kabel_1", "--run-dir", str(run_dir)])
        == 0
    )
    saved = TrainConfig.load(run_dir / "config.json")
    net = gridsim.network("kerber_landnetz_kabel_1")
    assert saved.prior["network"] == net.name and saved.model.d_in == net.n_features == 16
    assert saved.model.load_positions == tuple(net.load_positions.tolist())
    assert (
        main(
            [
                "export",
                "--run-dir",
                str(run_dir),
                "--name",
                "k",
                "--version",
                "0.1.0",
                "--registry",
                str(tmp_path / "reg"),
            ]
        )
        == 0
    )
    card = json.loads((tmp_path / "reg" / "k" / "0.1.0" / "card.json").read_text())
    assert (
        card["network"] == net.name
        and card["features"] == list(net.feature_names)
        and card["outputs"] == list(net.output_names)
    )
    method = load_registry(tmp_path / "reg", warmup=False).models["k"].method
    sim = gridsim.simulate(300, 0.3, seed=2, network=net.name)
    pred = method.predict(method.fit(sim.x[:200], sim.vm_pu[:200]), sim.x[200:])
    assert pred.mean.shape == (100, 17) and bool(np.isfinite(pred.std).all())
    assert np.abs(pred.mean - sim.vm_pu[200:]).mean() < 0.1 * np.abs(sim.vm_pu[200:] - sim.vm_pu[:200].mean(0)).mean()

    with pytest.raises(ValueError, match="--network: only a power-flow prior"):
        for_network(_config(), "ieee33")

"""Distillation: rebinning a teacher's bars onto other borders, and a student that learns them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from models.config import ModelConfig, TrainConfig
from models.distillation import Teacher, cross_entropy, rebin
from models.export import export_run
from models.testing import TINY_CONFIG, build_tiny_registry
from models.train import Trainer


def test_rebin_onto_the_same_borders_is_the_identity():
    borders = torch.tensor([-3.0, -1.0, 0.0, 0.5, 2.0])
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.7, 0.0, 0.0, 0.3]])
    torch.testing.assert_close(rebin(probs, borders, borders), probs)


def test_rebin_spreads_mass_uniformly_and_keeps_the_total():
    borders = torch.tensor([0.0, 1.0, 2.0])
    probs = torch.tensor([0.4, 0.6])
    onto = torch.tensor([-5.0, 0.5, 1.5, 1.75, 9.0])  # splits both bars, reaches beyond both ends
    out = rebin(probs, borders, onto)
    torch.testing.assert_close(out, torch.tensor([0.2, 0.2 + 0.3, 0.15, 0.15]))
    coarse = rebin(
        torch.tensor([0.1, 0.2, 0.3, 0.4]), torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0]), torch.tensor([0.0, 2.0, 4.0])
    )
    torch.testing.assert_close(coarse, torch.tensor([0.3, 0.7]))


def test_cross_entropy_is_smallest_at_the_target():
    target = torch.tensor([[0.1, 0.6, 0.3]])
    at_target = cross_entropy(target.log(), target)
    assert at_target < cross_entropy(torch.zeros(1, 3), target)
    assert at_target < cross_entropy(torch.tensor([[0.0, 0.0, 5.0]]), target)


PHYSICS_TINY = replace(TINY_CONFIG, base="physics", leverage="loads", n_layers=1)


def _config(teacher, **overrides) -> TrainConfig:
    base = dict(
        model=replace(PHYSICS_TINY, n_bars=24),
        prior={"kind": "powerflow"},
        steps=12,
        batch_size=2,
        lr=3e-3,
        warmup_steps=2,
        n_context=(40, 60),
        n_query=10,
        val_every=6,
        val_datasets=2,
        border_samples=4,
        checkpoint_minutes=100.0,
        teacher=str(teacher),
        distill_weight=1.0,
    )
    return TrainConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    root = build_tiny_registry(tmp_path_factory.mktemp("registry"), names=("teacher",), config=PHYSICS_TINY)
    return root / "teacher" / "0.0.1"


def test_student_moves_towards_the_teachers_answers(teacher_dir):
    trainer = Trainer(_config(teacher_dir), teacher_dir.parent.parent / "run")
    gen = torch.Generator().manual_seed(5)
    batch = trainer.prior.sample(2, 60, gen)
    split = trainer._split(batch, 50, gen)

    def gap() -> float:
        with torch.no_grad():
            return float(trainer.loss(split))  # distill_weight 1: the cross-entropy alone

    before = gap()
    trainer.run(show_progress=False)
    assert gap() < before - 0.05, before
    card = export_run(trainer.run_dir, "student", "0.0.1", teacher_dir.parent.parent / "published") / "card.json"
    taught = json.loads(card.read_text())["training"]["distilled_from"]
    assert (taught["name"], taught["version"], taught["distill_weight"]) == ("teacher", "0.0.1", 1.0)


def test_the_teacher_must_share_the_base_fit(teacher_dir, tmp_path):
    with pytest.raises(ValueError, match="teacher"):
        Trainer(_config(teacher_dir, model=replace(PHYSICS_TINY, base="ridge")), tmp_path / "run")
    teacher = Teacher(teacher_dir, torch.device("cpu"))
    assert not any(p.requires_grad for p in teacher.model.parameters())


def test_distill_weight_needs_a_teacher_and_a_share():
    with pytest.raises(ValueError, match="distill_weight"):
        TrainConfig(model=ModelConfig(), distill_weight=0.5)
    with pytest.raises(ValueError, match="distill_weight"):
        TrainConfig(model=ModelConfig(), teacher="x", distill_weight=1.5)

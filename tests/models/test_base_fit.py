"""The base fits behind ModelConfig.base: one per kind, each answering the BaseFit protocol alike."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import gridsim
from models import physics_base
from models.base_fit import MeanBase, RidgeBase
from models.config import ModelConfig
from models.model import base_fit_for
from models.ridge_loo import RIDGE_GRID


def _standardised(n_context: int, n_query: int, seed: int):
    sim = gridsim.simulate(n_context + n_query, 0.3, seed=seed)
    x = torch.as_tensor(sim.x)[None]
    mean, std = physics_base.load_scaling(x[:, :n_context])
    xs = (x - mean[:, None]) / std[:, None]
    return xs[:, :n_context], torch.as_tensor(sim.vm_pu[:n_context])[None], std, xs[:, n_context:]


def test_each_kind_gets_its_own_base_fit():
    assert isinstance(base_fit_for(ModelConfig(base="physics")), physics_base.PhysicsBase)
    ridge = base_fit_for(ModelConfig(base="ridge"))
    assert isinstance(ridge, RidgeBase) and ridge.grid == RIDGE_GRID  # the grid the ridge checkpoints use
    assert isinstance(base_fit_for(ModelConfig(base="none")), MeanBase)
    loads = base_fit_for(ModelConfig(base="physics", leverage="loads", load_positions=(0, 2)))
    assert loads.leverage_from == "loads" and loads.load_positions == (0, 2)


@pytest.mark.parametrize("kind", ["physics", "ridge", "none"])
def test_fit_and_predict_shapes_and_selected_outputs(kind):
    """Training fits every bus and keeps a few: the selected state answers those outputs as the whole does."""
    base = base_fit_for(dataclasses.replace(ModelConfig(), base=kind))
    cx, cy, std, qx = _standardised(120, 7, seed=31)
    fit = base.fit(cx, cy, std)
    assert fit.residuals.shape == (1, 120, 32) and fit.fitted.n_context == 120
    assert fit.leverage is None if kind == "none" else fit.leverage.shape == (1, 120)
    whole = base.predict(fit.fitted, qx)
    assert whole.loc.shape == (1, 7, 32) and whole.loc.dtype == torch.float64
    assert whole.leverage is None if kind == "none" else whole.leverage.shape == (1, 7)
    pick = torch.tensor([[30, 3, 17]])
    part = base.predict(fit.fitted.select(pick), qx)
    torch.testing.assert_close(part.loc, whole.loc[..., pick[0]], rtol=0, atol=1e-15)
    torch.testing.assert_close(fit.fitted.select(pick).y_mean, fit.fitted.y_mean[:, pick[0]])


def test_ridge_residuals_are_leave_one_out_and_the_mean_base_leaves_deviations():
    """Ridge: a point's residual is larger than its in-sample one (held out, it pulls the fit no more);
    none: the residual is the deviation from the context mean and the prediction that mean."""
    cx, cy, std, qx = _standardised(150, 3, seed=32)
    ridge = RidgeBase().fit(cx, cy, std)
    in_sample = cy - (cx @ ridge.fitted.beta + ridge.fitted.y_mean[:, None, :])
    assert bool((ridge.residuals.abs() >= in_sample.abs() * (1 - 1e-9)).all())
    assert float((ridge.residuals.abs() - in_sample.abs()).max()) > 0
    mean = MeanBase().fit(cx, cy, std)
    torch.testing.assert_close(mean.residuals, cy - cy.mean(dim=1, keepdim=True))
    torch.testing.assert_close(MeanBase().predict(mean.fitted, qx).loc, cy.mean(dim=1, keepdim=True).expand(1, 3, 32))

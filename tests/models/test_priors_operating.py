"""The power-flow prior's operating data (issue 29, item 6): queries beyond the context's regime,
correlated daily profiles, meter noise; and configs written before it still draw what they drew."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from models.config import PowerFlowPriorConfig, TrainConfig
from models.priors import meter
from models.priors.powerflow import PowerFlowPrior
from models.priors.profiles import profile_loads, pv_bell
from models.priors.shift import Shift

ROOT = Path(__file__).resolve().parents[2]
V4 = ROOT / "models" / "configs" / "ieee33-transformer-dva-fast-v4.json"
# One fixed regime (IEEE 33 base loads +-10 %, no DG, no power-factor spread, no noise) so the
# regime a context spans is known exactly.
PLAIN = PowerFlowPriorConfig(
    load_level=(1.0, 1.0),
    delta=(0.1, 0.1),
    pf_spread=(0.0, 0.0),
    p_correlated=0.0,
    p_dg=0.0,
    line_scale=(1.0, 1.0),
    line_jitter=0.0,
)
N_CONTEXT, N_QUERY = 300, 100


def _sample(cfg: PowerFlowPriorConfig, batch: int = 6, seed: int = 0, n_context: int | None = N_CONTEXT):
    prior = PowerFlowPrior(cfg)
    out = prior.sample(batch, N_CONTEXT + N_QUERY, torch.Generator().manual_seed(seed), n_context=n_context)
    return prior, out.x.numpy(), out.y.numpy()


def _outside_share(x: np.ndarray, margin: float = 0.02) -> np.ndarray:
    """Per dataset: the share of queries with some load more than `margin` x its context mean outside
    the context's range of that load."""
    cx, qx = x[:, :N_CONTEXT], x[:, N_CONTEXT:]
    lo, hi = cx.min(axis=1, keepdims=True), cx.max(axis=1, keepdims=True)
    slack = margin * np.abs(cx.mean(axis=1, keepdims=True))
    out = (qx > hi + slack) | (qx < lo - slack)
    return out.any(axis=-1).mean(axis=-1)


# --- configs written before the operating data ---------------------------------------------------
def test_an_old_config_draws_exactly_what_it_drew_before():
    """Fingerprint of transformer-dva-fast's prior (seed 29, 3 datasets of 40 points), taken from
    models/priors/powerflow.py before the operating-data fields existed."""
    cfg = TrainConfig.load(ROOT / "models" / "configs" / "ieee33-transformer-dva-fast.json").prior_config()
    batch = PowerFlowPrior(cfg).sample(3, 40, torch.Generator().manual_seed(29), n_context=30)
    np.testing.assert_allclose(
        batch.x.sum(dim=(1, 2)).numpy(), [277.1906991813642, 303.3172713112474, 334.16128996564663], rtol=1e-12
    )
    np.testing.assert_allclose(
        batch.y.sum(dim=(1, 2)).numpy(), [1170.8512784620364, 1175.364525917111, 1212.26122453907], rtol=1e-12
    )
    np.testing.assert_allclose(
        batch.y[:, 0, 17].numpy(), [0.993441774350151, 0.9963230005169459, 0.9965150914107], rtol=1e-12
    )


def test_every_shipped_config_and_card_prior_still_loads_and_round_trips():
    sources = sorted((ROOT / "models" / "configs").glob("*.json")) + sorted(
        (ROOT / "models" / "registry").glob("*/*/card.json")
    )
    assert len(sources) > 10
    for path in sources:
        data = json.loads(path.read_text())
        prior = data["prior"] if "prior" in data else data["config"]["prior"]
        if prior.get("kind", "powerflow") != "powerflow":
            continue
        cfg = PowerFlowPriorConfig.from_dict(prior)
        assert PowerFlowPriorConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg, path
        if "p_shifted" not in prior:  # written before: every new share off
            assert (cfg.p_shifted, cfg.p_profiles, cfg.p_load_noise, cfg.noisy_queries) == (0.0, 0.0, 0.0, True)


def test_the_v4_config_round_trips_and_turns_the_operating_data_on(tmp_path):
    config = TrainConfig.load(V4)
    config.save(tmp_path / "again.json")
    assert TrainConfig.load(tmp_path / "again.json") == config
    prior = config.prior_config()
    assert isinstance(prior, PowerFlowPriorConfig)
    assert prior.p_profiles > 0 and prior.p_load_noise > 0 and prior.p_noisy > 0 and not prior.noisy_queries
    # shifted queries stay off in training: their residuals are 1e2-1e4 of the context's residual scale,
    # beyond any bar of the model (bench/results/prior-v4.md); the prior draws them when asked (tests below)
    assert prior.p_shifted == 0.0
    assert prior.noise_range == (1e-6, 2e-3) and prior.load_noise == (0.0, 0.02)
    fast = TrainConfig.load(ROOT / "models" / "configs" / "ieee33-transformer-dva-fast.json")
    assert config.model == fast.model  # the same architecture as transformer-dva-fast


@pytest.mark.parametrize(
    ("field", "value"),
    [("p_shifted", 1.5), ("p_profiles", -0.1), ("shift_growth", (0.8, 1.6)), ("load_noise", (0.03, 0.01))],
)
def test_bad_operating_fields_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(PowerFlowPriorConfig(), **{field: value})


# --- queries beyond the context's regime ---------------------------------------------------------
def test_shifted_datasets_put_their_queries_outside_the_contexts_load_range():
    _, x_plain, _ = _sample(PLAIN)
    _, x_shift, y_shift = _sample(dataclasses.replace(PLAIN, p_shifted=1.0))
    assert _outside_share(x_plain).max() < 0.05  # the same regime: queries within the context's range
    assert _outside_share(x_shift).min() >= 0.5, _outside_share(x_shift)
    # the context itself stays in its regime: every load within +-10 % of its base
    base = PowerFlowPrior(PLAIN).net.base_x
    ratio = x_shift[:, :N_CONTEXT] / base
    assert ratio.min() >= 0.9 - 1e-12 and ratio.max() <= 1.1 + 1e-12
    assert np.isfinite(y_shift).all()


def test_growth_and_pv_export_reach_what_planners_ask():
    """Over many shifted datasets: total load growing past 1.5x the context's, and buses exporting."""
    prior, x, _ = _sample(dataclasses.replace(PLAIN, p_shifted=1.0), batch=24, seed=3)
    n = prior.net.n_load
    total = x[..., :n].sum(axis=-1)
    growth = total[:, N_CONTEXT:].max(axis=1) / total[:, :N_CONTEXT].mean(axis=1)
    assert growth.max() > 1.5 and (growth > 1.15).mean() > 0.4, growth
    exporting = (x[:, N_CONTEXT:, :n] < 0).any(axis=(1, 2))
    assert 0.15 < exporting.mean() < 0.85  # some datasets export, not every one
    assert (x[:, :N_CONTEXT, :n] > 0).all()  # never in the context


def test_without_the_context_size_nothing_is_shifted():
    _, x, _ = _sample(dataclasses.replace(PLAIN, p_shifted=1.0), n_context=None)
    assert _outside_share(x).max() < 0.05


def test_a_shifted_profile_context_spans_one_stretch_of_the_year():
    cfg = dataclasses.replace(PLAIN, p_shifted=1.0, season_window=(0.1, 0.2))
    g = torch.Generator().manual_seed(1)
    shift = Shift.draw(cfg, 16, 400, N_CONTEXT, 32, g)
    season = shift.seasons(400, N_CONTEXT, g).numpy()
    start = shift.season_start.numpy()
    offset = (season[:, :N_CONTEXT] - start) % 1.0  # position within the stretch
    assert offset.max() <= 0.2 + 1e-12
    assert np.ptp(season[:, N_CONTEXT:], axis=1).min() > 0.8  # queries from the whole year


# --- correlated daily profiles -------------------------------------------------------------------
def _mean_abs_correlation(p: np.ndarray) -> float:
    """Mean |correlation| between buses' loads over a dataset's points, averaged over datasets."""
    values = []
    for rows in p:
        c = np.corrcoef(rows.T)
        values.append(np.abs(c[~np.eye(len(c), dtype=bool)]).mean())
    return float(np.mean(values))


def test_profile_loads_are_correlated_across_buses_where_iid_ones_are_not():
    prior, x_iid, _ = _sample(PLAIN, n_context=None)
    _, x_prof, _ = _sample(dataclasses.replace(PLAIN, p_profiles=1.0), n_context=None)
    n = prior.net.n_load
    iid, prof = _mean_abs_correlation(x_iid[..., :n]), _mean_abs_correlation(x_prof[..., :n])
    assert iid < 0.1 and prof > 0.4, (iid, prof)


def test_a_day_of_profile_loads_is_smooth():
    """Consecutive 15-minute steps move far less than the day's swing (iid draws would move as much)."""
    g = torch.Generator().manual_seed(2)
    t = (torch.arange(96, dtype=torch.float64) / 96).expand(8, 96)
    season = torch.full((8, 96), 0.3, dtype=torch.float64)
    loads = profile_loads(t, season, (0.3, 0.6), (0.005, 0.005), (0.0, 0.3), 32, g).numpy()
    step = np.abs(np.diff(loads, axis=1)).mean(axis=1)  # (8, 32)
    swing = loads.max(axis=1) - loads.min(axis=1)
    assert (step < 0.15 * swing).all()
    lag1 = [np.corrcoef(d[:-1, b], d[1:, b])[0, 1] for d in loads for b in range(32)]
    assert np.min(lag1) > 0.8
    assert loads.min() > 0  # a load stays a load


def test_pv_follows_a_daylight_bell():
    t = torch.linspace(0, 1, 97, dtype=torch.float64)[None]
    winter, summer = (pv_bell(t, torch.full_like(t, s))[0].numpy() for s in (0.0, 0.5))
    for day in (winter, summer):
        assert day[0] == 0 and day[-1] == 0 and day.min() >= 0 and day.max() <= 1
        assert np.argmax(day) == 48  # noon
    assert (summer > 0).sum() > (winter > 0).sum() and summer.max() > winter.max()


def test_profile_datasets_with_pv_solve_and_export_at_noon():
    cfg = dataclasses.replace(PLAIN, p_profiles=1.0, p_dg=1.0, dg_buses=(6, 6), dg_level=(1.5, 1.5), pv_cloud=(0, 0))
    prior, x, y = _sample(cfg, batch=4, n_context=None)
    n = prior.net.n_load
    assert np.isfinite(y).all() and (x[..., :n] < 0).any()  # PV bigger than the load exports at midday


# --- meter noise ---------------------------------------------------------------------------------
def test_voltage_noise_is_log_uniform_up_to_2e_3():
    cfg = dataclasses.replace(PLAIN, p_noisy=1.0, noise_range=(1e-6, 2e-3))
    std = meter.voltage_noise_std(cfg, 4000, torch.Generator().manual_seed(0)).numpy()
    assert std.min() >= 1e-6 and std.max() <= 2e-3
    logs = np.log(std)
    assert abs(np.median(logs) - (math.log(1e-6) + math.log(2e-3)) / 2) < 0.3  # log-uniform: geometric middle
    assert (std > 1e-3).mean() > 0.05  # the loud end is drawn


def test_voltage_noise_stays_on_the_context_and_queries_keep_the_truth():
    _, x0, y0 = _sample(PLAIN, seed=4)
    _, x1, y1 = _sample(dataclasses.replace(PLAIN, p_noisy=1.0, noise_range=(1e-3, 1e-3), noisy_queries=False), seed=4)
    np.testing.assert_array_equal(x0, x1)  # the same loads: noise is drawn after them
    error = y1 - y0
    assert abs(error[:, :N_CONTEXT].std() - 1e-3) < 5e-5
    assert np.abs(error[:, N_CONTEXT:]).max() == 0.0


def test_load_readings_are_noisy_but_the_voltages_come_from_the_true_loads():
    _, x0, y0 = _sample(PLAIN, seed=5)
    _, x1, y1 = _sample(dataclasses.replace(PLAIN, p_load_noise=1.0, load_noise=(0.02, 0.02)), seed=5)
    np.testing.assert_array_equal(y0, y1)  # solved on the true loads
    rel = x1 / x0 - 1.0
    assert abs(rel[:, :N_CONTEXT].std() - 0.02) < 1e-3
    assert np.abs(rel[:, N_CONTEXT:]).max() == 0.0  # the queries are what is asked: exact


def test_the_v4_prior_trains_and_resumes(tmp_path):
    """The trainer passes its context size to the prior; a tiny run on the v4 prior checkpoints and resumes."""
    from models.train import Trainer

    config = dataclasses.replace(
        TrainConfig.load(V4),
        steps=4,
        batch_size=2,
        n_context=(20, 40),
        n_query=10,
        val_datasets=2,
        val_every=2,
        border_samples=4,
        warmup_steps=1,
    )
    first = Trainer(config, tmp_path / "run")
    first.run(max_minutes=0.0, show_progress=False)
    assert first.progress.step == 1
    resumed = Trainer(config, tmp_path / "run", resume=True)
    progress = resumed.run(show_progress=False)
    assert progress.step == 4 and math.isfinite(progress.best_val_nll)

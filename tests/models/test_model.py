"""DVA-PFN properties; each would fail for a model that broke the DVA structure."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.config import ModelConfig
from models.model import DVAPFN, TokenConv
from models.pfn import PFNMethod
from models.testing import TINY_CONFIG, tiny_model

D, K = 12, 3


def _data(n=40, m=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    cx = torch.randn(2, n, D, generator=g)
    cy = (cx[..., :K] * 0.1 + 0.05 * torch.randn(2, n, K, generator=g)).double() + 1.0
    qx = torch.randn(2, m, D, generator=g)
    return cx, cy, qx


def _model(**overrides) -> DVAPFN:
    cfg = dataclasses.replace(TINY_CONFIG, d_in=D, **overrides)
    model = tiny_model(cfg)
    for p in model.parameters():  # move off the symmetric init so every property is exercised
        p.data.add_(0.05 * torch.randn_like(p))
    return model.eval()


BACKBONES = [dict(backbone="transformer"), dict(backbone="cnn"), dict(backbone="transformer", base="none")]


@pytest.mark.parametrize("overrides", BACKBONES)
def test_context_targets_change_no_attention_weight(overrides):
    model = _model(**overrides)
    cx, cy, qx = _data()
    logs = []
    for y in (cy, cy + torch.randn_like(cy)):
        log: list = []
        logits, _, _ = model.predict(model.encode_context(cx, y), qx, attention_log=log)
        logs.append((log, logits))
    for a, b in zip(logs[0][0], logs[1][0]):
        assert torch.equal(a, b)
    assert not torch.allclose(logs[0][1], logs[1][1])  # the targets did change the prediction


def test_vanilla_attention_weights_do_depend_on_targets():
    model = _model(attention="va")
    cx, cy, qx = _data()
    log_a: list = []
    log_b: list = []
    model.predict(model.encode_context(cx, cy), qx, attention_log=log_a)
    model.predict(model.encode_context(cx, cy + torch.randn_like(cy)), qx, attention_log=log_b)
    assert not torch.allclose(log_a[0], log_b[0])


@pytest.mark.parametrize("overrides", BACKBONES + [dict(attention="va")])
def test_permuting_context_rows_leaves_predictions_unchanged(overrides):
    model = _model(**overrides)
    cx, cy, qx = _data()
    perm = torch.randperm(cx.shape[1])
    a = model(cx, cy, qx)
    b = model(cx[:, perm], cy[:, perm], qx)
    torch.testing.assert_close(a[0], b[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a[1], b[1], atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("overrides", BACKBONES)
def test_query_prediction_independent_of_other_queries(overrides):
    model = _model(**overrides)
    cx, cy, qx = _data(m=9)
    full = model(cx, cy, qx)[0]
    alone = model(cx, cy, qx[:, 4:5])[0]
    torch.testing.assert_close(full[:, :, 4:5], alone, atol=1e-5, rtol=1e-5)
    other = model(cx, cy, torch.cat([qx[:, 4:5], torch.randn(2, 20, D)], dim=1))[0]
    torch.testing.assert_close(other[:, :, :1], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("overrides", BACKBONES)
def test_k_outputs_in_one_call_equal_k_single_output_calls(overrides):
    model = _model(**overrides)
    cx, cy, qx = _data()
    joint = model(cx, cy, qx)
    for j in range(K):
        single = model(cx, cy[..., j : j + 1], qx)
        torch.testing.assert_close(joint[0][:, j : j + 1], single[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(joint[1][:, j : j + 1], single[1], atol=1e-9, rtol=1e-9)


def test_cached_context_equals_uncached_and_chunking_is_exact():
    model = _model()
    cx, cy, qx = _data(m=50)
    method = PFNMethod(model, query_chunk=7)
    cache = method.fit(cx[0].numpy(), cy[0].numpy())
    chunked = method.predict(cache, qx[0].numpy())
    with torch.no_grad():
        direct_logits, direct_loc, _ = model(cx[:1], cy[:1], qx[:1])
    np.testing.assert_allclose(chunked.logits.numpy(), direct_logits[0].transpose(0, 1).double().numpy(), atol=1e-5)
    np.testing.assert_allclose(chunked.loc, direct_loc[0].T.numpy(), atol=1e-12)
    again = method.predict(cache, qx[0].numpy())
    np.testing.assert_array_equal(again.mean, chunked.mean)


def test_ridge_base_recovers_a_linear_map_exactly():
    """With base='ridge' a noiseless linear target is the location itself (residual ~ 0)."""
    model = _model()
    g = torch.Generator().manual_seed(3)
    cx = torch.randn(1, 200, D, generator=g)
    w = torch.randn(D, K, generator=g, dtype=torch.float64)
    cy = cx.double() @ w + 1.0
    qx = torch.randn(1, 30, D, generator=g)
    _, loc, _ = model(cx, cy, qx)
    truth = (qx.double() @ w + 1.0)[0].T
    assert (loc[0] - truth).abs().max() < 1e-3 * truth.std()


def test_config_round_trips_through_a_file(tmp_path):
    cfg = ModelConfig(backbone="cnn", n_layers=2, emb_dim=32, value_dim=32, n_heads=4, leverage="loads")
    cfg.save(tmp_path / "m.json")
    assert ModelConfig.load(tmp_path / "m.json") == cfg
    with pytest.raises(ValueError, match="backbone"):
        ModelConfig(backbone="rnn")
    with pytest.raises(ValueError, match="leverage"):
        ModelConfig(leverage="tree")
    with pytest.raises(ValueError, match="unknown field"):
        ModelConfig.from_dict({"width": 3})
    with pytest.raises(ValueError, match="value_ffn_dim: expected a positive width"):
        ModelConfig(value_ffn_dim=0)


def test_value_stream_has_its_own_feed_forward_width():
    """value_ffn_dim narrows the y stream's feed-forward only; None keeps ffn_dim for both streams."""
    layer = DVAPFN(dataclasses.replace(TINY_CONFIG, value_ffn_dim=8)).layers[0]
    assert layer.mix_y.up.out_features == 8 and layer.mix_x.up.out_features == TINY_CONFIG.ffn_dim
    same = DVAPFN(TINY_CONFIG).layers[0]
    assert same.mix_y.up.out_features == same.mix_x.up.out_features == TINY_CONFIG.ffn_dim


def test_pfn_method_rejects_bad_inputs():
    method = PFNMethod(_model())
    x = np.random.rand(20, D)
    y = np.random.rand(20, K)
    with pytest.raises(ValueError, match="context_x"):
        method.fit(x[:, :5], y)
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="row 3, column 2"):
        method.fit(bad, y)
    with pytest.raises(ValueError, match="context_y"):
        method.fit(x, y[:10])
    cache = method.fit(x, y)
    with pytest.raises(ValueError, match="query_x"):
        method.predict(cache, np.random.rand(4, D + 1))


# -- the inference fast paths compute what the plain formulation computes --------------------


@pytest.mark.parametrize("overrides", [dict(backbone="transformer"), dict(backbone="cnn")])
def test_split_head_equals_head_over_the_concatenation(overrides):
    """The head's LayerNorm + Linear split over hy and hx: same values and same gradients."""
    model = _model(**overrides)
    g = torch.Generator().manual_seed(1)
    hx = torch.randn(2, 7, TINY_CONFIG.emb_dim, generator=g) * 3 + 1.5  # offset: the joint mean matters
    hy = torch.randn(2, K, 7, TINY_CONFIG.value_dim, generator=g) - 2.0
    plain = model.head(torch.cat([hy, hx[:, None].expand(-1, K, -1, -1)], dim=-1))
    grads_plain = torch.autograd.grad(plain.square().sum(), list(model.head.parameters()))
    split = model._split_head(hx, hy)
    grads_split = torch.autograd.grad(split.square().sum(), list(model.head.parameters()))
    torch.testing.assert_close(split, plain, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads_split, grads_plain):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_token_conv_equals_conv1d_modules():
    """TokenConv's matmul formulation equals running its nn.Conv1d modules per token."""
    torch.manual_seed(0)
    conv = TokenConv(dim=16, channels=4, kernel_size=5)
    for p in conv.parameters():
        p.data.normal_()
    h = torch.randn(2, 3, 11, 16)
    t = conv.norm(h).reshape(-1, 1, 16)
    plain = conv.project(F.gelu(conv.depthwise(F.gelu(conv.expand(t))))).reshape(h.shape)
    torch.testing.assert_close(conv(h), plain, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("overrides", BACKBONES + [dict(attention="va")])
def test_inference_in_blocks_equals_one_block(overrides):
    """Inference runs points in small blocks per dataset; training (autograd) in one block."""
    model = _model(**overrides)
    cx, cy, qx = _data(n=40, m=9)
    with torch.enable_grad():  # one block
        whole = model(cx, cy, qx)
    model.tokens_per_block = 2 * K  # blocks of 2 points
    with torch.no_grad():
        blocks = model(cx, cy, qx)
    torch.testing.assert_close(blocks[0], whole[0].detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(blocks[1], whole[1].detach(), atol=0, rtol=0)

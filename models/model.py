"""DVA-PFN: a prior-data fitted network whose attention sees inputs only.

Read top to bottom:
1. A base fit in closed form inside the forward pass (`models/base_fit.py`): `base="physics"` fits
   the feeder's DistFlow structure (linear loads plus squared branch flows, topology recovered from
   the context; `models/physics_base.py`), `base="ridge"` a ridge regression. Its leave-one-out
   residuals are what the attention layers carry as values, and its query prediction is the
   location the bar distribution is placed around — the role a mean function plays in a GP.
   (`base="none"` gives the plain PFN of the paper.)
2. Two streams: the input stream `hx` (from x only) makes attention queries and keys; the
   output stream `hy` (from context targets only) makes values. The attention weights are
   computed once per layer and reused for all k outputs.
3. Context points attend to context points; queries attend to context points only, so the
   context can be encoded once (`encode_context`) and any number of query chunks answered
   against it (`predict`). Training uses the very same two calls; at inference both run the
   points in small blocks (`_in_blocks`), which is exact and keeps the CPU's work in cache.
4. A head maps each query's streams to logits over the bars of a bar distribution of the
   standardised residual.

`attention="va"` is the vanilla PFN for comparison: one joint x+y stream per output that
makes queries, keys and values alike.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from models import physics_base
from models.base_fit import BaseFit, ContextFit, FittedBase, MeanBase, RidgeBase
from models.config import ModelConfig
from models.limits import MAX_CONTEXT_ROWS, MIN_CONTEXT_ROWS
from models.probe_unit import Probe, probe_unit, probe_voltages


def base_fit_for(cfg: ModelConfig, load_positions: Sequence[int] | None = None) -> BaseFit[Any]:
    """The closed-form base fit `cfg.base` names, each kind with the penalties it was trained with
    (`load_positions`: the network's, for a model of any feeder; else the config's)."""
    if cfg.base == "physics":
        return physics_base.PhysicsBase(load_positions if cfg.any_network else cfg.load_positions, cfg.leverage)
    return RidgeBase() if cfg.base == "ridge" else MeanBase()


# A principal direction whose context std is below this share of the first one's carries rounding, not
# load variation: it is left out (its feature is 0) instead of being whitened into noise.
PRINCIPAL_RTOL = 1e-6


@dataclass(frozen=True)
class PrincipalAxes:
    """The context's first r principal directions of its standardised loads: the x stream of a model
    that serves any feeder (`ModelConfig.inputs="principal"`). Whatever the feeder's width, a point
    becomes r whitened coordinates along the directions its context varies in most; the signs are fixed
    so that each direction's largest loading is positive, and a context with fewer directions than r
    leaves the rest 0."""

    axes: torch.Tensor  # (B, d, r) float64 unit directions (zero columns where the context has none)
    std: torch.Tensor  # (B, r) float64 the context's std along each (1 where there is none)

    @staticmethod
    def of(xs: torch.Tensor, r: int) -> PrincipalAxes:
        """From standardised context loads xs (B, n, d), centred on their mean."""
        x = xs.double()
        n, d = x.shape[-2], x.shape[-1]
        variance, vectors = torch.linalg.eigh(x.transpose(-1, -2) @ x / n)  # ascending
        q = min(r, d)
        variance, axes = variance.flip(-1)[..., :q].clamp_min(0.0), vectors.flip(-1)[..., :q]
        biggest = torch.gather(axes, -2, axes.abs().argmax(dim=-2, keepdim=True))
        axes = axes * torch.where(biggest < 0, -1.0, 1.0)
        std = variance.sqrt()
        live = std > PRINCIPAL_RTOL * std[..., :1].clamp_min(1e-300)
        axes, std = axes * live[..., None, :], torch.where(live, std, 1.0)
        if q < r:
            axes = F.pad(axes, (0, r - q))
            std = F.pad(std, (0, r - q), value=1.0)
        return PrincipalAxes(axes, std)

    def features(self, xs: torch.Tensor) -> torch.Tensor:
        """(B, N, r) whitened coordinates of standardised points xs (B, N, d), asinh-compressed: linear
        within the context's spread, logarithmic far beyond it (a far query is "far", not a huge number)."""
        return torch.asinh(xs.double() @ self.axes / self.std[..., None, :])


@dataclass(frozen=True)
class Standardisation:
    """Per-dataset input statistics and the in-context base fit, shared by all queries."""

    x_mean: torch.Tensor  # (B, d)
    x_std: torch.Tensor  # (B, d)
    y_scale: torch.Tensor  # (B, k) float64: scale of the standardised residual
    base: FittedBase
    principal: PrincipalAxes | None = None  # the x stream's axes of a model for any feeder
    # target_scale="probe": the base refitted on the network model's voltages at the context loads (every
    # output: a query's probe miss is the largest over the buses, whichever outputs are trained)
    probe: Probe | None = None

    @staticmethod
    def of(
        fit: ContextFit[Any],
        x_mean: torch.Tensor,
        x_std: torch.Tensor,
        scale_floor: float,
        principal: PrincipalAxes | None = None,
        probe: Probe | None = None,
    ) -> Standardisation:
        """The residuals' rms per output as the scale, plus a floor relative to the output's level."""
        scale = fit.residuals.pow(2).mean(dim=-2).sqrt() + scale_floor * (fit.fitted.y_mean.abs() + 1.0)
        return Standardisation(x_mean, x_std, scale, fit.fitted, principal, probe)

    @property
    def n_context(self) -> int:
        return self.base.n_context

    def standardised(self, residuals: torch.Tensor) -> torch.Tensor:
        """(B, n, k) residuals -> (B, k, n) in units of the scale: what the y stream embeds."""
        return (residuals / self.y_scale[..., None, :]).transpose(-1, -2)

    def select(self, pick: torch.Tensor) -> Standardisation:
        """Keep outputs `pick` (B, k'): training fits the base on every bus, then trains on a few."""
        return replace(self, y_scale=torch.gather(self.y_scale, 1, pick), base=self.base.select(pick))


@dataclass
class ContextCache:
    """A context encoded once: statistics plus every layer's keys and values."""

    stats: Standardisation
    keys: list[torch.Tensor] = field(default_factory=list)  # per layer: (B, H, n, dh) or (B, k, H, n, dh) for VA
    values: list[torch.Tensor] = field(default_factory=list)  # per layer: (B, H, n, k*dv) or (B, k, H, n, dv) for VA
    attended: torch.Tensor | None = None  # (n_att,) context rows the attention sees; None = all of them
    targets: torch.Tensor | None = None  # (B, k, n_att) their standardised LOO residuals, the values' source
    leverage: torch.Tensor | None = None  # (B, n_att) their own (in-sample) leverage feature
    # target_scale="probe": (B, k, n_att) the bars' unit at each of them held out; None: the context's scale
    heldout_scale: torch.Tensor | None = None

    @property
    def n_outputs(self) -> int:
        return self.stats.y_scale.shape[-1]


# The attention sees at most this many context points (an evenly spread, fixed subset of a larger
# context); the base fit always uses every point. Attention costs grow with n^2 while the residual
# distribution it learns is settled by a few hundred points: training draws contexts up to 512.
ATTEND_MAX = 512
# Context sizes a physics-base model serves (its card says so): from 16 rows, where the base fit
# falls back to ridge, to 10,000, where the base fit is one (10,000 x ~200) SVD and the attention
# sees ATTEND_MAX of the rows.
PHYSICS_CONTEXT_SIZES = (MIN_CONTEXT_ROWS, MAX_CONTEXT_ROWS)
# Inference runs the points in blocks of one dataset whose widest per-token intermediate (FFN or
# conv planes, head, logits) takes about this many bytes: big enough to amortise per-op overhead,
# small enough to stay in cache; chosen by timing block sizes for each shipped architecture.
BLOCK_BYTES = 4 << 20


def attended_rows(n: int, device: torch.device | str | None = None) -> torch.Tensor | None:
    """Rows of an n-point context the attention sees: all (None) up to ATTEND_MAX, else an evenly
    spread, fixed pseudo-random subset (seed 0; contexts may arrive sorted), deterministic per context."""
    if n <= ATTEND_MAX:
        return None
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    return order[:ATTEND_MAX].sort().values.to(device)


def tokens_per_block(cfg: ModelConfig) -> int:
    """(point, output) tokens per inference block for this architecture."""
    mixer = cfg.cnn_channels * cfg.value_dim if cfg.backbone == "cnn" else value_ffn_dim(cfg)
    widest = max(mixer, cfg.head_dim, cfg.n_bars, cfg.emb_dim, cfg.value_dim)
    return max(256, BLOCK_BYTES // (4 * widest))


# The leverage feature is the leverage relative to its context average (d+1)/n, log-compressed and
# capped here: a query far outside the context is "very far", not a number that swamps the embedding.
LEVERAGE_RATIO_MAX = 1e4


def leverage_feature(leverage: torch.Tensor | None, n: int, xs: torch.Tensor) -> torch.Tensor:
    """The x stream's input-only feature (B, N) for points xs (B, N, d); zero for a base without leverage."""
    if leverage is None:
        return torch.zeros(xs.shape[:-1], dtype=xs.dtype, device=xs.device)
    return torch.log1p((leverage * n / (xs.shape[-1] + 1)).clamp(0.0, LEVERAGE_RATIO_MAX)).float()


def _split_heads(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(..., N, D) -> (..., H, N, D/H)."""
    *lead, n, dim = t.shape
    return t.view(*lead, n, n_heads, dim // n_heads).transpose(-3, -2)


def _merge_heads(t: torch.Tensor) -> torch.Tensor:
    """(..., H, N, dh) -> (..., N, H*dh)."""
    *lead, h, n, dh = t.shape
    return t.transpose(-3, -2).reshape(*lead, n, h * dh)


class TokenFFN(nn.Module):
    """Transformer token mixer: pre-norm feed-forward."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down(F.gelu(self.up(self.norm(h))))
        return out


def _band(conv: nn.Conv1d, length: int) -> torch.Tensor:
    """conv's weight as banded (Toeplitz) matrices (C_out, C_in / groups, L_out, L_in).

    A 'same'-padded (zero) convolution along a length-L axis is then a matmul with them; CPU
    conv1d is slow on many very short sequences, which is exactly our shape (one per token).
    """
    size = conv.kernel_size[0]
    pos = torch.arange(length, device=conv.weight.device)
    offset = pos[None, :] - pos[:, None] + size // 2  # [out, in] -> kernel tap
    valid = (offset >= 0) & (offset < size)
    return conv.weight[..., offset.clamp(0, size - 1)] * valid


class TokenConv(nn.Module):
    """CNN token mixer: depthwise 1-D convolutions along each token's embedding.

    The paper convolves along the sequence of points; that would make predictions depend on
    the order of the context rows, so we convolve along the embedding axis and keep the
    model a function of the context *set*.
    """

    def __init__(self, dim: int, channels: int, kernel_size: int):
        super().__init__()
        pad = kernel_size // 2
        self.norm = nn.LayerNorm(dim)
        self.expand = nn.Conv1d(1, channels, kernel_size, padding=pad)
        self.depthwise = nn.Conv1d(channels, channels, kernel_size, padding=pad, groups=channels)
        self.project = nn.Conv1d(channels, 1, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The three convolutions as matmuls on channel planes (C, T, D), T tokens.

        `expand` is one matmul with the kernel over the K shifted copies of the input, the
        depthwise conv one batched matmul with a banded matrix per channel, and the 1x1
        `project` a weighted sum of the planes; in this layout nothing needs transposing.
        """
        # the convolutions are built with biases
        assert self.expand.bias is not None and self.depthwise.bias is not None and self.project.bias is not None
        shape, dim, size = h.shape, h.shape[-1], self.expand.kernel_size[0]
        t = F.pad(self.norm(h).reshape(-1, dim), (size // 2, size // 2))  # (T, D + K - 1): zero 'same' padding
        taps = torch.stack([t[:, j : j + dim] for j in range(size)])  # (K, T, D): what each kernel tap sees
        u = torch.addmm(self.expand.bias[:, None], self.expand.weight[:, 0], taps.view(size, -1))
        u = F.gelu(u).view(-1, t.shape[0], dim)  # (C, T, D)
        band = _band(self.depthwise, dim)[:, 0].transpose(-1, -2)  # (C, D_in, D_out)
        u = F.gelu(torch.baddbmm(self.depthwise.bias[:, None, None], u, band))
        return (self.project.weight[0, :, 0] @ u.view(u.shape[0], -1) + self.project.bias).view(shape)


def value_ffn_dim(cfg: ModelConfig) -> int:
    """Feed-forward width of the y stream (transformer)."""
    return cfg.ffn_dim if cfg.value_ffn_dim is None else cfg.value_ffn_dim


def _token_mixer(cfg: ModelConfig, dim: int, hidden: int) -> nn.Module:
    if cfg.backbone == "cnn":
        return TokenConv(dim, cfg.cnn_channels, cfg.kernel_size)
    return TokenFFN(dim, hidden)


class Layer(nn.Module):
    """One attention layer. DVA: queries/keys from the x stream, values from the y stream."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dva = cfg.attention == "dva"
        self.n_heads = cfg.n_heads
        qk_dim = cfg.emb_dim
        self.norm_qk = nn.LayerNorm(qk_dim)
        self.norm_v = nn.LayerNorm(cfg.value_dim)
        self.w_q = nn.Linear(qk_dim, qk_dim, bias=False)
        self.w_k = nn.Linear(qk_dim, qk_dim, bias=False)
        self.w_v = nn.Linear(cfg.value_dim, cfg.value_dim, bias=False)
        self.w_o = nn.Linear(cfg.value_dim, cfg.value_dim)
        self.mix_y = _token_mixer(cfg, cfg.value_dim, value_ffn_dim(cfg))
        self.mix_x = _token_mixer(cfg, qk_dim, cfg.ffn_dim) if self.dva else None

    def keys_values(self, hx: torch.Tensor | None, hy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys from context inputs (DVA) or joint tokens (VA); values from the y stream.

        DVA values are laid out (B, H, n, k*dv), all outputs side by side, so that mixing them
        with the shared weights is one matmul per head for all k outputs.
        """
        source = hx if self.dva else hy
        keys = _split_heads(self.w_k(self.norm_qk(source)), self.n_heads)
        values = _split_heads(self.w_v(self.norm_v(hy)), self.n_heads)  # (B, k, H, n, dv)
        if self.dva:
            b, k, h, n, dv = values.shape
            values = values.permute(0, 2, 3, 1, 4).reshape(b, h, n, k * dv)
        return keys, values

    def attention_weights(
        self, hx: torch.Tensor | None, hy: torch.Tensor, keys: torch.Tensor, self_from: int | None = None
    ) -> torch.Tensor:
        """Softmax over context points: (B, H, N, n) for DVA, (B, k, H, N, n) for VA.

        `self_from`: the queries are context points self_from, self_from + 1, ...; each one's own
        key is masked, so it is predicted as if held out (the spread calibration's use).
        """
        source = hx if self.dva else hy
        queries = _split_heads(self.w_q(self.norm_qk(source)), self.n_heads)
        # scaled on the (N, dh) queries, not the (N, n) scores: one pass over the scores fewer
        scores = (queries * (1.0 / math.sqrt(queries.shape[-1]))) @ keys.transpose(-1, -2)
        if self_from is not None:
            rows = torch.arange(scores.shape[-2], device=scores.device) + self_from
            own = rows[:, None] == torch.arange(scores.shape[-1], device=scores.device)[None, :]
            scores = scores.masked_fill(own, -torch.inf)
        return scores.softmax(dim=-1)

    def update_y(
        self,
        hx: torch.Tensor | None,
        hy: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        attention_log: list[torch.Tensor] | None = None,
        self_from: int | None = None,
    ) -> torch.Tensor:
        """The y stream: attend to the context's values, then mix each token."""
        weights = self.attention_weights(hx, hy, keys, self_from)
        if attention_log is not None:
            attention_log.append(weights)
        if self.dva:  # one set of weights for all k outputs: (B, H, N, n) @ (B, H, n, k*dv)
            b, k, n_points, _ = hy.shape
            mixed = (weights @ values).view(b, self.n_heads, n_points, k, -1)
            mixed = mixed.permute(0, 3, 2, 1, 4).reshape(b, k, n_points, -1)  # heads merged: (B, k, N, H*dv)
        else:
            mixed = _merge_heads(weights @ values)
        hy = hy + self.w_o(mixed)
        out: torch.Tensor = hy + self.mix_y(hy)
        return out

    def update_x(self, hx: torch.Tensor | None) -> torch.Tensor | None:
        """The x stream (DVA only) is mixed on its own: it never sees y."""
        if hx is None:
            return None
        assert self.mix_x is not None  # a DVA layer, the only kind with an x stream
        out: torch.Tensor = hx + self.mix_x(hx)
        return out


def _in_blocks(
    fn: Callable[[torch.Tensor | None, torch.Tensor, slice, int], torch.Tensor],
    hx: torch.Tensor | None,
    hy: torch.Tensor,
    tokens: int,
    whole: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """`fn(hx, hy, batch, start) -> (B, k, N, D)`, run on blocks of one dataset and about `tokens` tokens.

    Exact: a point's result depends only on itself and its own dataset's context, which `batch`
    selects. Small blocks keep every intermediate in cache instead of allocating (and page-
    faulting) fresh batch-sized tensors, which dominated CPU inference. One block under
    autograd, as in training, and when `whole`. `out` (B, k, N, D), possibly a view into a larger
    buffer, receives the result instead of a new tensor. (One block at a time on the intra-op threads:
    handing blocks to single-threaded worker threads instead measured slower.)
    """
    n_batch, k, n, _ = hy.shape
    size = max(1, tokens // k)
    if whole or torch.is_grad_enabled() or (n_batch == 1 and n <= size):
        result = fn(hx, hy, slice(None), 0)
        return result if out is None else out.copy_(result)
    for b in range(n_batch):
        for s in range(0, n, size):
            x_block = None if hx is None else hx[b : b + 1, s : s + size]
            block = fn(x_block, hy[b : b + 1, :, s : s + size], slice(b, b + 1), s)
            if out is None:
                out = block.new_empty(n_batch, k, n, block.shape[-1])
            out[b : b + 1, :, s : s + size] = block
    assert out is not None  # at least one block ran
    return out


class DVAPFN(nn.Module):
    """The network. `encode_context` once, then `predict` any number of query chunks."""

    borders: torch.Tensor  # a buffer, registered in __init__

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        # where each load bus sits among the outputs: the config's, or the network's once `on_network` binds it
        self.load_positions: tuple[int, ...] | None = cfg.load_positions
        self.base = base_fit_for(cfg)
        self.embed_x = nn.Linear(cfg.x_width + 1, cfg.emb_dim)  # +1: leverage feature
        self.embed_y = nn.Linear(1, cfg.value_dim)
        self.query_token = nn.Parameter(torch.zeros(cfg.value_dim))
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        head_in = cfg.value_dim + (cfg.emb_dim if cfg.attention == "dva" else 0)
        self.head = nn.Sequential(
            nn.LayerNorm(head_in), nn.Linear(head_in, cfg.head_dim), nn.GELU(), nn.Linear(cfg.head_dim, cfg.n_bars)
        )
        # Bar borders of the standardised residual; set from prior samples before training.
        self.register_buffer("borders", torch.linspace(-4.0, 4.0, cfg.n_bars + 1))
        self.tokens_per_block = tokens_per_block(cfg)
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.zeros_(cast(nn.Linear, self.head[-1]).weight)  # start at the prior: equal mass in every bar

    # -- inputs ---------------------------------------------------------------------------
    def _standardise_x(self, x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """Context-standardised inputs, in the precision given (float64 keeps the base fit exact); a load the
        context never moved at 0 (models.physics_base.standardised_loads)."""
        return physics_base.standardised_loads(x, mean, std)

    def on_network(self, load_positions: Sequence[int]) -> DVAPFN:
        """This model of any feeder (`cfg.any_network`) on one network: the same weights (shared, not
        copied) with a base fit told where that network's loads sit among its outputs."""
        if not self.cfg.any_network:
            raise ValueError("on_network: this model was trained for one feeder; it serves that feeder only")
        bound = copy.copy(self)  # a shallow copy: the parameters and buffers stay this model's
        bound.load_positions = tuple(int(p) for p in load_positions)
        bound.base = base_fit_for(self.cfg, bound.load_positions)
        return bound

    @property
    def d_in(self) -> int:
        """Inputs per point: the config's, or for a model of any feeder its network's (0 before `on_network`)."""
        if self.cfg.any_network:
            return 0 if self.load_positions is None else 2 * len(self.load_positions)
        return self.cfg.d_in

    def _x_tokens(
        self, xs: torch.Tensor, leverage: torch.Tensor, k: int, principal: PrincipalAxes | None = None
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """x stream (B, N, D) for DVA; for VA the x embedding is folded into each output's tokens."""
        if principal is not None:
            xs = principal.features(xs)
        xs = xs.to(self.embed_x.weight.dtype)
        ex = self.embed_x(torch.cat([xs, leverage[..., None].to(xs.dtype)], dim=-1))
        if self.cfg.attention == "dva":
            return ex, None
        return None, ex[:, None].expand(-1, k, -1, -1)

    # -- the two calls ----------------------------------------------------------------------
    def encode_context(
        self,
        context_x: torch.Tensor,
        context_y: torch.Tensor,
        outputs: torch.Tensor | None = None,
        probe_y: torch.Tensor | None = None,
    ) -> ContextCache:
        """Encode (B, n, d) inputs and (B, n, k) targets into per-layer keys and values.

        `outputs` (B, k') keeps only those outputs after the base fit (which sees every bus). `probe_y`
        (B, n, k): the network model's voltages at the context loads (target_scale="probe" only).
        """
        x_mean, x_std = physics_base.load_scaling(context_x)
        xs = self._standardise_x(context_x, x_mean, x_std)
        fit = self.base.fit(xs, context_y.double(), x_std)
        principal = PrincipalAxes.of(xs, self.cfg.n_principal) if self.cfg.any_network else None
        probe, probe_miss = None, None
        if self.cfg.target_scale == "probe":
            voltages = probe_voltages(probe_y, context_y.shape)
            probe, probe_miss = Probe.fit(self.base, xs, voltages, x_std, fit, self.cfg.probe_refits)
        stats = Standardisation.of(fit, x_mean, x_std, self.base.scale_floor, principal, probe)
        values = stats.standardised(fit.residuals)  # (B, k, n)
        leverage = leverage_feature(fit.leverage, stats.n_context, xs)
        if outputs is not None:
            stats = stats.select(outputs)
            values = torch.gather(values, 1, outputs[..., None].expand(-1, -1, values.shape[-1]))
        # a probed model's unit at each context point held out: its in-sample leverage, the probe's own
        # leave-one-out miss there (what `probe_scale` is at a new query), so calibration compares like units
        held_scale = None if probe_miss is None else probe_unit(stats.y_scale, fit.leverage, probe_miss)
        attended = attended_rows(xs.shape[-2], xs.device)
        if attended is not None:
            xs, values, leverage = xs[:, attended], values[..., attended], leverage[:, attended]
            held_scale = None if held_scale is None else held_scale[..., attended]
        k = values.shape[1]
        hx, joint = self._x_tokens(xs, leverage, k, stats.principal)
        hy = self.embed_y(values.to(self.embed_y.weight.dtype)[..., None])  # (B, k, n, Dv)
        if joint is not None:
            hy = hy + joint
        cache = ContextCache(stats, attended=attended, targets=values, leverage=leverage, heldout_scale=held_scale)
        for layer in cast(Iterable[Layer], self.layers):
            keys, vals = layer.keys_values(hx, hy)
            cache.keys.append(keys)
            cache.values.append(vals)

            def update(
                x: torch.Tensor | None,
                y: torch.Tensor,
                batch: slice,
                start: int,
                layer: Layer = layer,
                keys: torch.Tensor = keys,
                vals: torch.Tensor = vals,
            ) -> torch.Tensor:
                return layer.update_y(x, y, keys[batch], vals[batch])

            hy = _in_blocks(update, hx, hy, self.tokens_per_block)
            hx = layer.update_x(hx)
        return cache

    def predict(
        self,
        cache: ContextCache,
        query_x: torch.Tensor,
        attention_log: list[torch.Tensor] | None = None,
        held_out: bool = False,
        out: torch.Tensor | None = None,
        probe_y: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits (B, k, m, n_bars), location (B, k, m) and scale (B, k, 1), or (B, k, m) with
        target_scale="probe", all float64.

        The predictive distribution of y is `loc + scale * z` with z ~ bars(logits). `held_out`:
        the queries are the context points the attention sees (`cache.attended`, in order), each
        predicted with its own point masked; compare with `cache.targets` (the scale is then
        `cache.heldout_scale`, or the context's). `out`: a (B, k, m, n_bars) tensor (a view into a caller's buffer) the logits
        are written into and returned as. `probe_y` (B, m, k_all): the network model's voltages at
        the query loads (target_scale="probe").
        """
        stats = cache.stats
        xs = self._standardise_x(query_x, stats.x_mean, stats.x_std)
        loc, leverage, raw_leverage = self._base_at(stats, xs)
        scale = stats.y_scale[..., None]
        if self.cfg.target_scale == "probe":
            held = cache.heldout_scale
            assert held is not None  # encode_context sets it for this target scale
            scale = held if held_out else self.probe_scale(stats, xs, raw_leverage, probe_y)
        if held_out:
            # A context point's leave-one-out residual is the error of the fit without it, whose
            # leverage there is its own in-sample one: the feature the encoding computed. Deriving
            # it as for a new query would understate it (h / (1 + h) of an in-sample h) and the
            # calibration would widen every interval to make up for it.
            assert cache.leverage is not None  # encode_context sets it
            leverage = cache.leverage
        k, m = cache.n_outputs, query_x.shape[-2]
        hx, joint = self._x_tokens(xs, leverage, k, stats.principal)
        hy = self.query_token.expand(query_x.shape[0], k, m, -1)
        if joint is not None:
            hy = hy + joint

        # a block of queries through every layer, then the head
        def answer(hx: torch.Tensor | None, hy: torch.Tensor, batch: slice, start: int) -> torch.Tensor:
            self_from = start if held_out else None
            for layer, keys, vals in zip(cast(Iterable[Layer], self.layers), cache.keys, cache.values):
                # both from the layer's input: the y stream attends with the x it was given
                hx, hy = layer.update_x(hx), layer.update_y(hx, hy, keys[batch], vals[batch], attention_log, self_from)
            return self.head(hy) if hx is None else self._split_head(hx, hy)

        logits = _in_blocks(answer, hx, hy, self.tokens_per_block, whole=attention_log is not None, out=out)
        return logits, loc, scale

    def query_scale(
        self, stats: Standardisation, query_x: torch.Tensor, probe_y: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The bars' unit at queries, as `predict` returns it, without the attention: (B, k, 1) or (B, k, m)."""
        if self.cfg.target_scale == "context":
            return stats.y_scale[..., None]
        xs = self._standardise_x(query_x, stats.x_mean, stats.x_std)
        return self.probe_scale(stats, xs, self.base.predict(stats.base, xs).leverage, probe_y)

    def probe_scale(
        self, stats: Standardisation, xs: torch.Tensor, leverage: torch.Tensor | None, probe_y: torch.Tensor | None
    ) -> torch.Tensor:
        """target_scale="probe": each query's scale (B, k, m), float64. The context's residual scale grows
        as the fit's prediction error does with the query's leverage h (s^2 (1 + h)), and the network
        model's own miss there is added in quadrature: the base refitted on the network model's voltages
        misses them at a query by what the context could not teach it (load growth, reversed flows), and
        the fit on the readings misses the truth there by about as much; with `probe_refits`, also by how
        far the readings' noise carries the fit there (models/probe_unit.py)."""
        assert stats.probe is not None  # encode_context fits it for this target scale
        truth = probe_voltages(probe_y, (*xs.shape[:-1], -1))
        return probe_unit(stats.y_scale, leverage, stats.probe.miss(self.base, xs, truth))

    def _split_head(self, hx: torch.Tensor, hy: torch.Tensor) -> torch.Tensor:
        """`head(cat[hy, hx])` without building the (B, k, N, Dv+E) concatenation.

        The LayerNorm statistics of the concatenation follow from each part's mean and variance,
        and the first Linear splits into a per-output part W_y.(g_y*hy) and a per-query part
        W_x.(g_x*hx), computed once and broadcast over the k outputs. Both parts are centred on
        their own means; one rank-1 term moves them to the joint mean.
        """
        norm, first, act, last = cast("tuple[nn.LayerNorm, nn.Linear, nn.Module, nn.Linear]", self.head)
        dv = hy.shape[-1]
        fy, fx = dv / norm.weight.shape[0], hx.shape[-1] / norm.weight.shape[0]  # each part's share of the features
        mean_y, mean_x = hy.mean(-1, keepdim=True), hx[:, None].mean(-1, keepdim=True)  # (B, k, N, 1), (B, 1, N, 1)
        cy, cx = hy - mean_y, hx[:, None] - mean_x
        gap = mean_y - mean_x
        var = fy * cy.square().mean(-1, keepdim=True) + fx * cx.square().mean(-1, keepdim=True) + fy * fx * gap.square()
        rstd = torch.rsqrt(var + norm.eps)
        scaled = first.weight * norm.weight  # W diag(gamma): (hidden, Dv+E)
        w_y, w_x = scaled[:, :dv], scaled[:, dv:]
        # W diag(gamma) (z - joint mean) = W_y cy + W_x cx + gap * shift
        shift = fx * w_y.sum(-1) - fy * w_x.sum(-1)
        h = F.linear(cy * rstd, w_y, first.weight @ norm.bias + first.bias)
        h = torch.addcmul(h, rstd, torch.addcmul(F.linear(cx, w_x), gap, shift))
        out: torch.Tensor = last(act(h))
        return out

    def predict_base(self, stats: Standardisation, query_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The in-context base prediction alone: location (B, k, m) float64 and leverage feature (B, m)."""
        loc, leverage, _ = self._base_at(stats, self._standardise_x(query_x, stats.x_mean, stats.x_std))
        return loc, leverage

    def _base_at(
        self, stats: Standardisation, xs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """At standardised query loads xs: the base's location (B, k, m), leverage feature (B, m) and raw
        leverage (B, m) or None."""
        base = self.base.predict(stats.base, xs)
        return base.loc.transpose(-1, -2), leverage_feature(base.leverage, stats.n_context, xs), base.leverage

    def forward(
        self,
        context_x: torch.Tensor,
        context_y: torch.Tensor,
        query_x: torch.Tensor,
        outputs: torch.Tensor | None = None,
        probe_y: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`probe_y` (B, n + m, k_all): the network model's voltages at the context's, then the queries' loads."""
        n = context_x.shape[-2]
        context_probe, query_probe = (None, None) if probe_y is None else (probe_y[:, :n], probe_y[:, n:])
        cache = self.encode_context(context_x, context_y, outputs, context_probe)
        return self.predict(cache, query_x, probe_y=query_probe)

    def standardised_target(self, y: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """(B, m, k) observed targets -> (B, k, m) standardised residuals the bars describe."""
        return ((y.double().transpose(-1, -2) - loc) / scale).float()

"""Frozen configurations that round-trip to JSON files: model architecture, priors, training.

Defaults of `ModelConfig` follow the paper's 64-D settings (Tables 12-13); the shipped
checkpoints record the exact config they were trained with in their model card.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def _from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build a (possibly nested) frozen dataclass from a dict, refusing unknown keys."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}; expected some of {sorted(fields)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        ftype = fields[name].type
        nested = _NESTED.get(ftype) if isinstance(ftype, str) else None
        if nested is not None and isinstance(value, dict):
            value = _from_dict(nested, value)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)


class _FileConfig:
    """Mixin: to_dict / from_dict / save / load as JSON."""

    if TYPE_CHECKING:  # every subclass is a dataclass
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return _from_dict(cls, data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Self:
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass(frozen=True)
class ModelConfig(_FileConfig):
    """DVA-PFN architecture."""

    d_in: int = 64
    backbone: Literal["transformer", "cnn"] = "transformer"
    attention: Literal["dva", "va"] = "dva"
    emb_dim: int = 64  # width of the input (x) stream, which makes queries and keys
    value_dim: int = 64  # width of the output (y) stream, which carries values
    n_layers: int = 4
    n_heads: int = 8
    ffn_dim: int = 1024  # transformer feed-forward width (the x stream's, and the y stream's unless value_ffn_dim)
    # transformer: feed-forward width of the y stream. It runs once per (point, output) token where
    # the x stream's runs once per point, so a narrow y stream beside a wide x stream keeps the
    # attention pattern's capacity at a fraction of the cost. None: ffn_dim.
    value_ffn_dim: int | None = None
    kernel_size: int = 5  # cnn: depthwise convolution kernel
    cnn_channels: int = 8  # cnn: channels of the per-token convolution
    head_dim: int = 128  # hidden width of the bar-logit head
    n_bars: int = 500
    base: Literal["physics", "ridge", "none"] = "ridge"  # in-context mean function under the attention
    # base="physics" on a feeder whose outputs are not exactly its load buses: the output index of
    # each load bus (gridsim's Network.load_positions); None = output j is the bus of loads j, j + m
    load_positions: tuple[int, ...] | None = None
    dropout: float = 0.0  # reserved: the model has no dropout layers yet; kept so saved configs load
    # the leverage feature of the x stream from the physics base fit's full design ("design": the v2
    # checkpoints; its squared-flow columns follow the tree recovered from the voltages, which flips on
    # contexts under ~200 rows) or from the loads alone ("loads": inputs only, as DVA intends)
    leverage: Literal["design", "loads"] = "design"
    # what the x stream embeds: "loads" (the d_in standardised loads: one feeder's width) or "principal"
    # (the context's first n_principal principal components of them, whitened: any feeder's loads map
    # to the same width, so one checkpoint serves every network; d_in is then unused, 0)
    inputs: Literal["loads", "principal"] = "loads"
    n_principal: int = 8
    # what the bars' unit is at a query: "context" (the context's residual scale per output, every query
    # alike) or "probe" (that scale grown by the query's leverage, and by the network model's own miss
    # there: the base refitted on the network model's voltages at the context loads, its largest error
    # over the buses at the query). "probe" lets a model learn queries far off its context (load growth,
    # PV export) whose residuals are thousands of context scales; it needs the network model's voltages
    # at every point (the prior's `probe`, the service's power flow).
    target_scale: Literal["context", "probe"] = "context"
    # target_scale="probe": the probe is also refitted this many times on the network model's voltages plus
    # noise at the readings' inferred level, and their scatter joins the probe's miss (models/probe_unit.py);
    # 0: the exact probe alone (noise-driven misses far off the context then land 20-35 units out)
    probe_refits: int = 0

    @property
    def x_width(self) -> int:
        """Width of the x stream's input (before the leverage feature)."""
        return self.n_principal if self.inputs == "principal" else self.d_in

    @property
    def any_network(self) -> bool:
        """Whether one checkpoint serves every feeder (its base fit is told the network's load positions)."""
        return self.inputs == "principal"

    def __post_init__(self) -> None:
        if self.inputs not in ("loads", "principal"):
            raise ValueError(f"inputs: expected 'loads' or 'principal', got {self.inputs!r}")
        if self.inputs == "principal" and (self.n_principal < 1 or self.load_positions is not None):
            raise ValueError("inputs='principal': expected n_principal >= 1 and no load_positions (set per network)")
        if self.backbone not in ("transformer", "cnn"):
            raise ValueError(f"backbone: expected 'transformer' or 'cnn', got {self.backbone!r}")
        if self.attention not in ("dva", "va"):
            raise ValueError(f"attention: expected 'dva' or 'va', got {self.attention!r}")
        if self.target_scale not in ("context", "probe"):
            raise ValueError(f"target_scale: expected 'context' or 'probe', got {self.target_scale!r}")
        if self.probe_refits < 0 or (self.probe_refits and self.target_scale != "probe"):
            raise ValueError(f"probe_refits: expected 0, or >= 1 with target_scale='probe', got {self.probe_refits}")
        if self.base not in ("physics", "ridge", "none"):
            raise ValueError(f"base: expected 'physics', 'ridge' or 'none', got {self.base!r}")
        if self.leverage not in ("design", "loads"):
            raise ValueError(f"leverage: expected 'design' or 'loads', got {self.leverage!r}")
        for name in ("emb_dim", "value_dim"):
            if getattr(self, name) % self.n_heads:
                raise ValueError(f"{name}: must be divisible by n_heads={self.n_heads}")
        if self.value_ffn_dim is not None and self.value_ffn_dim < 1:
            raise ValueError(f"value_ffn_dim: expected a positive width or None, got {self.value_ffn_dim}")
        if self.dropout != 0.0:
            raise ValueError(f"dropout: not implemented, expected 0.0, got {self.dropout}")
        if self.attention == "va" and self.emb_dim != self.value_dim:
            raise ValueError("value_dim: vanilla attention uses one joint stream, so value_dim must equal emb_dim")


@dataclass(frozen=True)
class GPPriorConfig(_FileConfig):
    """GP prior of the paper (Table 11): x ~ U[0,1]^d, RBF kernel, noise, random output shift."""

    kind: Literal["gp"] = "gp"
    dim: int = 1
    lengthscale: float = 0.6
    variance: float = 0.01
    noise: float = 1e-2
    shift_low: float = 1.0
    shift_high: float = 1.0


@dataclass(frozen=True)
class PowerFlowPriorConfig(_FileConfig):
    """Feeder variations around a base network; every dataset is one feeder and one load regime."""

    kind: Literal["powerflow"] = "powerflow"
    network: str = "ieee33"
    load_level: tuple[float, float] = (0.5, 1.5)  # global multiplier on base loads
    delta: tuple[float, float] = (0.02, 0.6)  # perturbation half-width, sampled log-uniformly
    pf_spread: tuple[float, float] = (0.0, 0.3)  # relative spread of Q/P per bus
    p_correlated: float = 0.4  # share of datasets with a common-factor perturbation
    correlation: tuple[float, float] = (0.2, 0.8)  # common-factor share when correlated
    p_dg: float = 0.3  # share of datasets with distributed generation
    dg_buses: tuple[int, int] = (1, 6)  # how many buses get DG
    dg_level: tuple[float, float] = (0.2, 1.5)  # DG size relative to the bus base load
    line_scale: tuple[float, float] = (0.7, 1.4)  # global line-impedance multiplier
    line_jitter: float = 0.15  # per-line log-normal sigma on impedances
    noise: float = 0.0  # measurement noise on |V| (p.u.) of every dataset
    p_noisy: float = 0.0  # share of datasets with noisy voltage readings on top of `noise`
    noise_range: tuple[float, float] = (1e-7, 1e-4)  # their noise std (p.u.), log-uniform
    p_reconfigured: float = 0.0  # share of datasets on a reconfigured feeder (tie switches)
    exchanges: tuple[int, int] = (1, 3)  # branch exchanges of a reconfigured feeder
    # Operating data (issue 29, models/priors/profiles.py, shift.py, meter.py). Every default leaves
    # a config written before these fields drawing exactly the datasets it drew then.
    p_profiles: float = 0.0  # share of datasets whose loads follow correlated daily profiles, not iid draws
    profile_amplitude: tuple[float, float] = (0.1, 0.6)  # a load's daily swing around its mean (relative)
    profile_jitter: tuple[float, float] = (0.005, 0.05)  # iid relative noise around the profile
    season_amplitude: tuple[float, float] = (0.0, 0.3)  # the load level's swing over the year (relative)
    pv_cloud: tuple[float, float] = (0.0, 0.6)  # how deep clouds cut PV output below the daylight bell
    # share of datasets whose queries leave the context's regime (needs the caller's context size)
    p_shifted: float = 0.0
    shift_growth: tuple[float, float] = (1.2, 1.6)  # largest load growth of a shifted dataset's queries
    shift_pv_buses: tuple[int, int] = (2, 8)  # buses that export PV in a shifted dataset's queries
    shift_pv_export: tuple[float, float] = (0.5, 2.0)  # their net export, x the bus's base P
    shift_wider: tuple[float, float] = (1.5, 3.0)  # queries' perturbation half-width, x the context's
    season_window: tuple[float, float] = (0.05, 0.25)  # share of the year a shifted profile context spans
    p_load_noise: float = 0.0  # share of datasets whose context load readings carry relative noise
    load_noise: tuple[float, float] = (0.0, 0.02)  # that noise's relative std, uniform
    # voltage-reading noise on the queries' targets too (True, as before); False: queries keep the
    # true voltages, so a model learns to predict the voltage rather than the next reading
    noisy_queries: bool = True
    # A prior over feeders, not variations of one (a model of any feeder, ModelConfig.inputs="principal"):
    # every batch is drawn on one of gridsim's random radial feeders `random-<buses>-<seed>`, a seed drawn
    # from `feeder_seeds` [low, high) (kept apart from the seeds tests and benchmarks name) and its bus
    # count from this range by the seed itself, so the pool holds high - low feeders, each built once;
    # `network` is then unused. None: every batch on `network`.
    random_feeders: tuple[int, int] | None = None
    feeder_seeds: tuple[int, int] = (100_000, 100_160)
    # also solve every point on the network model (the feeder as built: no line variations, no
    # reconfiguration) at its load readings, noise-free: the probe a model with target_scale="probe" needs
    probe: bool = False

    def __post_init__(self) -> None:
        if self.random_feeders is not None:
            lo, hi = self.random_feeders
            if not 3 <= lo <= hi <= 500 or not 0 <= self.feeder_seeds[0] < self.feeder_seeds[1]:
                raise ValueError(
                    f"random_feeders, feeder_seeds: expected 3 <= low <= high <= 500 buses and a seed range "
                    f"[low, high) with 0 <= low < high, got {list(self.random_feeders)}, {list(self.feeder_seeds)}"
                )
        for name in ("p_correlated", "p_dg", "p_noisy", "p_reconfigured", "p_profiles", "p_shifted", "p_load_noise"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}: expected a share in [0, 1], got {value}")
        for name in (
            "profile_amplitude",
            "profile_jitter",
            "season_amplitude",
            "pv_cloud",
            "shift_growth",
            "shift_pv_buses",
            "shift_pv_export",
            "shift_wider",
            "season_window",
            "load_noise",
        ):
            lo, hi = getattr(self, name)
            if not 0.0 <= lo <= hi:
                raise ValueError(f"{name}: expected a range [low, high] with 0 <= low <= high, got {[lo, hi]}")
        if self.pv_cloud[1] > 1.0 or self.season_window[1] > 1.0 or self.season_amplitude[1] >= 1.0:
            raise ValueError(
                "pv_cloud, season_window: expected shares up to 1 and season_amplitude below 1, got "
                f"{list(self.pv_cloud)}, {list(self.season_window)}, {list(self.season_amplitude)}"
            )
        if self.shift_growth[0] < 1.0 or self.shift_wider[0] < 1.0:
            raise ValueError(
                f"shift_growth, shift_wider: expected factors >= 1, got {list(self.shift_growth)}, {list(self.shift_wider)}"
            )


@dataclass(frozen=True)
class TrainConfig(_FileConfig):
    """Training run: model, prior, optimisation and checkpointing."""

    model: ModelConfig = field(default_factory=ModelConfig)
    prior: dict[str, Any] = field(default_factory=lambda: PowerFlowPriorConfig().to_dict())
    steps: int = 20000
    batch_size: int = 8
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 500
    grad_clip: float = 1.0
    n_context: tuple[int, int] = (50, 500)  # context size drawn per batch
    context_sampling: Literal["uniform", "log-uniform"] = "uniform"  # how that size is drawn
    n_query: int = 100
    outputs_per_dataset: int = 4  # outputs trained per dataset (all share one x-stream pass)
    val_datasets: int = 16
    val_every: int = 200
    checkpoint_minutes: float = 3.0
    border_samples: int = 64  # prior datasets used to place the bar borders
    seed: int = 0
    device: str = "auto"
    # distillation (models/distillation.py): a registry checkpoint directory whose bar distributions
    # the model also learns, and the share of the loss that cross-entropy against them takes
    teacher: str | None = None
    distill_weight: float = 0.0
    # a warm start (init_weights) keeps its weights' bar borders; True places them anew from this run's
    # prior (for a prior or target scale whose standardised residuals span another range)
    reset_borders: bool = False

    def __post_init__(self) -> None:
        if self.model.target_scale == "probe" and not self.prior.get("probe", False):
            raise ValueError(
                "model.target_scale='probe': the prior must solve the network model too (prior.probe true)"
            )
        if not 0.0 <= self.distill_weight <= 1.0:
            raise ValueError(f"distill_weight: expected a share in [0, 1], got {self.distill_weight}")
        if self.distill_weight > 0.0 and self.teacher is None:
            raise ValueError("distill_weight: > 0 needs a teacher (a registry checkpoint directory)")

    def prior_config(self) -> GPPriorConfig | PowerFlowPriorConfig:
        kind = self.prior.get("kind", "powerflow")
        if kind == "gp":
            return GPPriorConfig.from_dict(self.prior)
        if kind == "powerflow":
            return PowerFlowPriorConfig.from_dict(self.prior)
        raise ValueError(f"prior.kind: expected 'gp' or 'powerflow', got {kind!r}")


_NESTED = {"ModelConfig": ModelConfig}

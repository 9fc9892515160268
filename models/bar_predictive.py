"""A bar distribution over a standardised residual, mapped back to physical units.

The DVA-PFN predicts z, the query's residual around an in-context fit, standardised per
dataset; the answer the service gives is y = loc + scale * z. This wrapper exposes that as
the common Predictive interface (float64 numpy, (m, k) per query and output), including the
-log(scale) Jacobian in log_prob so NLLs compare with the GP and linear baselines.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import torch

from models.bar_distribution import BarDistribution
from models.calibration import CALIBRATION_LEVEL
from models.errors import InputValidationError
from models.predictive import Predictive, Summary, Timing


def _finite_array(name: str, value: torch.Tensor | npt.ArrayLike, allow_inf: bool = False) -> np.ndarray:
    arr = np.asarray(value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value, dtype=np.float64)
    bad = np.isnan(arr) if allow_inf else ~np.isfinite(arr)
    if bad.any():
        raise ValueError(
            f"{name} must be {'free of NaN' if allow_inf else 'finite'}; found {int(bad.sum())} bad entries"
        )
    return arr


# Logits per chunk (2 Mi, 16 MiB as float64): each method's temporaries stay bounded whatever m is.
_CHUNK_ELEMENTS = 1 << 21
# The smallest error `cdf_with_error` takes, in the answer's standardised units.
_MIN_ERROR = 1e-12
# The central interval `min_half` bounds.
_CENTRAL_95 = ((1.0 - CALIBRATION_LEVEL) / 2, (1.0 + CALIBRATION_LEVEL) / 2)


@dataclass
class BarPredictive(Predictive):
    """Predictive y = loc + scale * z with z ~ bar(logits); logits (m, k, n_bars), loc (m, k).

    `spread` (k,), when given, stretches each output's distribution around its mean
    (see models.calibration): folded into loc and scale here, so every statistic follows.
    `min_half` (k,), when given, stretches further any answer whose central 95 % interval would
    be narrower than 2 * min_half (models.calibration.half_width_floor).
    """

    bar: BarDistribution
    logits: torch.Tensor
    loc: np.ndarray
    scale: np.ndarray
    spread: np.ndarray | None = None
    min_half: np.ndarray | None = None
    timing: Timing = field(default_factory=Timing)

    def __post_init__(self) -> None:
        logits = torch.as_tensor(self.logits).detach()
        if logits.ndim != 3 or logits.shape[-1] != self.bar.n_bars:
            raise ValueError(f"logits must be shaped (m, k, {self.bar.n_bars}), got {tuple(logits.shape)}")
        # one pass: the max is NaN when any entry is (torch propagates NaN), +inf when any entry is
        if not logits.is_floating_point() or (logits.numel() and not bool(logits.amax() < math.inf)):
            raise ValueError("logits must be floating point, free of NaN and +inf")
        self.logits = logits  # kept in its own dtype; each chunk is upcast to float64 when used
        shape = tuple(logits.shape[:2])
        loc = _finite_array("loc", self.loc)
        if loc.shape != shape:
            raise ValueError(f"loc must be shaped (m, k) = {shape}, got {loc.shape}")
        scale = _finite_array("scale", self.scale)
        try:
            scale = np.broadcast_to(scale, shape)
        except ValueError as exc:
            raise ValueError(f"scale must broadcast to (m, k) = {shape}, got {scale.shape}") from exc
        if not (scale > 0).all():
            raise ValueError("scale must be > 0")
        self.loc, self.scale = loc, np.ascontiguousarray(scale)
        self._bar64 = self.bar.cast(torch.float64, logits.device)
        self._bar_native = self.bar.cast(logits.dtype, logits.device)
        self._moments: tuple[np.ndarray, np.ndarray] | None = None
        self._folded: tuple[np.ndarray, np.ndarray] | None = None
        if self.spread is not None:
            spread = _finite_array("spread", self.spread)
            if spread.shape != shape[1:] or not (spread > 0).all():
                raise ValueError(f"spread must be positive and shaped (k,) = {shape[1:]}, got {spread.shape}")
            self.spread = spread
        if self.min_half is not None:
            min_half = _finite_array("min_half", self.min_half)
            if min_half.shape != shape[1:] or not (min_half >= 0).all():
                raise ValueError(f"min_half must be >= 0 and shaped (k,) = {shape[1:]}, got {min_half.shape}")
            self.min_half = min_half

    def _stretch(self, scale: np.ndarray, z_half: np.ndarray | None) -> np.ndarray:
        """Factor per answer around its mean: the spread, raised where the central 95 % interval's
        half-width (z_half in standardised units) would fall under min_half."""
        factor = np.ones(scale.shape[-1]) if self.spread is None else self.spread
        if self.min_half is None:
            return factor
        half = np.maximum(scale * z_half, np.finfo(np.float64).tiny)
        stretched: np.ndarray = np.maximum(factor, self.min_half / half)
        return stretched

    def _loc_scale(self) -> tuple[np.ndarray, np.ndarray]:
        """Location and scale of y = loc + scale * z with the spread folded in, computed on first use.

        y' = mean + s (y - mean) with mean = loc + scale * E[z] is the same bars with a new loc
        and scale. Only E[z] is needed (float64, so the mean stays exactly the uncalibrated one);
        `summary` folds per chunk from its own softmax instead and never comes here.
        """
        if self.spread is None and self.min_half is None:
            return self.loc, self.scale
        if self._folded is None:
            z_mean = self._z_moments()[0] if self._moments is not None else self._by_rows(self._bar64.mean)
            z_half = None if self.min_half is None else self._by_rows(self._z_half)
            factor = self._stretch(self.scale, z_half)
            self._folded = (self.loc + self.scale * z_mean * (1.0 - factor), self.scale * factor)
        return self._folded

    def _z_half(self, lg: torch.Tensor) -> torch.Tensor:
        """Half-width of the central 95 % interval of z, per answer of a chunk of float64 logits."""
        q = self._bar64.quantile(lg, torch.tensor(_CENTRAL_95, dtype=torch.float64, device=lg.device))
        return 0.5 * (q[1] - q[0])

    def _torch(self, arr: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(arr, dtype=torch.float64, device=self.logits.device)

    def _standardise(self, name: str, values: np.ndarray) -> torch.Tensor:
        try:
            values = np.broadcast_to(values, self.loc.shape)
        except ValueError as exc:
            raise ValueError(f"{name} must broadcast to (m, k) = {self.loc.shape}, got {values.shape}") from exc
        loc, scale = self._loc_scale()
        return self._torch((values - loc) / scale)

    def _by_rows(self, fn: Callable[..., torch.Tensor], z: torch.Tensor | None = None, axis: int = 0) -> np.ndarray:
        """fn(float64 logits chunk[, z chunk]) over query chunks, so temporaries stay bounded for any m."""
        m, k, n_bars = self.logits.shape
        step = max(1, _CHUNK_ELEMENTS // max(k * n_bars, 1))
        parts = []
        for start in range(0, max(m, 1), step):
            rows = slice(start, start + step)
            lg = self.logits[rows].to(torch.float64)
            out = fn(lg) if z is None else fn(lg, z[rows])
            parts.append(out.detach().cpu().numpy().astype(np.float64, copy=False))
        return np.concatenate(parts, axis=axis)

    def _z_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the standardised residual, computed once."""
        if self._moments is None:
            both = self._by_rows(lambda lg: torch.stack([self._bar64.mean(lg), self._bar64.variance(lg)]), axis=1)
            self._moments = (both[0], both[1])
        return self._moments

    @property
    def mean(self) -> np.ndarray:
        mean: np.ndarray = self.loc + self.scale * self._z_moments()[0]
        return mean

    @property
    def std(self) -> np.ndarray:
        std: np.ndarray = self._loc_scale()[1] * np.sqrt(self._z_moments()[1])
        return std

    def summary(self, levels: Sequence[float] = (), band: tuple[float, float] | None = None) -> Summary:
        """Mean, std, quantiles and band probability from one softmax per chunk, in the logits' dtype.

        The service's path: float32 bars (z needs no more digits; loc and scale stay float64),
        one softmax and one cumsum shared by every statistic, and the spread folded in per chunk
        from that softmax's E[z].
        """
        lv = self._levels(levels) if len(levels) else None
        if band is not None:
            low, high = float(band[0]), float(band[1])
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise InputValidationError(
                    "band", f"must be two finite numbers low < high, got {band!r}", "two finite numbers low < high"
                )
        m, k, n_bars = self.logits.shape
        bar, dtype, device = self._bar_native, self.logits.dtype, self.logits.device
        mean, std = np.empty((m, k)), np.empty((m, k))
        quantiles = np.empty((0 if lv is None else len(lv), m, k))
        outside = None if band is None else np.empty((m, k))
        as64: Callable[[torch.Tensor], np.ndarray] = lambda t: t.double().cpu().numpy()  # noqa: E731
        step = max(1, _CHUNK_ELEMENTS // max(k * n_bars, 1))
        order: Callable[[torch.Tensor], torch.Tensor]
        for start in range(0, m, step):
            rows = slice(start, start + step)
            chunk = self.logits[rows]
            # The PFN hands over a (m, k) view of (k, m) memory: work in memory order, swap the results.
            flip = not chunk.is_contiguous() and chunk.transpose(0, 1).is_contiguous()
            order = (lambda t: t.transpose(0, 1)) if flip else (lambda t: t)  # noqa: E731
            p = torch.softmax(order(chunk), dim=-1)
            z_mean, z_var = (as64(order(t)) for t in bar.moments_from_probs(p))
            loc, scale = self.loc[rows], self.scale[rows]
            mean[rows] = loc + scale * z_mean
            cum = None
            if self.spread is not None or self.min_half is not None:  # y' = mean + s (y - mean), this chunk
                z_half = None
                if self.min_half is not None:
                    cum = bar.cumulative(p)
                    z95 = bar.icdf_from_probs(
                        p, cum, torch.tensor(_CENTRAL_95, dtype=dtype, device=device).expand(*p.shape[:-1], -1)
                    )
                    z_half = as64(order(0.5 * (z95[..., 1] - z95[..., 0])))
                factor = self._stretch(scale, z_half)
                loc, scale = loc + scale * z_mean * (1.0 - factor), scale * factor
            std[rows] = scale * np.sqrt(np.maximum(z_var, 0.0))
            if lv is None and band is None:
                continue
            cum = bar.cumulative(p) if cum is None else cum
            if lv is not None:
                z = order(bar.icdf_from_probs(p, cum, lv.to(dtype).expand(*p.shape[:-1], -1))).movedim(-1, 0)
                quantiles[:, rows] = loc[None] + scale[None] * as64(z)
            if band is not None:  # both ends in one pass: (rows, k, 2) standardised, in p's order
                edges = np.stack([(low - loc) / scale, (high - loc) / scale], axis=-1)
                cdf = bar.cdf_from_probs(p, cum, order(torch.as_tensor(edges, dtype=dtype, device=device)).contiguous())
                assert outside is not None  # allocated when a band is asked
                outside[rows] = as64(order((1.0 - (cdf[..., 1] - cdf[..., 0])).clamp(0.0, 1.0)))
        return Summary(mean, std, quantiles, outside)

    @staticmethod
    def _levels(levels: Sequence[float]) -> torch.Tensor:
        lv = np.asarray(levels, dtype=np.float64)
        if lv.ndim != 1 or not np.all((lv > 0) & (lv < 1)):
            raise InputValidationError(
                "levels", f"must be a 1-D sequence inside (0, 1), got {lv!r}", "a 1-D sequence inside (0, 1)"
            )
        return torch.as_tensor(lv)

    def quantile(self, levels: Sequence[float]) -> np.ndarray:
        levels_t = self._levels(levels).to(self.logits.device)
        z = self._by_rows(lambda lg: self._bar64.quantile(lg, levels_t), axis=1)
        loc, scale = self._loc_scale()
        q: np.ndarray = loc[None] + scale[None] * z
        return q

    def cdf(self, values: np.ndarray | float) -> np.ndarray:
        v = _finite_array("values", values, allow_inf=True)
        return self._by_rows(self._bar64.cdf, self._standardise("values", v))

    def cells(self, mask: np.ndarray) -> BarPredictive:
        """The (m, k) cells where `mask` holds as one row of answers (1, count), each with its own output's
        spread and floor: per cell the same numbers (every statistic is the cell's own)."""
        shape = self.loc.shape
        mask = np.asarray(mask, dtype=bool)

        def per_cell(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else np.broadcast_to(values, shape)[mask]

        return BarPredictive(
            self.bar,
            self.logits[torch.as_tensor(mask, device=self.logits.device)][None],
            self.loc[mask][None],
            self.scale[mask][None],
            per_cell(self.spread),
            per_cell(self.min_half),
            self.timing,
        )

    def cdf_many(self, values: np.ndarray) -> np.ndarray:
        """(L, m, k): one softmax and one cumsum per chunk for all L sets of values (the off-context guard's band
        probability asks for ~50 per answer)."""
        v = _finite_array("values", values, allow_inf=True)
        if v.ndim != 3 or v.shape[1:] != self.loc.shape:
            raise ValueError(f"values must be shaped (L, m, k) with (m, k) = {self.loc.shape}, got {v.shape}")
        z = torch.stack([self._standardise("values", one) for one in v], dim=-1)  # (m, k, L)
        return np.moveaxis(self._by_rows(self._bar64.cdf_points, z), -1, 0)

    def cdf_with_error(self, values: np.ndarray, error_std: np.ndarray) -> np.ndarray:
        """(L, m, k) in closed form per chunk (`BarDistribution.cdf_plus_normal`), the error standardised with the
        answer. An error under 1e-12 of the answer's scale is taken as that (the closed form needs it > 0)."""
        v = _finite_array("values", values)
        if v.ndim != 3 or v.shape[1:] != self.loc.shape:
            raise ValueError(f"values must be shaped (L, m, k) with (m, k) = {self.loc.shape}, got {v.shape}")
        sigma = np.maximum(np.broadcast_to(_finite_array("error_std", error_std), self.loc.shape), 0.0)
        scale = self._loc_scale()[1]
        z = torch.stack([self._standardise("values", one) for one in v], dim=-1)  # (m, k, L)
        z_sigma = self._torch(np.maximum(sigma / scale, _MIN_ERROR))[..., None]
        bar = self._bar64
        both = torch.cat([z, z_sigma], dim=-1)
        out = self._by_rows(lambda lg, zs: bar.cdf_plus_normal(torch.softmax(lg, -1), zs[..., :-1], zs[..., -1]), both)
        return np.moveaxis(out, -1, 0)

    def log_prob(self, y: np.ndarray) -> np.ndarray:
        v = _finite_array("y", y)
        lp: np.ndarray = self._by_rows(self._bar64.log_prob, self._standardise("y", v)) - np.log(self._loc_scale()[1])
        return lp

    def sample(self, n: int, seed: int | None = None) -> np.ndarray:
        """(n, m, k) draws in physical units."""
        gen = torch.Generator(device=self.logits.device)
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(seed)
        z = self._by_rows(lambda lg: self._bar64.sample(lg, n, generator=gen), axis=1)
        loc, scale = self._loc_scale()
        draws: np.ndarray = loc[None] + scale[None] * z
        return draws

"""The DVA-PFN behind the common `Method` interface: encode a context once, answer queries in chunks."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch

from models import physics_base
from models.bar_distribution import BarDistribution
from models.bar_predictive import BarPredictive
from models.calibration import (
    MIN_CALIBRATION_POINTS,
    check_heldout_slope,
    half_width_floor,
    median_leverage,
    spread_from_heldout,
)
from models.errors import RowsRefused
from models.model import DVAPFN, ContextCache
from models.network_voltages import solved
from models.predictive import Method, Summary
from models.validation import check_context, check_queries

# Queries per forward pass + statistics in `summarize`: their logits (about 4 MB for 32 outputs
# and 64 bars) stay in the CPU's cache between the head that writes them and the statistics, and
# for the fast transformer the pass is one inference block (no copy into a chunk-sized tensor).
# Chosen by timing half and double this size on the shipped models.
SUMMARY_CHUNK = 512


@dataclass
class EncodedContext:
    """What `fit` returns: the model's encoded context, the per-output spread factors (k,) or None,
    and on a small context the smallest half-width of each output's 95 % interval (k,) in output units, or None."""

    cache: ContextCache
    spread: np.ndarray | None
    min_half: np.ndarray | None = None
    cv: torch.Tensor | None = None  # the base fit's K-fold errors on a small context, which a recalibration takes again


class PFNMethod(Method):
    """Wraps a trained DVAPFN; `fit` encodes the context and calibrates each output's spread on it."""

    name = "dva-pfn"

    def __init__(
        self,
        model: DVAPFN,
        device: str | torch.device = "cpu",
        query_chunk: int = 2048,
        calibrate: bool = True,
        heldout_slope: float = 0.0,
        voltages: Callable[[np.ndarray], np.ndarray] | None = None,
    ):
        """`heldout_slope`: the checkpoint card's `calibration.heldout_slope` (models.heldout_bias).
        `voltages`: the network model's |V| (m, k) at load rows (m, d), NaN rows where its power flow
        fails (gridsim.api.VoltageModel): what a model with target_scale="probe" scales its answers by."""
        self.model = model.eval().to(device)
        self.voltages = voltages
        self.device = torch.device(device)
        self.query_chunk = query_chunk
        self.calibrate = bool(calibrate)
        self.heldout_slope = check_heldout_slope(heldout_slope, "heldout_slope")
        self.bar = BarDistribution(model.borders.detach().cpu())

    def on_network(
        self, load_positions: Sequence[int], voltages: Callable[[np.ndarray], np.ndarray] | None = None
    ) -> PFNMethod:
        """This method with a model of any feeder bound to one network (models.model.DVAPFN.on_network),
        and that network model's voltages (`voltages`, see __init__)."""
        return PFNMethod(
            self.model.on_network(load_positions),
            device=self.device,
            query_chunk=self.query_chunk,
            calibrate=self.calibrate,
            heldout_slope=self.heldout_slope,
            voltages=voltages,
        )

    @property
    def probed(self) -> bool:
        """Whether answers need the network model's power flow at every context row and query."""
        return self.model.cfg.target_scale == "probe"

    def _probe(self, x: np.ndarray, field: str, first_row: int = 0) -> torch.Tensor | None:
        """(1, m, k) the network model's |V| at rows x for a probed model, else None; RowsRefused naming
        `field`'s rows (counted from `first_row`) where its power flow fails."""
        if not self.probed:
            return None
        if self.voltages is None:
            raise ValueError(
                "voltages: this checkpoint scales its answers by the network model's power flow; none given"
            )
        try:
            return self._tensor(solved(self.voltages, x, field))[None]
        except RowsRefused as exc:
            raise RowsRefused(exc.field, [first_row + r for r in exc.rows], exc.reason, exc.expected) from None

    @property
    def d_in(self) -> int:
        return self.model.d_in

    def _tensor(self, arr: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(arr, dtype=torch.float64, device=self.device)

    @torch.inference_mode()
    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> EncodedContext:
        x, y, cache = self._encoded(context_x, context_y)
        if not self.calibrate:
            return EncodedContext(cache, None)
        cv = self._small_context_errors(cache, x, y)
        min_half = None if cv is None else half_width_floor(cv.cpu().numpy())
        return EncodedContext(cache, self.spread_factors(cache, x, y, cv), min_half, cv)

    @torch.inference_mode()
    def fit_for_means(self, context_x: np.ndarray, context_y: np.ndarray) -> EncodedContext:
        """`fit` without the spread's calibration, a second forward pass over the context (45 % of a fit of 500 IEEE 33
        rows): an answer's mean is the bars' own, before any spread is folded in (BarPredictive.summary)."""
        return EncodedContext(self._encoded(context_x, context_y)[2], None)

    def _encoded(self, context_x: np.ndarray, context_y: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, ContextCache]:
        """The context checked, as tensors (x, y), and the model's encoding of it."""
        context_x, context_y = check_context(context_x, context_y, d=self.d_in)
        x = self._tensor(context_x)
        y = self._tensor(context_y)
        return x, y, self.model.encode_context(x[None], y[None], probe_y=self._probe(context_x, "context_x"))

    def heldout_rms(self, fitted: EncodedContext) -> np.ndarray | None:
        """(k,) the base fit's rms leave-one-out error at the attended context rows, p.u."""
        cache = fitted.cache
        if cache.targets is None:
            return None
        targets = cache.targets[0].transpose(0, 1) * cache.stats.y_scale[0][None, :]  # (n, k)
        rms: np.ndarray = targets.square().mean(dim=0).sqrt().cpu().numpy()
        return rms

    @torch.inference_mode()
    def without_meter_noise(
        self, fitted: EncodedContext, context_x: np.ndarray, context_y: np.ndarray, noise: np.ndarray
    ) -> EncodedContext:
        """`fitted` (of this context) calibrated again on held-out errors less each reading's meter noise (n, k)
        (models.meter_noise)."""
        if fitted.spread is None:
            return fitted
        noise_t = self._tensor(noise)
        cv = None if fitted.cv is None else fitted.cv - noise_t
        min_half = None if cv is None else half_width_floor(cv.cpu().numpy())
        x, y = self._tensor(np.asarray(context_x)), self._tensor(np.asarray(context_y))
        spread = self.spread_factors(fitted.cache, x, y, cv, noise_t)
        return EncodedContext(fitted.cache, spread, min_half, cv)

    def _small_context_errors(
        self, cache: ContextCache, context_x: torch.Tensor, context_y: torch.Tensor
    ) -> torch.Tensor | None:
        """The physics base fit's K-fold residuals (n, k) on a context under CV_BELOW_POINTS rows, else None."""
        n = context_x.shape[0]
        if (
            self.model.cfg.base != "physics"
            or cache.attended is not None
            or not MIN_CALIBRATION_POINTS <= n < physics_base.CV_BELOW_POINTS
        ):
            return None
        return physics_base.cross_validated_errors(
            context_x[None].double(), context_y[None].double(), self.model.load_positions
        )

    @torch.inference_mode()
    def spread_factors(
        self,
        cache: ContextCache,
        context_x: torch.Tensor,
        context_y: torch.Tensor | None = None,
        cv: torch.Tensor | None = None,
        meter_noise: torch.Tensor | None = None,
    ) -> np.ndarray | None:
        """Per-output spread factors (k,) from the context itself, in one pass (None below
        MIN_CALIBRATION_POINTS): every point the attention sees is predicted with its own point
        masked, and its truth is the base fit's leave-one-out residual, so each point is held out
        of both without a refit. On a small context (under physics_base.CV_BELOW_POINTS, physics
        base) the truth is the base fit's K-fold residual instead: leave-one-out of the final fit
        keeps the tree and the model choice made with the point, and understated the error at new
        points up to 2x there (`cv`: those residuals when the caller has them). Otherwise the factors
        are divided by exp(heldout_slope * the base fit's median leverage): masking a point leaves it in
        the fits behind its neighbours' values, which overstates its error (models/heldout_bias.py).
        `meter_noise`: each reading's noise (n, k) p.u., taken out of the leave-one-out truths (models.meter_noise;
        the caller takes it out of `cv`)."""
        assert cache.targets is not None  # encode_context sets it
        targets = cache.targets[0].transpose(0, 1).cpu().numpy()  # (n, k) standardised LOO residuals
        n, k = targets.shape
        if n < MIN_CALIBRATION_POINTS:
            return None
        if cv is None and context_y is not None:
            cv = self._small_context_errors(cache, context_x, context_y)
        points = context_x if cache.attended is None else context_x[cache.attended]
        if meter_noise is not None:
            noise = meter_noise if cache.attended is None else meter_noise[cache.attended]
            targets = targets - (noise / cache.stats.y_scale[0][None, :]).cpu().numpy()
        overstatement = 1.0
        if cache.heldout_scale is not None:  # a probed model's bars are in its held-out unit, not the context's
            targets = targets * (cache.stats.y_scale[0][:, None] / cache.heldout_scale[0]).T.cpu().numpy()
        if cv is not None:
            unit = cache.stats.y_scale[0] if cache.heldout_scale is None else cache.heldout_scale[0].T
            targets = (cv / unit).cpu().numpy()
        elif self.heldout_slope > 0 and context_y is not None:  # the truth is the leave-one-out residual
            overstatement = math.exp(self.heldout_slope * self.base_leverage(cache, points, context_y, targets))
        logits, _, _ = self.model.predict(cache, points[None], held_out=True)  # (1, k, n, bars)
        pred = BarPredictive(self.bar, logits[0].transpose(0, 1).float().cpu(), np.zeros((n, k)), np.ones((1, k)))
        return spread_from_heldout(pred, targets, overstatement=overstatement)

    def base_leverage(
        self, cache: ContextCache, points: torch.Tensor, context_y: torch.Tensor, loo_targets: np.ndarray
    ) -> float:
        """Median in-sample leverage of the base fit at the attended context points (models.calibration)."""
        loc, _ = self.model.predict_base(cache.stats, points[None])  # (1, k, n) float64
        y = context_y if cache.attended is None else context_y[cache.attended]
        residuals = ((y.transpose(0, 1) - loc[0]) / cache.stats.y_scale[0][:, None]).transpose(0, 1)
        return median_leverage(residuals.cpu().numpy(), loo_targets)

    def refuse_unsolved(self, fitted: EncodedContext, query_x: np.ndarray, extrapolation: np.ndarray) -> None:
        """A probed checkpoint asks the network model at every query: RowsRefused naming each row without a
        power flow (models.predictive.Method.refuse_unsolved); any other asks it nowhere."""
        self._probe(check_queries(query_x, d=self.d_in), "query_x")

    @torch.inference_mode()
    def raw_predict(self, encoded: EncodedContext, query_x: np.ndarray) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """Logits (m, k, n_bars) on the CPU, location (m, k) and scale (1, k), or (m, k) for a probed model,
        in query chunks."""
        query_x = check_queries(query_x, d=self.d_in)
        m = len(query_x)
        # every chunk writes its logits straight into one (k, m, bars) buffer: no per-chunk tensor, no concatenation
        out = torch.empty(
            1,
            encoded.cache.n_outputs,
            m,
            self.model.cfg.n_bars,
            device=self.device,
            dtype=cast(torch.nn.Linear, self.model.head[-1]).weight.dtype,
        )
        locs, scales = [], []
        for start in range(0, m, self.query_chunk):
            rows = query_x[start : start + self.query_chunk]
            probe = self._probe(rows, "query_x", first_row=start)
            chunk = self._tensor(rows)
            _, loc, scale = self.model.predict(
                encoded.cache, chunk[None], out=out[:, :, start : start + len(chunk)], probe_y=probe
            )
            locs.append(loc[0].transpose(0, 1).cpu())
            scales.append(scale[0].transpose(0, 1).cpu())
        scale_np = (torch.cat(scales) if self.probed else scales[-1]).numpy()
        logits = out[0].transpose(0, 1).float().cpu()  # a (m, k, bars) view: statistics need no copy
        loc_np = torch.cat(locs).numpy()
        if self.probed:  # the base fit's mean, the bars' shape and width around it
            loc_np = loc_np - scale_np * self._bar_means(logits)
        return logits, loc_np, scale_np

    def _bar_means(self, logits: torch.Tensor) -> np.ndarray:
        """E[z] (m, k) of each answer's bars, float64, in row blocks (a probed model's centring).

        In the probe's unit, far off the context, one unit is the network model's whole miss: a bar mean of
        0.1 there moved answers by a tenth of it, and the unit has no sign to say which way (a first probed
        run's answers: 1.5-130x physics-fit's MAE through the API, bench/results/any-network.md). So a
        probed checkpoint answers the base fit's mean, with its bars' shape and width around it."""
        bar = self.bar.cast(torch.float64, logits.device)
        step = max(1, (1 << 22) // max(logits.shape[1] * logits.shape[2], 1))
        parts = [bar.mean(logits[start : start + step].double()) for start in range(0, len(logits), step)]
        return torch.cat(parts).cpu().numpy() if parts else np.zeros(logits.shape[:2])

    def predict(self, encoded: EncodedContext, query_x: np.ndarray) -> BarPredictive:
        logits, loc, scale = self.raw_predict(encoded, query_x)
        return BarPredictive(self.bar, logits, loc, scale, spread=encoded.spread, min_half=encoded.min_half)

    def summarize(
        self,
        encoded: EncodedContext,
        query_x: np.ndarray,
        levels: Sequence[float] = (),
        band: tuple[float, float] | None = None,
    ) -> Summary:
        """`predict(...).summary(...)` chunk by chunk: no m x k x n_bars logits for the whole request."""
        query_x = check_queries(query_x, d=self.d_in)
        parts = [
            self.predict(encoded, query_x[start : start + SUMMARY_CHUNK]).summary(levels, band)
            for start in range(0, max(len(query_x), 1), SUMMARY_CHUNK)
        ]
        return Summary.concat(parts)

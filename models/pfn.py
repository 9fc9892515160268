"""The DVA-PFN behind the common `Method` interface: encode a context once, answer queries in chunks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from models.bar_distribution import BarDistribution
from models.bar_predictive import BarPredictive
from models.calibration import MIN_CALIBRATION_POINTS, FoldPlan, spread_from_heldout
from models.model import ContextCache, DVAPFN
from models.predictive import Method, Summary
from models.validation import check_context, check_queries

# Queries per forward pass + statistics in `summarize`: their logits (about 4 MB for 32 outputs
# and 64 bars) stay in the CPU's cache between the head that writes them and the statistics, and
# for the fast transformer the pass is one inference block (no copy into a chunk-sized tensor).
# On the 2-core CPU, 1 thread: 512 gave 31.8 / 100.4 us per row (fast / transformer-dva), 1024
# gave 34.1 / 104.9 and 256 gave 33.8 / 106.6.
SUMMARY_CHUNK = 512
# Folds of the in-context spread calibration (0 turns it off): 20 keeps each fold's context at
# 95 % of the real one, so the factors carry little small-context bias (see models.calibration).
CALIBRATION_FOLDS = 20


@dataclass
class EncodedContext:
    """What `fit` returns: the model's encoded context and the per-output spread factors (k,) or None."""

    cache: ContextCache
    spread: np.ndarray | None


class PFNMethod(Method):
    """Wraps a trained DVAPFN; `fit` encodes the context and calibrates each output's spread on it."""

    name = "dva-pfn"

    def __init__(self, model: DVAPFN, device: str | torch.device = "cpu", query_chunk: int = 2048,
                 calibration_folds: int = CALIBRATION_FOLDS):
        if calibration_folds == 1 or calibration_folds < 0:
            raise ValueError(f"calibration_folds: expected 0 (off) or >= 2, got {calibration_folds}")
        self.model = model.eval().to(device)
        self.device = torch.device(device)
        self.query_chunk = query_chunk
        self.calibration_folds = calibration_folds
        self.bar = BarDistribution(model.borders.detach().cpu())

    @property
    def d_in(self) -> int:
        return self.model.cfg.d_in

    def _tensor(self, arr: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(arr, dtype=torch.float64, device=self.device)

    @torch.inference_mode()
    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> EncodedContext:
        context_x, context_y = check_context(context_x, context_y, d=self.d_in)
        cache = self.model.encode_context(self._tensor(context_x)[None], self._tensor(context_y)[None])
        return EncodedContext(cache, self.spread_factors(context_x, context_y))

    @torch.inference_mode()
    def spread_factors(self, context_x: np.ndarray, context_y: np.ndarray) -> np.ndarray | None:
        """Per-output spread factors from K-fold cross-fitting on the context (None when off or too few points).

        All K folds run as one batch: encode K contexts of (K-1)/K of the points, predict the held-out rest.
        """
        n = len(context_x)
        if self.calibration_folds < 2 or n < max(MIN_CALIBRATION_POINTS, 2 * self.calibration_folds):
            return None
        plan = FoldPlan.build(n, self.calibration_folds)
        cx, cy = self._tensor(context_x), self._tensor(context_y)
        cache = self.model.encode_context(cx[plan.train], cy[plan.train])
        logits, loc, scale = self.model.predict(cache, cx[plan.held])  # (K, k, h, bars), (K, k, h), (K, k, 1)
        valid = plan.valid.reshape(-1)
        keep = torch.as_tensor(valid, device=self.device)

        def points(t: torch.Tensor) -> torch.Tensor:
            """(K, k, h, ...) fold-major -> (held-out points, k, ...), padding dropped."""
            return t.transpose(1, 2).reshape(-1, t.shape[1], *t.shape[3:])[keep].cpu()

        pred = BarPredictive(self.bar, points(logits).float(), points(loc).numpy(), points(scale.expand_as(loc)).numpy())
        return spread_from_heldout(pred, context_y[plan.held.reshape(-1)[valid]])

    @torch.inference_mode()
    def raw_predict(self, encoded: EncodedContext, query_x: np.ndarray) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """Logits (m, k, n_bars) on the CPU, location (m, k) and scale (1, k), in query chunks."""
        query_x = check_queries(query_x, d=self.d_in)
        logits, locs = [], []
        for start in range(0, len(query_x), self.query_chunk):
            chunk = self._tensor(query_x[start : start + self.query_chunk])
            lg, loc, scale = self.model.predict(encoded.cache, chunk[None])
            logits.append(lg[0].transpose(0, 1).float().cpu())  # a (m, k, bars) view: statistics need no copy
            locs.append(loc[0].transpose(0, 1).cpu())
        scale_np = scale[0].transpose(0, 1).cpu().numpy()
        return (torch.cat(logits) if len(logits) > 1 else logits[0]), torch.cat(locs).numpy(), scale_np

    def predict(self, encoded: EncodedContext, query_x: np.ndarray) -> BarPredictive:
        logits, loc, scale = self.raw_predict(encoded, query_x)
        return BarPredictive(self.bar, logits, loc, scale, spread=encoded.spread)

    def summarize(self, encoded: EncodedContext, query_x: np.ndarray, levels: Sequence[float] = (),
                  band: tuple[float, float] | None = None) -> Summary:
        """`predict(...).summary(...)` chunk by chunk: no m x k x n_bars logits for the whole request."""
        query_x = check_queries(query_x, d=self.d_in)
        parts = [self.predict(encoded, query_x[start : start + SUMMARY_CHUNK]).summary(levels, band)
                 for start in range(0, max(len(query_x), 1), SUMMARY_CHUNK)]
        return Summary.concat(parts)

"""The DVA-PFN behind the common `Method` interface: encode a context once, answer queries in chunks."""
from __future__ import annotations

import numpy as np
import torch

from models.bar_distribution import BarDistribution
from models.bar_predictive import BarPredictive
from models.model import ContextCache, DVAPFN
from models.predictive import Method
from models.validation import check_context, check_queries


class PFNMethod(Method):
    """Wraps a trained DVAPFN; `fit` returns the encoded context (per-layer keys and values)."""

    name = "dva-pfn"

    def __init__(self, model: DVAPFN, device: str | torch.device = "cpu", query_chunk: int = 2048):
        self.model = model.eval().to(device)
        self.device = torch.device(device)
        self.query_chunk = query_chunk
        self.bar = BarDistribution(model.borders.detach().cpu())

    @property
    def d_in(self) -> int:
        return self.model.cfg.d_in

    @torch.inference_mode()
    def fit(self, context_x: np.ndarray, context_y: np.ndarray) -> ContextCache:
        context_x, context_y = check_context(context_x, context_y, d=self.d_in)
        cx = torch.as_tensor(context_x, dtype=torch.float64, device=self.device)[None]
        cy = torch.as_tensor(context_y, dtype=torch.float64, device=self.device)[None]
        return self.model.encode_context(cx, cy)

    @torch.inference_mode()
    def raw_predict(self, cache: ContextCache, query_x: np.ndarray) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """Logits (m, k, n_bars) on the CPU, location (m, k) and scale (1, k), in query chunks."""
        query_x = check_queries(query_x, d=self.d_in)
        logits, locs = [], []
        for start in range(0, len(query_x), self.query_chunk):
            chunk = torch.as_tensor(query_x[start : start + self.query_chunk], dtype=torch.float64, device=self.device)
            lg, loc, scale = self.model.predict(cache, chunk[None])
            logits.append(lg[0].transpose(0, 1).float().cpu())
            locs.append(loc[0].transpose(0, 1).cpu())
        scale_np = scale[0].transpose(0, 1).cpu().numpy()
        return torch.cat(logits), torch.cat(locs).numpy(), scale_np

    def predict(self, cache: ContextCache, query_x: np.ndarray) -> BarPredictive:
        logits, loc, scale = self.raw_predict(cache, query_x)
        return BarPredictive(self.bar, logits, loc, scale)

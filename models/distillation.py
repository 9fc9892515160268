"""Distillation: a smaller model also learns a trained teacher's bar distributions.

Why: on the prior's own targets a small model learns slowly what a larger one already knows (on
IEEE 33, a mid-size transformer trained 40,000 steps from scratch stayed worse than ridge
regression at 16 context rows where transformer-dva was 0.4x ridge). The teacher's whole
predictive distribution per query is a far richer signal than one sampled target.

Both models share the base fit (same `base`, so the same location and scale): their bars describe
the same standardised residual, only the borders differ. The teacher's bar probabilities are moved
onto the student's borders through the teacher's piecewise-linear CDF, and the student's loss adds
the cross-entropy against them.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from models.model import DVAPFN


def rebin(probs: torch.Tensor, borders: torch.Tensor, onto: torch.Tensor) -> torch.Tensor:
    """Bar probabilities (..., n) over `borders` (n + 1,) -> probabilities (..., m) over `onto` (m + 1,).

    Mass is spread uniformly within each source bar (its tails too: an approximation only in the
    outer bars); mass beyond the outer target borders goes to the outer target bars, so the result
    sums to one."""
    cdf = torch.cat([probs.new_zeros(*probs.shape[:-1], 1), probs.cumsum(-1)], dim=-1)  # at `borders`
    borders = borders.to(probs)
    inner = onto[1:-1].to(probs).clamp(borders[0], borders[-1])
    right = torch.searchsorted(borders, inner, right=True).clamp(1, borders.numel() - 1)
    left = right - 1
    frac = (inner - borders[left]) / (borders[right] - borders[left])
    at_inner = cdf[..., left] + frac * (cdf[..., right] - cdf[..., left])  # (..., m - 1)
    full = torch.cat([torch.zeros_like(at_inner[..., :1]), at_inner, torch.ones_like(at_inner[..., :1])], dim=-1)
    return (full[..., 1:] - full[..., :-1]).clamp_min(0.0)


class Teacher:
    """A frozen trained model whose answers a student learns (`TrainConfig.teacher`)."""

    def __init__(self, checkpoint: str | Path, device: torch.device):
        from models.registry import CheckpointError, load_checkpoint  # the registry imports the model stack

        try:
            model = load_checkpoint(checkpoint, device=str(device), warmup=False, calibrate=False).method.model
        except CheckpointError as exc:
            raise ValueError(f"teacher: expected a registry checkpoint directory; {exc}") from None
        self.model = model.eval().requires_grad_(False)
        self.checkpoint = str(checkpoint)

    def check_student(self, student: DVAPFN) -> None:
        """Refuse a student whose bars would describe another quantity than the teacher's."""
        mine, theirs = student.cfg, self.model.cfg
        if (mine.d_in, mine.base, mine.load_positions) != (theirs.d_in, theirs.base, theirs.load_positions):
            raise ValueError(
                f"teacher: {self.checkpoint} has d_in/base/load_positions {theirs.d_in}/{theirs.base}/"
                f"{theirs.load_positions}, the student {mine.d_in}/{mine.base}/{mine.load_positions}"
            )

    @torch.no_grad()
    def targets(
        self, cx: torch.Tensor, cy: torch.Tensor, qx: torch.Tensor, pick: torch.Tensor, onto: torch.Tensor
    ) -> torch.Tensor:
        """The teacher's bar probabilities for the queries, on the student's borders `onto`: (B, k, m, n_bars)."""
        logits, _, _ = self.model(cx, cy, qx, pick)
        return rebin(logits.float().softmax(-1), self.model.borders, onto)


def cross_entropy(student_logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Mean over queries of -sum_j p_j log q_j (bar masses; the bar widths only add a constant)."""
    return -(target_probs * F.log_softmax(student_logits, dim=-1)).sum(-1).mean()

"""Accuracy figures of a predictive distribution against ground truth, as the reports print them."""

from __future__ import annotations

import numpy as np

from models.predictive import Predictive


def accuracy_summary(pred: Predictive, y_true: np.ndarray, coverage: float = 0.95) -> dict[str, float]:
    """Per-output errors reduced the way the paper's Table 4 does (max over buses), plus calibration."""
    y_true = np.asarray(y_true, dtype=np.float64)
    if y_true.shape != pred.mean.shape:
        raise ValueError(f"y_true: expected shape {pred.mean.shape}, got {y_true.shape}")
    err = pred.mean - y_true
    mae = np.abs(err).mean(axis=0)
    mse = (err**2).mean(axis=0)
    low, high = pred.interval(coverage)
    covered = ((y_true >= low) & (y_true <= high)).mean(axis=0)
    return {
        "max_mse": float(mse.max()),
        "max_mae": float(mae.max()),
        "mean_mae": float(mae.mean()),
        "nll": float(-pred.log_prob(y_true).mean()),
        "coverage_mean": float(covered.mean()),
        "coverage_worst": float(covered.min()),
        "coverage_best": float(covered.max()),
    }

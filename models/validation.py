"""Input checks shared by every method: clear errors naming the field and the expected shape."""
from __future__ import annotations

import numpy as np


def as_matrix(name: str, value, cols: int | None = None, min_rows: int = 1) -> np.ndarray:
    """A finite float64 (rows, cols) array, or ValueError naming `name`."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected a numeric 2-D array, got {type(value).__name__}") from exc
    expected = f"(n, {cols})" if cols is not None else "(n, d)"
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected shape {expected}, got {arr.shape}")
    if (cols is not None and arr.shape[1] != cols) or arr.shape[1] < 1:
        raise ValueError(f"{name}: expected shape {expected}, got {arr.shape}")
    if arr.shape[0] < min_rows:
        raise ValueError(f"{name}: expected at least {min_rows} rows, got {arr.shape[0]}")
    bad = ~np.isfinite(arr)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise ValueError(f"{name}: expected finite numbers, found {arr[row, col]} at row {row}, column {col}")
    return arr


def check_context(context_x, context_y, d: int | None = None, min_rows: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Context inputs (n, d) and targets (n, k) with matching n."""
    cx = as_matrix("context_x", context_x, d, min_rows)
    cy = as_matrix("context_y", context_y, None, min_rows)
    if cy.shape[0] != cx.shape[0]:
        raise ValueError(f"context_y: expected {cx.shape[0]} rows to match context_x, got {cy.shape[0]}")
    return cx, cy


def check_queries(query_x, d: int | None = None) -> np.ndarray:
    """Query inputs (m, d)."""
    return as_matrix("query_x", query_x, d, 1)

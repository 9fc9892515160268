"""Input checks shared by every method: clear errors naming the field and the expected shape."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from models.errors import InputValidationError


def as_matrix(
    name: str, value: npt.ArrayLike, cols: int | None = None, min_rows: int = 1, missing: bool = False
) -> np.ndarray:
    """A finite float64 (rows, cols) array, or ValueError naming `name`; `missing`: NaN allowed
    (a value not measured), infinities still refused."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputValidationError(
            name, f"expected a numeric 2-D array, got {type(value).__name__}", "a numeric 2-D array"
        ) from exc
    expected = f"(n, {cols})" if cols is not None else "(n, d)"
    if arr.ndim != 2:
        raise InputValidationError(name, f"expected shape {expected}, got {arr.shape}", f"shape {expected}")
    if (cols is not None and arr.shape[1] != cols) or arr.shape[1] < 1:
        raise InputValidationError(name, f"expected shape {expected}, got {arr.shape}", f"shape {expected}")
    if arr.shape[0] < min_rows:
        raise InputValidationError(
            name, f"expected at least {min_rows} rows, got {arr.shape[0]}", f"at least {min_rows} rows"
        )
    bad = np.isinf(arr) if missing else ~np.isfinite(arr)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        raise InputValidationError(
            name, f"expected finite numbers, found {arr[row, col]} at row {row}, column {col}", "finite numbers"
        )
    return arr


def check_context(
    context_x: npt.ArrayLike, context_y: npt.ArrayLike, d: int | None = None, min_rows: int = 2, missing: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Context inputs (n, d) and targets (n, k) with matching n; `missing`: NaN marks what was not measured."""
    cx = as_matrix("context_x", context_x, d, min_rows, missing)
    cy = as_matrix("context_y", context_y, None, min_rows, missing)
    if cy.shape[0] != cx.shape[0]:
        raise InputValidationError(
            "context_y",
            f"expected {cx.shape[0]} rows to match context_x, got {cy.shape[0]}",
            f"{cx.shape[0]} rows, one per context_x row",
        )
    return cx, cy


def check_queries(query_x: npt.ArrayLike, d: int | None = None) -> np.ndarray:
    """Query inputs (m, d)."""
    return as_matrix("query_x", query_x, d, 1)

"""The network model's voltages at given loads, or a refusal naming the rows its power flow cannot solve.

Loads a feeder cannot carry have no power-flow solution (voltage collapse, or an injection the feeder
cannot take): no model's answer there means anything, so every method that consults the network model
refuses those rows (RowsRefused: a 422 naming them) rather than answering beside a NaN."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from models.errors import RowsRefused

NO_SOLUTION = "the network model's power flow does not converge at these loads: beyond what the feeder can carry"
# what a refused row should hold instead; the units, since loads in kW (1,000x) are the commonest way to get there
CARRIED = "loads the feeder can carry (P in MW, Q in MVAr)"


def solved(voltage_model: Callable[[np.ndarray], np.ndarray], x: np.ndarray, field: str) -> np.ndarray:
    """(m, k) |V| of the network model at load rows x (m, d); RowsRefused naming `field`'s rows without one."""
    v = np.asarray(voltage_model(x), dtype=np.float64)
    bad = ~np.isfinite(v).all(axis=1)
    if bad.any():
        raise RowsRefused(field, np.flatnonzero(bad).tolist(), NO_SOLUTION, CARRIED)
    return v

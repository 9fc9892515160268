"""The limits and shapes a request is held to before any model time is spent.

Row widths are the served network's (gridsim's description), limits the GRIDPFN_* settings; every
refusal is a domain error naming the field (InvalidInput, TooLarge, GPContextTooLarge).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from service.engine.context_sets import ContextSet
from service.engine.errors import GPContextTooLarge, InvalidInput, TooLarge
from service.engine.gridsim_calls import served_network
from service.settings import Settings


def as_matrix(rows: Any, width: int, field: str) -> np.ndarray:
    """(len(rows), width) float64 array; InvalidInput naming the first row of another length."""
    if isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.shape[1] == width:  # an Arrow body's, checked
        return np.asarray(rows, dtype=np.float64)
    for i, row in enumerate(rows):
        if len(row) != width:
            raise InvalidInput(f"{field}[{i}]", f"has {len(row)} values", f"{width} finite numbers")
    return np.asarray(rows, dtype=np.float64)


class Checks:
    """The configured limits, applied."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        net = served_network()
        self.n_features, self.n_outputs = net.n_features, net.n_outputs
        self.output_names = list(net.output_names)

    def queries(self, queries: Any, width: int, field: str = "queries") -> np.ndarray:
        """(m, width) float64 array; TooLarge over GRIDPFN_MAX_QUERIES, InvalidInput for a row of the wrong length."""
        limit = self.settings.max_queries
        if len(queries) > limit:
            raise TooLarge(field, f"{len(queries)} rows is over the limit", f"at most {limit} rows")
        return as_matrix(queries, width, field)

    def inline_context(self, x: Any, y: Any, field: str = "context") -> ContextSet:
        """Validate an uploaded or inline context's shape and build its content-addressed set."""
        if len(x) > self.settings.max_context_rows:
            raise TooLarge(f"{field}.x", f"{len(x)} context rows is over the limit",
                           f"at most {self.settings.max_context_rows} rows (GRIDPFN_MAX_CONTEXT_ROWS)")
        if len(x) != len(y):
            raise InvalidInput(f"{field}.y", f"has {len(y)} rows but x has {len(x)}", f"{len(x)} rows, one per x row")
        xa = as_matrix(x, self.n_features, f"{field}.x")
        ya = as_matrix(y, self.n_outputs, f"{field}.y")
        return ContextSet.build(xa, ya)

    def context_size(self, loaded: Any, ctx: ContextSet) -> None:
        """The context's rows within what the model's card supports."""
        sizes = loaded.card.get("context_size") or {}
        low, high = int(sizes.get("min", 1)), int(sizes.get("max", self.settings.max_context_rows))
        if not low <= ctx.rows <= high:
            raise InvalidInput("context", f"{ctx.rows} context rows is outside what {loaded.name} supports",
                               f"between {low} and {high} rows (model card context_size)")

    def gp(self, ctx: ContextSet, queries: np.ndarray) -> None:
        """GP work within the configured sizes: the context (else a batch job's work), then the queries."""
        if ctx.rows > self.settings.gp_max_context:
            raise GPContextTooLarge(ctx.rows, self.settings.gp_max_context)
        if queries.shape[0] > self.settings.gp_max_queries:
            raise TooLarge("queries", f"{queries.shape[0]} rows is over the exact-GP limit",
                           f"at most {self.settings.gp_max_queries} rows (GRIDPFN_GP_MAX_QUERIES); more: POST /v1/batch-jobs")


"""The limits and shapes a request is held to before any model time is spent.

Row widths are the request's network's (gridsim's description of the built-in or uploaded
feeder the context set names), limits the GRIDPFN_* settings; every refusal is a domain error
naming the field, and a width that does not fit names both widths (InvalidInput, TooLarge,
GPContextTooLarge). A context may miss values (NaN: service.engine.sparse), queries may not; only a
model whose method accepts missing values is given such a context.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.limits import READING_MAX_PU, READING_MIN_PU
from service.engine.context_sets import ContextSet
from service.engine.errors import GPContextTooLarge, InvalidInput, TooLarge
from service.engine.load_table import LOAD_LIMIT, InputError, NamedColumns
from service.engine.sparse import check_rows, refuse_unless_accepted
from service.settings import Settings


def _inputs(net: Any) -> str:
    return f"network {net.name} has {net.n_features} load inputs"


def _outputs(net: Any) -> str:
    return f"network {net.name} has {net.n_outputs} outputs"


def as_matrix(rows: Any, width: int, field: str, why: str | None = None) -> np.ndarray:
    """(len(rows), width) float64 array; InvalidInput naming the first row of another length (and `why`
    the width is what it is)."""
    if isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.shape[1] == width:  # an Arrow body's, checked
        return np.asarray(rows, dtype=np.float64)
    for i, row in enumerate(rows):
        if len(row) != width:
            message = f"has {len(row)} values" + (f"; {why}" if why else "")
            raise InvalidInput(f"{field}[{i}]", message, f"{width} finite numbers")
    return np.asarray(rows, dtype=np.float64)


def _width_check(rows: Any, width: int, field: str, why: str, what: str) -> np.ndarray:
    """The whole matrix's width first (the common mistake: another network's rows), then each row's."""
    first = len(rows[0]) if len(rows) and not isinstance(rows, np.ndarray) else (rows.shape[1] if len(rows) else width)
    if first != width:
        raise InvalidInput(
            field,
            f"{field.rpartition('.')[2]} has {first} columns; {why}",
            f"{width} {what} per row, in the network's order (GET /v1/networks/{{id}})",
        )
    return as_matrix(rows, width, field, why)


def load_rows(rows: Any, net: Any, field: str) -> np.ndarray:
    """(m, net.n_features) float64 load vectors; InvalidInput naming both widths."""
    if isinstance(rows, NamedColumns):  # an Arrow body: columns by name, in the network's feature order
        try:
            return rows.ordered(net.feature_names)
        except InputError as exc:
            problem = InvalidInput(field, f"{exc}; {_inputs(net)}", exc.expected)
            problem.entries[0].update(row=exc.row, column=exc.column)
            raise problem from None
    return _width_check(rows, net.n_features, field, _inputs(net), "load values (P then Q of each load bus)")


def _context_field(ctx: ContextSet) -> str | None:
    """The request field a context came in: None for an inline one (then `context.x` / `context.y`)."""
    return None if ctx.source.get("kind") == "inline" else "context_id"


class Checks:
    """The configured limits, applied."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def queries(self, queries: Any, net: Any, field: str = "queries") -> np.ndarray:
        """(m, net.n_features) float64 array; TooLarge over GRIDPFN_MAX_QUERIES, InvalidInput for another width."""
        limit = self.settings.max_queries
        if len(queries) > limit:
            raise TooLarge(field, f"{len(queries)} rows is over the limit", f"at most {limit} rows")
        return load_rows(queries, net, field)

    def context(
        self,
        x: Any,
        y: Any,
        net: Any,
        field: str = "context",
        source: dict[str, Any] | None = None,
        owner: str | None = None,
        typical_loads: Any = None,
    ) -> ContextSet:
        """Validate an uploaded or inline context against its network and build its content-addressed set
        (addressed within its owner's tenant: `owner` is the tenant tag, None when keys are off). Values may
        be missing (None / NaN; never infinite), though every row must read a voltage; `typical_loads` (one
        per load feature) stand in for unmetered loads."""
        if len(x) > self.settings.max_context_rows:
            raise TooLarge(
                f"{field}.x",
                f"{len(x)} context rows is over the limit",
                f"at most {self.settings.max_context_rows} rows (GRIDPFN_MAX_CONTEXT_ROWS)",
            )
        if len(x) != len(y):
            raise InvalidInput(f"{field}.y", f"has {len(y)} rows but x has {len(x)}", f"{len(x)} rows, one per x row")
        xa = load_rows(x, net, f"{field}.x")
        ya = _width_check(y, net.n_outputs, f"{field}.y", _outputs(net), "voltages (|V| p.u. of each non-slack bus)")
        for name, values in (("x", xa), ("y", ya)):
            if np.isinf(values).any():
                row, col = map(int, np.argwhere(np.isinf(values))[0])
                raise InvalidInput(
                    f"{field}.{name}[{row}][{col}]", "is infinite", "a finite number, or null if missing"
                )
        implausible = (ya < READING_MIN_PU) | (ya > READING_MAX_PU)  # NaN (not read) compares False
        if implausible.any():
            row, col = map(int, np.argwhere(implausible)[0])
            raise InvalidInput(
                f"{field}.y[{row}][{col}]",
                f"is {ya[row, col]:g}",
                f"a voltage magnitude in p.u. within [{READING_MIN_PU:g}, {READING_MAX_PU:g}], or null if not read",
            )
        check_rows(ya, f"{field}.y")
        typical = None
        if typical_loads is not None:
            typical = np.asarray(typical_loads, dtype=np.float64)
            if typical.shape != (net.n_features,):
                raise InvalidInput(
                    f"{field}.typical_loads",
                    f"has {typical.size} values; {_inputs(net)}",
                    f"{net.n_features} finite numbers: a typical value per load feature, in x's order",
                )
            if not (np.isfinite(typical).all() and (np.abs(typical) <= LOAD_LIMIT).all()):
                raise InvalidInput(
                    f"{field}.typical_loads", "holds a value that is not finite", f"MW or Mvar within +-{LOAD_LIMIT:g}"
                )
        return ContextSet.build(xa, ya, source, network=net.name, owner=owner, typical_loads=typical)

    def accepts(self, loaded: Any, ctx: ContextSet) -> None:
        """A context with missing values only for a model whose method accepts them (it declares so)."""
        refuse_unless_accepted(loaded.method, loaded.name, ctx.missing, _context_field(ctx))

    def context_size(self, loaded: Any, ctx: ContextSet) -> None:
        """The context's rows within what the model's card supports."""
        sizes = loaded.card.get("context_size") or {}
        low, high = int(sizes.get("min", 1)), int(sizes.get("max", self.settings.max_context_rows))
        if not low <= ctx.rows <= high:
            raise InvalidInput(
                _context_field(ctx) or "context",
                f"{ctx.rows} context rows is too {'few' if ctx.rows < low else 'many'} for {loaded.name}: "
                f"it takes {low} to {high} rows",
                f"between {low} and {high} rows (model card context_size)",
            )

    def gp(self, ctx: ContextSet, queries: np.ndarray) -> None:
        """GP work within the configured sizes: the context (else a batch job's work), then the queries;
        a context with missing values is refused (the exact GP interpolates every reading it is given)."""
        refuse_unless_accepted(None, "exact-gp (compare_gp, /v1/gp/predict)", ctx.missing, _context_field(ctx))
        if ctx.rows > self.settings.gp_max_context:
            raise GPContextTooLarge(ctx.rows, self.settings.gp_max_context)
        if queries.shape[0] > self.settings.gp_max_queries:
            raise TooLarge(
                "queries",
                f"{queries.shape[0]} rows is over the exact-GP limit",
                f"at most {self.settings.gp_max_queries} rows (GRIDPFN_GP_MAX_QUERIES); more: POST /v1/batch-jobs",
            )

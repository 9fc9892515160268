"""What the engine refuses, in its own words: no status codes, no media types.

Each error names what was wrong (`field`, `expected`, `location` of the value in the request) so
the HTTP layer can answer a problem that points at it; `service.http.problems.PROBLEMS` is the one
table that gives each kind its status, type and title.
"""

from __future__ import annotations

from typing import Any

from models.errors import InputValidationError


class EngineError(Exception):
    """Base of the domain errors; `detail` is for people, `entries` point at the offending values."""

    def __init__(
        self,
        detail: str,
        field: str | None = None,
        message: str | None = None,
        expected: str | None = None,
        location: str = "body",
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.entries: list[dict[str, Any]] = (
            []
            if field is None
            else [
                {
                    "location": location,
                    "field": field,
                    "message": detail if message is None else message,
                    "expected": expected,
                }
            ]
        )


class InvalidInput(EngineError):
    """A value that parsed but cannot be used: wrong shape, out of range, a spec that cannot run."""

    def __init__(self, field: str, message: str, expected: str | None = None, location: str = "body") -> None:
        super().__init__(f"{field}: {message}", field, message, expected, location)


class TooLarge(EngineError):
    """More rows, bytes or simulations than the configured limit."""

    def __init__(self, field: str, detail: str, expected: str) -> None:
        super().__init__(detail, field, detail, expected)


class NotFound(EngineError):
    """An unknown model, context set, network or batch job (`what`) under `key`."""

    ECHO_CHARS = 100  # a name is echoed back at most this long: a megabyte-long one is not sent back whole

    def __init__(self, what: str, key: str, field: str, location: str = "path") -> None:
        shown = repr(key) if len(key) <= self.ECHO_CHARS else f"{key[: self.ECHO_CHARS]!r}... ({len(key)} characters)"
        super().__init__(f"no {what} {shown}", field, f"unknown {what}", f"an existing {what}", location)
        self.what = what


class GPContextTooLarge(EngineError):
    """A context over the on-demand exact GP's size: a batch job's work."""

    def __init__(self, rows: int, limit: int) -> None:
        super().__init__(
            f"the exact GP is limited to {limit} context rows here ({rows} given); "
            "submit the study as a batch job (POST /v1/batch-jobs) or use a smaller context",
            "context",
            f"{rows} rows",
            f"at most {limit} rows (GRIDPFN_GP_MAX_CONTEXT); larger: POST /v1/batch-jobs",
        )


class InputRejected(EngineError):
    """The model refused an input that passed every check (its typed InputValidationError; any other
    exception is a fault of the service, answered 500)."""

    # the request's field for each model argument (the context's: `context_field`, which the caller knows)
    FIELDS = {"query_x": "queries", "levels": "quantiles", "band": "voltage_band"}

    def __init__(self, exc: InputValidationError, context_field: str = "context") -> None:
        field = context_field if exc.field in ("context_x", "context_y") else self.FIELDS.get(exc.field, exc.field)
        # worded with the request's field, not the model argument's ("queries: rows [5]", never "query_x: ...")
        text = f"{field}: {exc.message}" if field != exc.field else str(exc)
        super().__init__(text, field, text, exc.expected or "inputs within the model's supported range")


class QueueFull(EngineError):
    """Every worker is busy and the waiting queue is full."""

    def __init__(self, running_or_queued: int, capacity: int) -> None:
        self.reason = f"{running_or_queued} jobs running or queued (capacity {capacity})"
        super().__init__(f"worker queue full: {self.reason}; retry shortly")


class GPBusy(EngineError):
    """The exact GP's own pool (service.engine.gp_pool) is full; the models are not affected."""

    def __init__(self, field: str, running: int, waiting: int, capacity: int, retry_after_s: int) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(
            f"the exact GP is busy: {running} GP requests running and {waiting} waiting (capacity {capacity}: "
            f"GRIDPFN_GP_WORKERS + GRIDPFN_GP_QUEUE_SIZE); retry after {retry_after_s} s. Model predictions "
            "without the GP are answered meanwhile",
            field,
            "the exact GP is busy",
            f"a retry after {retry_after_s} s (Retry-After), or the request without the exact GP",
        )


class GPTimeout(EngineError):
    """A GP fit or answer ran past GRIDPFN_GP_TIMEOUT_S and its worker process was stopped."""

    def __init__(self, field: str, limit_s: float, rows: int) -> None:
        super().__init__(
            f"the exact GP on {rows} context rows did not finish within {limit_s:g} s (GRIDPFN_GP_TIMEOUT_S) and "
            "was stopped; use a smaller context, or submit the study as a batch job (POST /v1/batch-jobs)",
            field,
            f"the exact GP took longer than {limit_s:g} s",
            f"a context the exact GP fits within {limit_s:g} s here (fewer than {rows} rows), or POST /v1/batch-jobs",
        )


class GPWorkerLost(EngineError):
    """The exact GP's worker process exited while answering (killed for memory, crashed); it is replaced."""

    def __init__(self, field: str, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"the exact GP's worker process stopped while answering ({reason}); it is restarted on "
            "the next GP request: retry shortly",
            field,
            "the exact GP's worker process stopped",
            "a retry (Retry-After), or a smaller context",
        )


class StoreUnavailable(EngineError):
    """The store holding `what` (context sets, networks) cannot be reached right now.

    str() is the backend's failure alone; `detail` adds what the caller can do (`hint`)."""

    def __init__(self, reason: str, what: str = "context", hint: str = "; retry shortly") -> None:
        super().__init__(f"{reason}{hint}")
        self.reason, self.what, self.hint = reason, what, hint
        self.args = (reason,)

    def about(self, what: str | None = None, hint: str | None = None) -> StoreUnavailable:
        """The same failure, told about another kind of data or with other advice."""
        return StoreUnavailable(self.reason, self.what if what is None else what, self.hint if hint is None else hint)


class NonFiniteAnswer(EngineError):
    """The method produced NaN or infinity; nothing is returned."""

    def __init__(self, what: str) -> None:
        super().__init__(f"the {what} produced NaN or infinity for this request; nothing is returned")

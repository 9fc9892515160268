"""The bounds on the lists and objects of a JSON request body, checked as the body is validated.

Why: a body of a few MB whose lists had no bound, and whose items were each invalid, held the event loop for
tens of seconds and drove the server to an out-of-memory kill (28 MB of `"x"` items in a study's time series):
pydantic built an error per item, and the problem converted them all, before any length check ran. So every list
and object has a bound from what the service takes, is refused in one error once over it, and stops at its first
bad item (`fail_fast`; a list of rows stops at a row's first bad cell instead, so its errors are one per bad row
and at most as many as the rows it may hold).

Two kinds of bound:
- a configured row limit (GRIDPFN_MAX_QUERIES, ...): `rows_within` reads it from the request's Settings, which
  RequestSettingsMiddleware (service.http.middleware) makes current for each request, and counts the rows before
  any is validated, refusing with the engine's own 413 (`TooLarge`, naming the field and the setting). Outside a
  request (a schema validated by itself) no configured limit applies: the engine's checks (service.engine.checks)
  still do.
- a fixed bound from what any network or study can use (load buses, steps, DER additions): a 422 naming the
  field and the bound (pydantic's max_length: at most that many items are validated).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic import BeforeValidator

from gridsim.feeders import MAX_BUSES
from service.engine.errors import TooLarge
from service.settings import Settings

# Fixed bounds. A feeder has at most MAX_BUSES buses: MAX_LOAD_BUSES load buses (one bus-load factor, candidate
# or per-bus time series value each) and twice as many load features (a row of P then Q per load bus).
MAX_LOAD_BUSES = MAX_BUSES - 1
MAX_FEATURES = 2 * MAX_LOAD_BUSES
# A time series' steps (its timestamps, and its load, pv and profile factors one per step): a year of 15-minute
# steps is 35,040.
MAX_STEPS = 100_000
# A quantile level lies within [MIN_LEVEL, 1 - MIN_LEVEL]: physics-fit's Student-t (15 degrees of freedom at
# its smallest context, 16 rows) puts 1e-9 at 12.7 scales from its mean, finite, where 5e-324 (a level > 0) gave
# infinity and a 500; the Gaussian answers and the bar distributions' tails are finite at these levels too, and
# 1 - 1e-9 is still resolved in float64 (to 1e-7 of its tail).
MIN_LEVEL = 1e-9
# DER additions in a study's scenarios, all together (counted before any is validated): each costs 1-3 us of
# validation on the event loop, 10-30 ms for these. A scenario took up to 10,000 of them, as one still may; 1,000
# scenarios of them were 10 million (950,000 in 23 MB held the loop 5.3 s).
MAX_DER_ADDITIONS = 10_000

# The Settings of the request being served (RequestSettingsMiddleware sets it around each request; a ContextVar's
# set and reset, 0.1 us, where a context manager took 1 us of every request)
REQUEST_SETTINGS: ContextVar[Settings | None] = ContextVar("gridpfn_request_settings", default=None)


@dataclass(frozen=True)
class RowLimit:
    """A configured limit on a list's rows: the smallest of `settings` (Settings fields), worded as the
    engine's later check words it (`what`: "rows", "context rows"; `more`: where more can go)."""

    settings: tuple[str, ...]
    what: str = "rows"
    more: str = ""

    def refusal(self, field: str, given: int, settings: Settings) -> TooLarge | None:
        limit, name = min((getattr(settings, key), key) for key in self.settings)
        if given <= limit:
            return None
        return TooLarge(
            field, f"{given} {self.what} is over the limit", f"at most {limit} rows (GRIDPFN_{name.upper()}){self.more}"
        )


QUERIES = RowLimit(("max_queries",))
GP_QUERIES = RowLimit(("max_queries", "gp_max_queries"), more="; more: POST /v1/batch-jobs")
CONTEXT_ROWS = RowLimit(("max_context_rows",), "context rows")
SIMULATE_ROWS = RowLimit(("max_simulate",), "load vectors", "; more: POST /v1/batch-jobs")


def rows_within(limit: RowLimit, field: str) -> BeforeValidator:
    """A list's length against a configured limit before any of its rows is validated (a 413 naming `field`, the
    request field as the engine names it). Raised as the engine's TooLarge, which pydantic passes on as it is:
    validation stops there, and the answer is the one the engine's own check gives."""

    def check(value: Any) -> Any:
        settings = REQUEST_SETTINGS.get()
        if settings is not None and isinstance(value, list):
            refused = limit.refusal(field, len(value), settings)
            if refused is not None:
                raise refused
        return value

    return BeforeValidator(check)


# A simulate spec's seed (context sets and batch jobs): what a signed 64-bit integer holds. A seed of 310-4300
# digits (past orjson's reading, so read by Python's parser) reached the context's stored metadata, which orjson
# cannot write: a 500.
MAX_SEED = 2**63 - 1

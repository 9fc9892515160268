"""Request and response bodies of the /v1 API (the examples shown at /docs: service.http.examples).

Numbers must be finite and in physical range (a context may give null for a value not measured, see
service.engine.sparse; queries may not); rows must be as long as their network's load and
voltage vectors (gridsim's description: 64 loads, 32 voltages on IEEE 33), which the engine checks
once it knows the network (a context set names its own): anything else is a 422 naming the field
and the expected shape or range, and for a width both widths.

One policy for every JSON request body: fields the schema does not declare are refused (422 naming
the field; `additionalProperties: false` in the OpenAPI schema), and values are not coerced from
other JSON types (a seed of "1" or true is a 422, as the schema's `integer` says).
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from models.limits import READING_MAX_PU, READING_MIN_PU, READING_TOLERANCE_PU
from models.off_context import EXTRAPOLATION_THRESHOLD
from service.constants import SHA256_HEX, SHA256_ID
from service.engine import load_table
from service.engine.answers import VoltageBand
from service.engine.gridsim_calls import BUILT_IN_NETWORKS, DEFAULT_NETWORK
from service.http.limits import (
    CONTEXT_ROWS,
    GP_QUERIES,
    MAX_FEATURES,
    MAX_LOAD_BUSES,
    MAX_SEED,
    MIN_LEVEL,
    QUERIES,
    SIMULATE_ROWS,
    rows_within,
)


class Strict(BaseModel):
    """Base of every request body: undeclared fields are a 422 (`additionalProperties: false`)."""

    model_config = ConfigDict(extra="forbid")


NETWORK_PATTERN = "^(" + "|".join(BUILT_IN_NETWORKS) + "|" + SHA256_HEX + ")$"
NetworkName = Annotated[
    str,
    Field(
        pattern=NETWORK_PATTERN,
        description="a built-in network ("
        + ", ".join(BUILT_IN_NETWORKS)
        + ") or the id of an uploaded one (POST /v1/networks)",
    ),
]
StrictInt = Annotated[int, Field(strict=True)]
StrictBool = Annotated[bool, Field(strict=True)]
VERSION_PATTERN = r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$"
# Pinning a release: operators compare or hold back a version while the newest serves everyone else.
ModelVersion = Annotated[
    str,
    Field(
        pattern=VERSION_PATTERN,
        description=(
            "a version of the model for the context's network, from `available` in GET /v1/models (default: the "
            "served, newest one); an older one is loaded on first use"
        ),
    ),
]

# Physical ranges, generous: IEEE 33-bus loads are < 1 MW per bus, voltages ~0.9-1.05 p.u. Outside
# them the models' arithmetic is not meaningful (1e30 MW overflows the PFN), so they are a 422.
LOAD_LIMIT = load_table.LOAD_LIMIT  # one bound for JSON bodies, Arrow bodies and batch files
Load = Annotated[
    float, Field(allow_inf_nan=False, strict=True, ge=-LOAD_LIMIT, le=LOAD_LIMIT, description="MW or Mvar")
]
Voltage = Annotated[
    float,
    Field(
        allow_inf_nan=False,
        strict=True,
        ge=READING_MIN_PU,
        le=READING_MAX_PU,
        description="|V| in p.u.: a reading outside this range is no operating point (kV or V, a placeholder); "
        f"the server also holds each within {READING_TOLERANCE_PU:g} p.u. of the network model's power flow at its row's "
        "loads",
    ),
]


def refused(message: str, expected: str) -> PydanticCustomError:
    """A validator's refusal that says what would do: a plain ValueError's problem entry had `expected` null."""
    # `expected` first: the template is filled key by key, so a message holding "{expected}" stays as it is
    return PydanticCustomError("value_error", "{message}", {"expected": expected, "message": message})


def _within(low: int, high: int, what: str):
    """Row-length check whose error carries the expected shape (a plain max_length would not), before any
    cell is validated (a row of a million values is refused unread); the network's exact width is the engine's
    check (service.engine.checks), once the network is known."""

    def check(row: Any) -> Any:
        if isinstance(row, list) and not low <= len(row) <= high:
            raise PydanticCustomError(
                "row_length",
                "has {got} values",
                {"got": len(row), "expected": f"{low} to {high} {what}, as many as the network has"},
            )
        return row

    return BeforeValidator(check)


def entries_within(limit: int) -> BeforeValidator:
    """An object's entries counted before any is validated: one error for an object over `limit` entries (2 million
    bad `bus_load_scale` keys held the event loop 3.6 s). pydantic's fail_fast takes no dict before 2.14, and the
    lowest pydantic declared is 2.8; within the limit an object's errors are at most `limit`."""

    def check(value: Any) -> Any:
        if isinstance(value, dict) and len(value) > limit:
            raise refused(f"{len(value)} entries, over the limit", f"at most {limit} entries")
        return value

    return BeforeValidator(check)


# a feeder has at most MAX_BUSES buses: at most MAX_FEATURES loads and MAX_LOAD_BUSES voltages. A row stops at
# its first bad cell (fail_fast): a 4.5 MB body of out-of-range loads made 640,000 error objects and held the event
# loop 5.7 s (the answer lists at most problems.MAX_LISTED_ERRORS of them anyway). A matrix's rows are counted
# against their configured limit before any is validated (service.http.limits): its errors, one per bad row, are
# at most as many as the rows the service takes.
FAIL_FAST = Field(fail_fast=True)
LoadRow = Annotated[
    list[Load],
    FAIL_FAST,
    _within(1, MAX_FEATURES, "loads (P then Q of each load bus)"),
    Field(json_schema_extra={"minItems": 1, "maxItems": MAX_FEATURES}),
]
VoltageRow = Annotated[
    list[Voltage],
    FAIL_FAST,
    _within(1, MAX_LOAD_BUSES, "voltages (|V| of each non-slack bus)"),
    Field(json_schema_extra={"minItems": 1, "maxItems": MAX_LOAD_BUSES}),
]
Queries = Annotated[list[LoadRow], Field(min_length=1), rows_within(QUERIES, "queries")]
GPQueries = Annotated[list[LoadRow], Field(min_length=1), rows_within(GP_QUERIES, "queries")]
SimulatedLoads = Annotated[list[LoadRow], Field(min_length=1), rows_within(SIMULATE_ROWS, "loads")]
# A context's rows may miss values (null: a load not metered, a voltage not read in that row or never;
# service.engine.sparse): only a model that accepts them (network-fit) is given such a context.
SparseLoadRow = Annotated[
    list[Load | None],
    FAIL_FAST,
    _within(1, MAX_FEATURES, "loads (P then Q of each load bus; null: not metered)"),
    Field(json_schema_extra={"minItems": 1, "maxItems": MAX_FEATURES}),
]
SparseVoltageRow = Annotated[
    list[Voltage | None],
    FAIL_FAST,
    _within(1, MAX_LOAD_BUSES, "voltages (|V| of each non-slack bus; null: not read)"),
    Field(json_schema_extra={"minItems": 1, "maxItems": MAX_LOAD_BUSES}),
]
CONTEXT_X = "(n, loads) in the network's feature order; null where a load was not metered"
CONTEXT_Y = (
    "(n, voltages) p.u.; null where a bus was not read (every row reads at least one); "
    'a context with nulls is for model "network-fit"'
)
# An inline context's rows (named context.x / context.y, as service.engine.checks names them), and an uploaded
# context set's (body.x / body.y)
ContextX = Annotated[
    list[SparseLoadRow], Field(min_length=1, description=CONTEXT_X), rows_within(CONTEXT_ROWS, "context.x")
]
ContextY = Annotated[
    list[SparseVoltageRow], Field(min_length=1, description=CONTEXT_Y), rows_within(CONTEXT_ROWS, "context.y")
]
UploadedX = Annotated[
    list[SparseLoadRow], Field(min_length=1, description=CONTEXT_X), rows_within(CONTEXT_ROWS, "body.x")
]
UploadedY = Annotated[
    list[SparseVoltageRow], Field(min_length=1, description=CONTEXT_Y), rows_within(CONTEXT_ROWS, "body.y")
]
TypicalLoads = Annotated[
    list[Load],
    FAIL_FAST,
    _within(1, MAX_FEATURES, "loads (a typical value per load feature, in x's order)"),
    Field(
        json_schema_extra={"minItems": 1, "maxItems": MAX_FEATURES},
        description="pseudo-measurements: a typical value per load feature, used where x is null "
        "(default: each load's rating, its base consumption and generation per customer class, times what the "
        "row's metered loads of that class run at, else the context's; the base loads where it meters none)",
    ),
]
ContextId = Annotated[str, Field(pattern=SHA256_ID, description="sha256 id from POST /v1/context-sets")]
# A quantile level: within [MIN_LEVEL, 1 - MIN_LEVEL], where every model answers finitely (service.http.limits)
Level = Annotated[float, Field(ge=MIN_LEVEL, le=1.0 - MIN_LEVEL, strict=True)]


def _distinct(levels: list[float]) -> list[float]:
    seen = sorted(levels)
    twice = [a for a, b in zip(seen, seen[1:]) if a == b]
    if twice:  # each level is a column (q0.05_*) of answers and results: a repeat would name two the same
        raise refused(f"quantile level {twice[0]:g} is given twice", "each level once")
    return levels


# The quantile levels an answer carries: at most 99, each once.
Levels = Annotated[list[Level], Field(max_length=99), AfterValidator(_distinct)]


def _given(field: str, kind: str) -> dict[str, Any]:
    """JSON Schema: `field` is present and not null."""
    return {"required": [field], "properties": {field: {"type": kind}}}


def _absent(*fields: str) -> dict[str, Any]:
    """JSON Schema: each of `fields` is absent or null."""
    return {"properties": {field: {"type": "null"} for field in fields}}


# exactly one of context / context_id, given and not null (what QueryOptions._check enforces)
ONE_CONTEXT = [
    {"allOf": [_given("context", "object"), _absent("context_id")]},
    {"allOf": [_given("context_id", "string"), _absent("context")]},
]
# either x and y, or simulate (what ContextSetCreate._one_source enforces)
ONE_SOURCE = [
    {"allOf": [_given("x", "array"), _given("y", "array"), _absent("simulate")]},
    {"allOf": [_given("simulate", "object"), _absent("x", "y")]},
]


class ContextData(Strict):
    """An inline context on `network`: x (n, the network's loads in feature order), y (n, its voltages p.u.)."""

    x: ContextX
    y: ContextY
    network: NetworkName = DEFAULT_NETWORK
    typical_loads: TypicalLoads | None = None


class SimulateSpec(Strict):
    """Ask gridsim for n AC power flows with loads scaled uniformly within +-delta of nominal."""

    network: NetworkName = DEFAULT_NETWORK
    delta: Annotated[float, Field(gt=0.0, lt=1.0, strict=True)] = 0.1
    n: Annotated[int, Field(ge=1, strict=True)] = 500
    seed: Annotated[int, Field(ge=0, le=MAX_SEED, strict=True)] = 0


class ContextSetCreate(Strict):
    """Either uploaded arrays (x and y, on `network`) or a simulate spec (on `simulate.network`), not both."""

    model_config = ConfigDict(json_schema_extra={"oneOf": ONE_SOURCE})

    x: UploadedX | None = None
    y: UploadedY | None = None
    network: NetworkName | None = Field(
        None, description="the network of x and y (default ieee33); with simulate, simulate.network names it"
    )
    typical_loads: TypicalLoads | None = None
    simulate: SimulateSpec | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ContextSetCreate:
        uploaded = self.x is not None or self.y is not None
        if uploaded == (self.simulate is not None):
            raise refused("give either x and y, or simulate (exactly one)", "x and y, or simulate")
        if uploaded and (self.x is None or self.y is None):
            raise refused("an uploaded context needs both x and y", "x and y together")
        if self.simulate is not None and self.typical_loads is not None:
            raise refused(
                "typical_loads is for uploaded x and y (a simulated context measures every load)",
                "no typical_loads with simulate",
            )
        if self.simulate is not None and self.network not in (None, self.simulate.network):
            raise refused(
                f"network {self.network} differs from simulate.network {self.simulate.network} "
                "(give the network once, in simulate)",
                "the network once, in simulate",
            )
        return self

    @property
    def network_name(self) -> str:
        return self.simulate.network if self.simulate is not None else (self.network or DEFAULT_NETWORK)


class OneContext(Strict):
    """A request answered from one context: inline (`context`) or stored (`context_id`), exactly one."""

    context: ContextData | None = None
    context_id: ContextId | None = None

    model_config = ConfigDict(json_schema_extra={"oneOf": ONE_CONTEXT})

    @model_validator(mode="after")
    def _one_context(self) -> Self:
        if (self.context is None) == (self.context_id is None):
            raise refused("give either context or context_id (exactly one)", "context or context_id, exactly one")
        return self


class QueryOptions(OneContext):
    """Context, queries and the statistics wanted; shared by the PFN and the GP endpoints."""

    queries: Queries
    quantiles: Levels = []
    voltage_band: VoltageBand | None = Field(None, description="[low, high] p.u., low < 1 <= high; adds p_outside_band")


class PredictRequest(QueryOptions):
    model: str = Field(description="a name from GET /v1/models")
    version: ModelVersion | None = None
    compare_gp: StrictBool = Field(False, description="also fit the exact GP on the same context and time both")


class GPPredictRequest(QueryOptions):
    """Context, queries and statistics for the exact GP alone."""

    queries: GPQueries


class SimulateRequest(Strict):
    network: NetworkName = DEFAULT_NETWORK
    loads: SimulatedLoads = Field(description="(m, features) load vectors in the network's feature order")


class Timing(BaseModel):
    pfn_ms: float | None = Field(None, description="model time spent in this request (encode if done now + predict)")
    pfn_encode_ms: float | None = Field(None, description="time the context encoding took (even if cached)")
    pfn_predict_ms: float | None = Field(None, description="forward pass + statistics (shared if micro-batched)")
    context_cached: bool | None = None
    batch_rows: int | None = Field(None, description="rows in the forward pass that answered this request")
    gp_fit_ms: float | None = Field(None, description="time the GP fit took (even if cached)")
    gp_predict_ms: float | None = None
    gp_fit_cached: bool | None = None
    speedup: float | None = Field(None, description="(gp_fit+gp_predict) / (pfn_encode+pfn_predict)")
    total_ms: float = Field(description="server time from request parsed to response built")


class GPAnswer(BaseModel):
    mean: list[list[float]]
    std: list[list[float]]


class PredictResponse(BaseModel):
    model: str
    version: str | None = Field(
        None,
        description="the model version that answered (the pinned one, else the "
        "served one); absent from the exact GP's answer",
    )
    network: str = Field(description="the context's network, whose outputs these are")
    context_id: str
    outputs: list[str]
    mean: list[list[float]]
    std: list[list[float]]
    quantiles: dict[str, list[list[float]]]
    p_outside_band: list[list[float]] | None
    extrapolation: list[float] = Field(
        description="per query: how far its loads lie outside the context's, measured on the context's loads "
        "alone (the same whichever model answers): the query's leverage under the context's load covariance "
        "relative to the context's farthest row, so 1.0 (the threshold) is as far out as that row and 2 twice "
        "as far; intervals widen beyond it"
    )
    extrapolated: list[bool] = Field(
        description=f"per query: extrapolation > {EXTRAPOLATION_THRESHOLD} (farther out than any context row)"
    )
    timing: Timing
    gp: GPAnswer | None = None
    metered: list[bool] | None = Field(
        None, description="per output bus: whether the context read its voltage in any row (absent for the exact GP)"
    )
    readings: list[int] | None = Field(None, description="per output bus: how many context rows read its voltage")
    determined: list[float] | None = Field(
        None,
        description="per output bus, network-fit only: how well the context determines its correction, "
        "1 - posterior std / prior std (0: the network model alone, 1: pinned by readings)",
    )
    substation_vm_pu: float | None = Field(
        None,
        description="network-fit only: the substation's voltage set point (p.u.) the context's readings show, "
        "where the network model's may differ (the model is solved there)",
    )
    tap_steps: list[float] | None = Field(
        None,
        description="per output bus, network-fit only: the voltage step of a regulator or tap the readings show on "
        "the branch into that bus (0.0125: +1.25 %, raising every bus below it), 0 where none (steps of 0.1 % and "
        "more are fitted)",
    )
    reading_offsets: list[float] | None = Field(
        None,
        description="per output bus, network-fit only: how far (p.u.) the bus's readings sit from what the feeder "
        "and every other meter explain, where that stands out as no chance offset does (a biased meter, or a step "
        "on its branch only that meter sees), 0 elsewhere; such a meter is set aside (the bus answered from the "
        "others and the network model) and its offset kept in the bus's spread",
    )


class ContextSetInfo(BaseModel):
    id: str
    network: str = Field(description="a built-in network's name or an uploaded network's id")
    rows: int
    features: int
    outputs: int
    source: dict[str, Any]
    created_at: float
    expires_in_s: int | None
    missing: str | None = Field(
        None, description='where the context has missing values (null): "x", "y" or "x and y"; null when none'
    )
    metered: list[bool] = Field(description="per output bus: whether the context read its voltage in any row")
    readings: list[int] = Field(description="per output bus: how many context rows read its voltage")
    typical_loads: list[float] | None = None
    x: list[list[float | None]] | None = None
    y: list[list[float | None]] | None = None


class SimulateResponse(BaseModel):
    network: str
    outputs: list[str]
    vm_pu: list[list[float] | None] = Field(description="null for a load vector whose power flow did not converge")
    converged: list[bool]


class Problem(BaseModel):
    """RFC 9457 problem details, the body of every error."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] = []
    error_id: str | None = Field(None, description="a 500's id, also in the server's log line with the traceback")

"""Request and response bodies of the /v1 API, with the examples shown at /docs.

Numbers must be finite and in physical range, rows 64 loads or 32 voltages long (the IEEE 33-bus
convention); anything else is a 422 naming the field and the expected shape or range.
"""
from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from service import examples as ex

Finite = Annotated[float, Field(allow_inf_nan=False)]
# Physical ranges, generous: IEEE 33-bus loads are < 1 MW per bus, voltages ~0.9-1.05 p.u. Outside
# them the models' arithmetic is not meaningful (1e30 MW overflows the PFN), so they are a 422.
LOAD_LIMIT = 1000.0
Load = Annotated[float, Field(allow_inf_nan=False, ge=-LOAD_LIMIT, le=LOAD_LIMIT, description="MW or Mvar")]
Voltage = Annotated[float, Field(allow_inf_nan=False, ge=0.0, le=5.0, description="|V| in p.u.")]


def _exactly(n: int, what: str):
    """Row-length check whose error carries the expected shape (a plain max_length would not)."""

    def check(row: list[float]) -> list[float]:
        if len(row) != n:
            raise PydanticCustomError("row_length", "has {got} values", {"got": len(row), "expected": f"exactly {n} {what}"})
        return row

    return AfterValidator(check)


LoadRow = Annotated[list[Load], _exactly(64, "loads: P then Q at buses 2..33"),
                    Field(json_schema_extra={"minItems": 64, "maxItems": 64})]
VoltageRow = Annotated[list[Voltage], _exactly(32, "voltages: |V| p.u. at buses 2..33"),
                       Field(json_schema_extra={"minItems": 32, "maxItems": 32})]
Matrix = Annotated[list[LoadRow], Field(min_length=1)]
VoltageMatrix = Annotated[list[VoltageRow], Field(min_length=1)]
ContextId = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="sha256 id from POST /v1/context-sets")]
Level = Annotated[float, Field(gt=0.0, lt=1.0)]


class ContextData(BaseModel):
    """An inline context: x (n, 64 loads in card feature order), y (n, 32 voltages p.u.)."""

    x: Matrix
    y: VoltageMatrix


class SimulateSpec(BaseModel):
    """Ask gridsim for n AC power flows with loads scaled uniformly within +-delta of nominal."""

    network: str = "ieee33"
    delta: Annotated[float, Field(gt=0.0, le=1.0)] = 0.1
    n: Annotated[int, Field(ge=1)] = 500
    seed: Annotated[int, Field(ge=0)] = 0

    @field_validator("network")
    @classmethod
    def _served_network(cls, value: str) -> str:
        # gridsim knows more networks (GET /v1/networks); the models serve IEEE 33 only so far (issue 15)
        if value != "ieee33":
            raise ValueError(f"no model serves network {value!r} yet: expected 'ieee33'")
        return value


class ContextSetCreate(BaseModel):
    """Either uploaded arrays (x and y) or a simulate spec, not both."""

    model_config = ConfigDict(json_schema_extra={"examples": [ex.CONTEXT_SIMULATE, ex.CONTEXT_UPLOAD]})

    x: Optional[Matrix] = None
    y: Optional[VoltageMatrix] = None
    simulate: Optional[SimulateSpec] = None

    @model_validator(mode="after")
    def _one_source(self) -> "ContextSetCreate":
        uploaded = self.x is not None or self.y is not None
        if uploaded == (self.simulate is not None):
            raise ValueError("give either x and y, or simulate (exactly one)")
        if uploaded and (self.x is None or self.y is None):
            raise ValueError("an uploaded context needs both x and y")
        return self


class QueryOptions(BaseModel):
    """Context, queries and the statistics wanted; shared by the PFN and the GP endpoints."""

    context: Optional[ContextData] = None
    context_id: Optional[ContextId] = None
    queries: Matrix
    quantiles: Annotated[list[Level], Field(max_length=99)] = []
    voltage_band: Optional[tuple[Finite, Finite]] = Field(None, description="[low, high] p.u.; adds p_outside_band")

    @model_validator(mode="after")
    def _check(self) -> "QueryOptions":
        if (self.context is None) == (self.context_id is None):
            raise ValueError("give either context or context_id (exactly one)")
        if self.voltage_band is not None and not 0.0 < self.voltage_band[0] < self.voltage_band[1]:
            raise ValueError("voltage_band must be [low, high] with 0 < low < high")
        return self


class PredictRequest(QueryOptions):
    model_config = ConfigDict(json_schema_extra={"examples": [ex.PREDICT_BY_ID, ex.PREDICT_INLINE]})

    model: str = Field(description="a name from GET /v1/models")
    compare_gp: bool = Field(False, description="also fit the exact GP on the same context and time both")


class GPPredictRequest(QueryOptions):
    model_config = ConfigDict(json_schema_extra={"examples": [ex.GP_INLINE]})


class SimulateRequest(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [ex.SIMULATE]})

    network: str = "ieee33"
    loads: Matrix = Field(description="(m, 64) load vectors in feature order")


class Timing(BaseModel):
    pfn_ms: Optional[float] = Field(None, description="model time spent in this request (encode if done now + predict)")
    pfn_encode_ms: Optional[float] = Field(None, description="time the context encoding took (even if cached)")
    pfn_predict_ms: Optional[float] = Field(None, description="forward pass + statistics (shared if micro-batched)")
    context_cached: Optional[bool] = None
    batch_rows: Optional[int] = Field(None, description="rows in the forward pass that answered this request")
    gp_fit_ms: Optional[float] = Field(None, description="time the GP fit took (even if cached)")
    gp_predict_ms: Optional[float] = None
    gp_fit_cached: Optional[bool] = None
    speedup: Optional[float] = Field(None, description="(gp_fit+gp_predict) / (pfn_encode+pfn_predict)")
    total_ms: float = Field(description="server time from request parsed to response built")


class GPAnswer(BaseModel):
    mean: list[list[float]]
    std: list[list[float]]


class PredictResponse(BaseModel):
    model: str
    context_id: str
    outputs: list[str]
    mean: list[list[float]]
    std: list[list[float]]
    quantiles: dict[str, list[list[float]]]
    p_outside_band: Optional[list[list[float]]]
    timing: Timing
    gp: Optional[GPAnswer] = None


class ContextSetInfo(BaseModel):
    id: str
    rows: int
    features: int
    outputs: int
    source: dict[str, Any]
    created_at: float
    expires_in_s: Optional[int]
    x: Optional[list[list[float]]] = None
    y: Optional[list[list[float]]] = None


class SimulateResponse(BaseModel):
    network: str
    outputs: list[str]
    vm_pu: list[Optional[list[float]]] = Field(description="null for a load vector whose power flow did not converge")
    converged: list[bool]


class Problem(BaseModel):
    """RFC 9457 problem details, the body of every error."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] = []

"""Python client for planning tools: every endpoint of the service over HTTP, sync and async.

Needs only httpx and pandas (plus pyarrow to read Arrow answers and Parquet results), never torch or the rest of
GridPFN: `pip install "gridpfn[client]"` is enough once the package is installed, and this one file can be copied.

    client = GridPFNClient("http://127.0.0.1:8000", api_key=None)        # or AsyncGridPFNClient, same methods
    cid = client.create_context(simulate={"network": "ieee33", "delta": 0.1, "n": 500, "seed": 0})
    answer = client.predict(loads, model="transformer-dva", context_id=cid, quantiles=[0.05, 0.95])  # DataFrame
    # another feeder: nid = client.upload_network("feeder.json")["id"], then create_context(..., network=nid)
    client.delete_network(nid)                 # the upload, when done with it (context sets on it then 404)
    job = client.submit("loads.parquet", model="transformer-dva", context_id=cid, quantiles=[0.05, 0.95])
    client.wait(job["id"])
    frame = client.fetch(job["id"])            # pandas DataFrame (or fetch(id, "out.parquet") to a file)
    client.fetch(job["id"], layout="long")     # a row per input row and bus: row, bus, bus_name, mean, std, ...
    client.summary(job["id"])                  # per bus: P(outside the band), the worst row, extreme quantiles
    answer[answer["extrapolated"]]             # queries farther out than the context's loads (also in results)
    answer.attrs["metered"]                    # per bus: whether the context read it (NaN in x / y: not measured)
    study = client.study([{"load_scale": 1.4, "der": [{"bus": 18, "kw": 250}]}], context_id=cid)
    study.summary.sort_values("max_p_outside")  # per bus: P(outside 0.95-1.05), worst row, quantiles
    client.hosting_capacity(context_id=cid)    # per bus: the largest PV (kW) with the risk <= 5 % on every row
    client.hosting_capacity(context_id=cid, profiles=year, pv_profile="PV5")  # rows from a profile table

httpx conventions: pass your own `http_client=httpx.Client(...)` (TLS, proxies, event hooks; you close
it) or `transport=` (tests, mounts). Calls that can safely be repeated (reads, deletes, predictions,
simulations, content-addressed context uploads) are retried `retries` times on 503 or 429 (the exact GP busy), waiting what the
server's Retry-After says (at most `max_retry_wait_s`), and on connection errors with exponential
backoff; a connection never made is retried for every call. `wait()` polls with growing intervals.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import os
import random
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pandas as pd

T = TypeVar("T")
TERMINAL = ("done", "failed", "cancelled")
ARROW_STREAM = "application/vnd.apache.arrow.stream"
# The IEEE 33-bus feeder's load feature names (P then Q at buses 2..33), for building DataFrames and
# for arrow_request_body's arrays. The client's own predict and gp_predict name an array's columns as
# the server does instead (the context's network's description: gridsim's names).
LOAD_FEATURES = [f"p_mw_bus{bus}" for bus in range(2, 34)] + [f"q_mvar_bus{bus}" for bus in range(2, 34)]
# errors after which the request may not have reached the server's handler: retried for idempotent calls
_RETRYABLE_ERRORS = (httpx.NetworkError, httpx.RemoteProtocolError)


class GridPFNError(RuntimeError):
    """An error answer from the service, with its RFC 9457 problem body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"HTTP {status}: {problem.get('detail') or problem.get('title') or problem}")
        self.status, self.problem = status, problem


def _check(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        try:
            problem = response.json()
        except ValueError:
            problem = {"detail": response.text[:500]}
        raise GridPFNError(response.status_code, problem)
    return response


def _json(response: httpx.Response) -> Any:
    return response.json()


@dataclass
class Call:
    """One HTTP request of an endpoint, whether it may be repeated, and how its answer is read."""

    method: str
    path: str
    parse: Callable[[httpx.Response], Any] = field(default=_json)
    idempotent: bool = True
    options: dict[str, Any] = field(default_factory=dict)  # json, content, data, files, params, headers
    then: Callable[[Any], Call] | None = None  # given this call's answer, the call that is made next


class _Endpoints:
    """What each endpoint sends and returns, shared by GridPFNClient and AsyncGridPFNClient."""

    _http_class: type = httpx.Client  # the httpx client each kind makes for itself

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        timeout_s: float = 300.0,
        *,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_retry_wait_s: float = 30.0,
    ) -> None:
        if retries < 0 or backoff_s < 0 or max_retry_wait_s < 0:
            raise ValueError("retries, backoff_s and max_retry_wait_s: must not be negative")
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.retries, self.backoff_s, self.max_retry_wait_s = retries, backoff_s, max_retry_wait_s
        self._features: dict[str, list[str]] = {}  # the server's feature names, per network id
        self._owns_http = http_client is None
        self.http: Any = http_client or self._http_class(timeout=timeout_s, transport=transport)

    def _request_args(self, call: Call) -> dict[str, Any]:
        options = dict(call.options)
        options["headers"] = {**self.headers, **options.get("headers", {})}
        return {"method": call.method, "url": self.base_url + call.path, **options}

    async def _send(
        self, call: Call, request: Callable[..., Awaitable[httpx.Response]], sleep: Callable[[float], Awaitable[Any]]
    ) -> httpx.Response:
        """The call's response after retries (see the module docstring), checked: GridPFNError for 4xx/5xx.
        The one retry loop of both clients: each passes its own request and sleep (the sync client's never
        suspend, so it runs this without an event loop: _run_now)."""
        attempt = 0
        while True:
            response, error = None, None
            try:
                response = await request(**self._request_args(call))
            except httpx.TransportError as exc:
                error = exc
            delay = self._retry_delay(call, attempt, response, error)
            if delay is None:
                if error is not None:
                    raise error
                return _check(response)
            await sleep(delay)
            attempt += 1

    def _retry_delay(
        self, call: Call, attempt: int, response: httpx.Response | None, error: Exception | None
    ) -> float | None:
        """Seconds to wait before attempt `attempt + 1`, or None when the outcome is final."""
        if attempt >= self.retries:
            return None
        if error is not None:
            if not (
                isinstance(error, httpx.ConnectError) or (call.idempotent and isinstance(error, _RETRYABLE_ERRORS))
            ):
                return None
        elif response is None or response.status_code not in (429, 503) or not call.idempotent:
            return None
        else:
            after = response.headers.get("retry-after", "")
            if after.strip().isdigit():
                return min(float(after), self.max_retry_wait_s)
        return min(self.backoff_s * 2**attempt * (0.5 + random.random() / 2), self.max_retry_wait_s)

    # --- service ---------------------------------------------------------------------------------
    def health(self) -> Call:
        """GET /healthz: liveness (and which server process answered)."""
        return Call("GET", "/healthz")

    def ready(self) -> Call:
        """GET /readyz: models loaded and warmed, store reachable (a GridPFNError 503 when not)."""
        return Call("GET", "/readyz")

    def models(self) -> Call:
        """GET /v1/models: every loaded model's card, and refused checkpoints with the reason."""
        return Call("GET", "/v1/models")

    def model(self, name: str) -> Call:
        """GET /v1/models/{name}: one model's card."""
        return Call("GET", f"/v1/models/{name}")

    # --- context sets ------------------------------------------------------------------------------
    def create_context(
        self,
        x: Any = None,
        y: Any = None,
        simulate: dict | None = None,
        network: str | None = None,
        typical_loads: Any = None,
    ) -> Call:
        """Store a context set (arrays, or a gridsim simulate spec) on `network` (a built-in name or an
        uploaded network's id; default ieee33, or the simulate spec's); returns its id. Ids are content
        addresses, so a repeated upload stores the same set: retried like a read. x and y (arrays or
        DataFrames) may hold NaN / None where a load or voltage was not measured (sent as null; model
        "network-fit" accepts such a context); `typical_loads` (one per load) stand in for unmetered loads.
        An infinite value (or a NaN typical load) is a ValueError naming its cell (`y[3][4]`), nothing sent."""
        if simulate is not None:
            body: dict[str, Any] = {"simulate": {**simulate, **({"network": network} if network else {})}}
        else:
            body = {"x": _rows(x, "x"), "y": _rows(y, "y"), **({"network": network} if network else {})}
            if typical_loads is not None:
                body["typical_loads"] = _finite(typical_loads, "typical_loads")
        return Call("POST", "/v1/context-sets", lambda r: r.json()["id"], options={"json": body})

    def get_context(self, context_id: str, include_data: bool = False) -> Call:
        """GET /v1/context-sets/{id}: its description (rows, source, ttl), with x and y when include_data."""
        return Call(
            "GET", f"/v1/context-sets/{context_id}", options={"params": {"include_data": str(include_data).lower()}}
        )

    def delete_context(self, context_id: str) -> Call:
        """DELETE /v1/context-sets/{id}; returns None."""
        return Call("DELETE", f"/v1/context-sets/{context_id}", lambda r: None)

    # --- predictions ---------------------------------------------------------------------------------
    def predict(
        self,
        queries: Any,
        model: str,
        context_id: str | None = None,
        context: tuple[Any, Any] | None = None,
        quantiles: Sequence[float] = (),
        voltage_band: Sequence[float] | None = None,
        compare_gp: bool = False,
        network: str | None = None,
    ) -> Call:
        """POST /v1/predict with the queries sent as Arrow and answered as Arrow: a DataFrame with a row per
        query and a column per statistic and bus (`mean_vm_pu_bus2`, `q0.05_...`, ...), then the query's
        `extrapolation` (1.0 = as far out as the context's farthest row) and `extrapolated` (above 1.0: the
        answer extrapolates beyond the context's loads); model, network, timing etc. in `frame.attrs`. The server picks the model's checkpoint for the context's network.
        `network`: an inline context's (default ieee33); a stored context set names its own. `queries`: a
        DataFrame with the network's feature columns, or an (m, features) array in the order of the
        network's `features` (read from the server once per network and client)."""
        fields = _query_fields(context_id, context, quantiles, voltage_band, network)
        fields.update(model=model, compare_gp=compare_gp)
        return self._query_call("/v1/predict", queries, fields, network)

    def gp_predict(
        self,
        queries: Any,
        context_id: str | None = None,
        context: tuple[Any, Any] | None = None,
        quantiles: Sequence[float] = (),
        voltage_band: Sequence[float] | None = None,
        network: str | None = None,
    ) -> Call:
        """POST /v1/gp/predict: the exact GP fitted on the context (cached per context), as a DataFrame like
        predict's (`network` and `queries` as there)."""
        fields = _query_fields(context_id, context, quantiles, voltage_band, network)
        return self._query_call("/v1/gp/predict", queries, fields, network)

    def _query_call(self, path: str, queries: Any, fields: dict[str, Any], network: str | None) -> Call:
        """An Arrow query call; an array's columns named by the `features` of the context's network, asked
        for first when this client has not yet (a stored set's network first, when not given)."""
        if network is None and "context" in fields:
            network = fields["context"]["network"]
        if isinstance(queries, pd.DataFrame) or (network is not None and network in self._features):
            return _arrow_call(path, queries, fields, self._features.get(network) if network else None)

        def named(description: dict[str, Any]) -> Call:
            self._features[description["id"]] = list(description["features"])
            return _arrow_call(path, queries, fields, self._features[description["id"]])

        def described(net: str) -> Call:
            return Call("GET", f"/v1/networks/{net}", then=named)

        if network is not None:
            return described(network)
        return Call("GET", f"/v1/context-sets/{fields['context_id']}", then=lambda info: described(info["network"]))

    # --- networks ----------------------------------------------------------------------------------
    def networks(self) -> Call:
        """GET /v1/networks: the built-in and uploaded feeders (id, sizes, kind)."""
        return Call("GET", "/v1/networks", lambda r: r.json()["networks"])

    def network(self, network_id: str) -> Call:
        """GET /v1/networks/{id}: buses, loads, lines, transformers, feature and output names, layout."""
        return Call("GET", f"/v1/networks/{network_id}")

    def upload_network(self, data: str | os.PathLike | bytes) -> Call:
        """POST /v1/networks: a feeder as pandapower JSON or a MATPOWER case (.m text or .mat), from a
        path or bytes; returns its description with its content id. Content-addressed, so a repeated
        upload stores the same network: retried like a read."""
        if isinstance(data, (bytes, bytearray)):
            name, content = "network", bytes(data)
        else:
            name, content = Path(data).name, Path(data).read_bytes()
        return Call("POST", "/v1/networks", options={"files": {"file": (name, content, "application/octet-stream")}})

    def delete_network(self, network_id: str) -> Call:
        """DELETE /v1/networks/{id}: one of your uploads (a built-in is a 422); returns None. Context sets on
        it then answer 404 naming it; another key's upload of the same file is its own and stays."""
        return Call("DELETE", f"/v1/networks/{network_id}", lambda r: None)

    def simulate(self, loads: Any, network: str = "ieee33") -> Call:
        """POST /v1/simulate: AC power flow of (m, features) load vectors; the answer as the service gives it."""
        return Call("POST", "/v1/simulate", options={"json": {"network": network, "loads": _rows(loads, "loads")}})

    # --- planning studies ----------------------------------------------------------------------------
    def study(
        self,
        scenarios: Sequence[dict[str, Any]],
        context_id: str | None = None,
        context: tuple[Any, Any] | None = None,
        model: str = "network-fit",
        time_series: dict[str, Any] | None = None,
        voltage_band: Sequence[float] | None = None,
        quantiles: Sequence[float] = (),
        detail: str = "long",
        network: str | None = None,
        classes: dict[str, Sequence[int]] | None = None,
        profiles: pd.DataFrame | None = None,
        step_hours: float = 0.25,
        as_job: bool = False,
    ) -> Call:
        """POST /v1/studies: scenarios in a planner's terms (dicts: `name`, `load_scale`, `bus_load_scale`,
        `class_scaling`, `generation_scale`, `der` [{bus, kw, kvar, profile}], `growth_rate`, `years`),
        optionally over a `time_series` ({timestamps, load, pv, profiles, step_hours}) or a `profiles` table (a
        DataFrame: a `time` column, or a datetime index, and factor columns, SimBench-style: `H0-A_pload`,
        `H0-A_qload`, `PV5`, `load`, `pv`, `load_bus<k>`; sent as Parquet, each row `step_hours` long).
        `classes`: customer classes as load-bus lists, in place of the network's own. Returns a `Study`:
        `summary` (a DataFrame indexed by bus: the largest and mean P(outside the band), where it is largest,
        expected hours outside, extreme quantiles) and `long` (a row per scenario row and bus, as pandapower's
        res_bus is a row per bus). `as_job`: the study runs as a batch job across the workers (beyond
        GRIDPFN_MAX_STUDY_ROWS); returns the queued job's status: then `wait`, `summary` and
        `fetch(layout="long")` as for any job (never retried: a second job)."""
        fields = _query_fields(context_id, context, quantiles, voltage_band, network)
        fields.update(model=model, scenarios=list(scenarios), time_series=time_series, detail=detail)
        if classes is not None:
            fields["classes"] = {name: [int(b) for b in buses] for name, buses in classes.items()}
        parse, idempotent = (_json, False) if as_job else (_study, True)
        if as_job:
            fields["as_job"] = True
        if profiles is None:
            return Call("POST", "/v1/studies", parse, idempotent=idempotent, options={"json": fields})
        if time_series is not None:
            raise ValueError("give the time series either as time_series or as a profiles table, not both")
        fields.pop("time_series")
        return _with_table("/v1/studies", parse, idempotent, {**fields, "step_hours": float(step_hours)}, profiles)

    def hosting_capacity(
        self,
        context_id: str | None = None,
        context: tuple[Any, Any] | None = None,
        model: str = "network-fit",
        buses: Sequence[int] | None = None,
        loads: Any = None,
        load_scales: Sequence[float] | None = None,
        pv_profile: Sequence[float] | str | None = None,
        upper_pu: float = 1.05,
        alpha: float = 0.05,
        max_kw: float | None = None,
        curve_points: int = 11,
        network: str | None = None,
        as_job: bool = False,
        profiles: pd.DataFrame | None = None,
        classes: dict[str, Sequence[int]] | None = None,
    ) -> Call:
        """POST /v1/hosting-capacity: per candidate bus the largest PV (kW) with P(a bus above `upper_pu`)
        <= alpha on every row; a DataFrame indexed by bus (capacity, whether max_kw still held, the
        risk-vs-kW curve as lists), the request's facts in `.attrs`. Rows: `loads`, or the base loads x
        `load_scales`, with `pv_profile` the new PV's share per row; or a `profiles` table (a DataFrame as
        `study` takes: a `time` column or a datetime index, factor columns `load`, `pv`, `load_bus<k>` and
        profiles by name, sent as Parquet), a row per step shaping the network's base loads, the new PV
        following its `pv` column times the column `pv_profile` names (a str), `classes` (load-bus lists) in
        place of the network's own. `as_job`: run as a batch job, groups of candidate buses across the workers;
        returns the queued job's status (then `wait` and `fetch`: a row per bus; never retried: a second job)."""
        fields = _query_fields(context_id, context, (), None, network)
        fields.pop("quantiles")
        fields.update(model=model, upper_pu=upper_pu, alpha=alpha, max_kw=max_kw, curve_points=curve_points)
        if buses is not None and len(buses):
            fields["buses"] = [int(b) for b in buses]
        parse, idempotent = (_json, False) if as_job else (_hosting, True)
        if as_job:
            fields["as_job"] = True
        if profiles is None:
            if isinstance(pv_profile, str) or classes is not None:
                raise ValueError("pv_profile as a column name, and classes, go with a profiles table")
            if load_scales is not None and len(load_scales):
                fields["load_scales"] = [float(v) for v in load_scales]
            if pv_profile is not None and len(pv_profile):
                fields["pv_profile"] = [float(v) for v in pv_profile]
            if loads is not None:
                fields["loads"] = _rows(loads, "loads")
            return Call("POST", "/v1/hosting-capacity", parse, idempotent=idempotent, options={"json": fields})
        if loads is not None or load_scales is not None:
            raise ValueError("give the rows either as loads / load_scales or as a profiles table, not both")
        if pv_profile is not None and not isinstance(pv_profile, str):
            raise ValueError("with a profiles table, pv_profile names one of its columns (the new PV's profile)")
        if pv_profile is not None:
            fields["pv_profile"] = pv_profile
        if classes is not None:
            fields["classes"] = {name: [int(b) for b in members] for name, members in classes.items()}
        return _with_table("/v1/hosting-capacity", parse, idempotent, fields, profiles)

    # --- batch jobs ----------------------------------------------------------------------------------
    def submit_simulated(
        self,
        simulate: dict,
        model: str,
        context_id: str,
        quantiles: Sequence[float] = (),
        voltage_band: Sequence[float] | None = None,
        with_ground_truth: bool = False,
    ) -> Call:
        """A job over n load vectors sampled by gridsim on the server (no upload); never retried (a second job)."""
        body = {
            "simulate": simulate,
            "model": model,
            "context_id": context_id,
            "quantiles": list(quantiles),
            "voltage_band": list(voltage_band) if voltage_band else None,
            "with_ground_truth": with_ground_truth,
        }
        return Call("POST", "/v1/batch-jobs", idempotent=False, options={"json": body})

    def status(self, job_id: str) -> Call:
        """GET /v1/batch-jobs/{id}: state, rows_done / rows_total, rows_per_s, errors."""
        return Call("GET", f"/v1/batch-jobs/{job_id}")

    def cancel(self, job_id: str) -> Call:
        """Cancel an active job (returns its status) or delete a finished one (returns None)."""
        return Call("DELETE", f"/v1/batch-jobs/{job_id}", lambda r: r.json() if r.status_code == 202 else None)

    def summary(self, job_id: str, hours_per_row: float | None = None) -> Call:
        """GET /v1/batch-jobs/{id}/summary: a done job's per-bus risk as a DataFrame indexed by bus (as a study's
        `summary`: largest and mean P(outside the band), `worst_row`, extreme quantiles; `hours_outside` with
        `hours_per_row`, the hours each row stands for); the job's facts in `.attrs`."""
        params = {} if hours_per_row is None else {"hours_per_row": float(hours_per_row)}
        return Call("GET", f"/v1/batch-jobs/{job_id}/summary", _by_bus("summary"), options={"params": params})

    @staticmethod
    def _upload_call(handle: Any, name: str, fields: dict[str, str]) -> Call:
        return Call(
            "POST",
            "/v1/batch-jobs",
            idempotent=False,
            options={"data": fields, "files": {"file": (name, handle, "application/octet-stream")}},
        )

    # --- flows of several steps: written once, as coroutines over the primitives below that each client
    # gives its own way; the async client's methods are these, the sync client runs them with _run_now
    async def submit(
        self,
        data: str | os.PathLike | pd.DataFrame,
        model: str,
        context_id: str,
        quantiles: Sequence[float] = (),
        voltage_band: Sequence[float] | None = None,
        with_ground_truth: bool = False,
    ) -> dict[str, Any]:
        """Upload a CSV/Parquet file (or a DataFrame) of load vectors; returns the queued job's status."""
        fields = _fields(model, context_id, quantiles, voltage_band, with_ground_truth)
        with _upload_file(data) as path, contextlib.ExitStack() as open_files:
            body = await self._upload_body(path, open_files)
            status: dict[str, Any] = await self._io_call(self._upload_call(body, path.name, fields))
            return status

    async def wait(
        self,
        job_id: str,
        poll_s: float = 0.5,
        timeout_s: float | None = None,
        on_progress: Callable[[dict], None] | None = None,
        max_poll_s: float = 5.0,
    ) -> dict[str, Any]:
        """Poll until the job is done, failed or cancelled, every `poll_s` growing 1.5x up to `max_poll_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for delay in _poll_delays(poll_s, max_poll_s):
            status: dict[str, Any] = await self._io_call(_Endpoints.status(self, job_id))
            if on_progress is not None:
                on_progress(status)
            if _finished(status, job_id, deadline, timeout_s):
                return status
            await self._io_sleep(delay if deadline is None else max(0.0, min(delay, deadline - time.monotonic())))
        raise AssertionError("unreachable")

    async def fetch(
        self, job_id: str, path: str | os.PathLike | None = None, format: str | None = None, layout: str = "wide"
    ) -> Any:
        """The result: written to `path` (format from its suffix) and the path returned, or a DataFrame.
        layout="long": a row per input row and bus (row, bus, bus_name, mean, std, q<level>..., p_outside, ...),
        as pandapower's res_bus is a row per bus; "wide" (default): a column per statistic and bus."""
        fmt = _result_format(path, format)
        params = {"format": fmt} if layout == "wide" else {"format": fmt, "layout": layout}
        call = Call(
            "GET",
            f"/v1/batch-jobs/{job_id}/result",
            lambda r: _frame(r.content, fmt),
            options={"params": params},
        )
        if path is None:
            return await self._io_call(call)
        tmp = Path(f"{path}.part")
        async with self._stream(call) as (response, reading):
            if response.status_code >= 400:
                await reading.aread()
                _check(response)
            with open(tmp, "wb") as out:
                async for block in reading.aiter_bytes(1 << 20):
                    out.write(block)
        os.replace(tmp, path)
        return Path(path)

    # --- the primitives the flows await (each client's own; the sync client's never suspend)
    async def _io_call(self, call: Call) -> Any:
        """The call's parsed answer (see `call`)."""
        raise NotImplementedError

    async def _io_sleep(self, seconds: float) -> None:
        raise NotImplementedError

    async def _upload_body(self, path: Path, open_files: contextlib.ExitStack) -> Any:
        """What the upload sends for the file at `path` (a handle left open in `open_files`, or its bytes)."""
        raise NotImplementedError

    def _stream(self, call: Call) -> AbstractAsyncContextManager[tuple[httpx.Response, Any]]:
        """The call's streamed response and its reader (`aread`, `aiter_bytes`), unchecked."""
        raise NotImplementedError


def _now(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """`fn` as a coroutine function that never suspends: the sync client's I/O in the shared async loop."""

    async def now(*args: Any, **kwargs: Any) -> T:
        return fn(*args, **kwargs)

    return now


def _run_now(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends, without an event loop (so the sync client works
    inside a running loop's thread too)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("a synchronous client call suspended")


def _sync(endpoint: Callable[..., Call]) -> Callable[..., Any]:
    @functools.wraps(endpoint)
    def method(self: GridPFNClient, *args: Any, **kwargs: Any) -> Any:
        return self.call(endpoint(self, *args, **kwargs))

    method.__annotations__ = {**endpoint.__annotations__, "return": Any}
    return method


def _async(endpoint: Callable[..., Call]) -> Callable[..., Any]:
    @functools.wraps(endpoint)
    async def method(self: AsyncGridPFNClient, *args: Any, **kwargs: Any) -> Any:
        return await self.call(endpoint(self, *args, **kwargs))

    method.__annotations__ = {**endpoint.__annotations__, "return": Any}
    return method


def _sync_flow(flow: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """A flow of _Endpoints as a plain method of the sync client (its primitives never suspend)."""

    @functools.wraps(flow)
    def method(self: GridPFNClient, *args: Any, **kwargs: Any) -> T:
        return _run_now(flow(self, *args, **kwargs))

    return method


class _NowReading:
    """A streamed response of httpx.Client read through httpx.AsyncClient's methods, each returning at once."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    async def aread(self) -> bytes:
        return self.response.read()

    async def aiter_bytes(self, chunk_size: int) -> AsyncIterator[bytes]:
        for block in self.response.iter_bytes(chunk_size):
            yield block


_FLOWS = ("submit", "wait", "fetch")
_ENDPOINTS = (
    "health",
    "ready",
    "models",
    "model",
    "create_context",
    "get_context",
    "delete_context",
    "predict",
    "gp_predict",
    "networks",
    "network",
    "upload_network",
    "delete_network",
    "simulate",
    "study",
    "hosting_capacity",
    "submit_simulated",
    "status",
    "cancel",
    "summary",
)


class GridPFNClient(_Endpoints):
    """Synchronous client; see the module docstring. `http_client`: an httpx.Client of yours (you close it)."""

    _http_class = httpx.Client
    http: httpx.Client

    def close(self) -> None:
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> GridPFNClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def send(self, call: Call) -> httpx.Response:
        """The call's response after retries (see the module docstring), checked: GridPFNError for 4xx/5xx."""
        return _run_now(self._send(call, _now(self.http.request), _now(time.sleep)))

    def call(self, call: Call) -> Any:
        answer = call.parse(self.send(call))
        return answer if call.then is None else self.call(call.then(answer))

    for _name in _ENDPOINTS:
        locals()[_name] = _sync(getattr(_Endpoints, _name))
    for _name in _FLOWS:
        locals()[_name] = _sync_flow(getattr(_Endpoints, _name))
    del _name

    async def _io_call(self, call: Call) -> Any:
        return self.call(call)

    async def _io_sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def _upload_body(self, path: Path, open_files: contextlib.ExitStack) -> Any:
        return open_files.enter_context(open(path, "rb"))  # streamed from the file as it is sent

    @contextlib.asynccontextmanager
    async def _stream(self, call: Call) -> AsyncIterator[tuple[httpx.Response, Any]]:
        with self.http.stream(**self._request_args(call)) as response:
            yield response, _NowReading(response)


class AsyncGridPFNClient(_Endpoints):
    """The same methods as GridPFNClient, as coroutines over httpx.AsyncClient (`http_client`: one of yours)."""

    _http_class = httpx.AsyncClient
    http: httpx.AsyncClient

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncGridPFNClient:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()

    async def send(self, call: Call) -> httpx.Response:
        """As GridPFNClient.send."""
        return await self._send(call, self.http.request, asyncio.sleep)

    async def call(self, call: Call) -> Any:
        answer = call.parse(await self.send(call))
        return answer if call.then is None else await self.call(call.then(answer))

    for _name in _ENDPOINTS:
        locals()[_name] = _async(getattr(_Endpoints, _name))
    del _name

    async def _io_call(self, call: Call) -> Any:
        return await self.call(call)

    async def _io_sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def _upload_body(self, path: Path, open_files: contextlib.ExitStack) -> Any:
        return await asyncio.to_thread(path.read_bytes)  # read off the event loop

    @contextlib.asynccontextmanager
    async def _stream(self, call: Call) -> AsyncIterator[tuple[httpx.Response, Any]]:
        async with self.http.stream(**self._request_args(call)) as response:
            yield response, response


def _poll_delays(first_s: float, max_s: float):
    delay = first_s
    while True:
        yield delay
        delay = min(delay * 1.5, max(max_s, first_s))


def _finished(status: dict, job_id: str, deadline: float | None, timeout_s: float | None) -> bool:
    if status["state"] in TERMINAL:
        return True
    if deadline is not None and time.monotonic() >= deadline:
        raise TimeoutError(f"job {job_id} still {status['state']} after {timeout_s} s")
    return False


class _upload_file:
    """The path of a file to upload: the given one, or a DataFrame written to a temporary Parquet file."""

    def __init__(self, data: str | os.PathLike | pd.DataFrame) -> None:
        self.data, self._tmp = data, None

    def __enter__(self) -> Path:
        if not isinstance(self.data, pd.DataFrame):
            return Path(self.data)
        self._tmp = tempfile.TemporaryDirectory()
        path = Path(self._tmp.name) / "queries.parquet"
        self.data.to_parquet(path, index=False)
        return path

    def __exit__(self, *_: Any) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def _result_format(path: str | os.PathLike | None, format: str | None) -> str:
    return format or ("csv" if path is not None and str(path).endswith(".csv") else "parquet")


def _frame(data: bytes, fmt: str) -> pd.DataFrame:
    """A result as a DataFrame; a Parquet result's metadata (per bus: `metered`, `readings`, `determined`) in .attrs."""
    if fmt == "csv":
        return pd.read_csv(io.BytesIO(data))
    import pyarrow as pa
    import pyarrow.parquet as pq

    # a native buffer, never a Python file object: pyarrow's I/O threads reading one take the GIL, and one still
    # doing so as the interpreter exits aborts the process after the script's work is done (apache/arrow#34314)
    table = pq.read_table(pa.BufferReader(data))
    frame = table.to_pandas()
    about = (table.schema.metadata or {}).get(b"gridpfn")
    if about is not None:
        frame.attrs.update(json.loads(about))
    return frame


@dataclass(frozen=True)
class Study:
    """A study's answer: the per-bus `summary`, the `long` table (None when detail="summary"), the rest."""

    summary: pd.DataFrame
    long: pd.DataFrame | None
    info: dict[str, Any]


def _with_table(
    path: str, parse: Callable[[httpx.Response], Any], idempotent: bool, spec: dict[str, Any], profiles: pd.DataFrame
) -> Call:
    """A multipart POST of a JSON `spec` beside a profile table sent as Parquet (studies, hosting capacity)."""
    table = ("profiles.parquet", _profile_parquet(profiles), "application/vnd.apache.parquet")
    return Call(
        "POST",
        path,
        parse,
        idempotent=idempotent,
        options={"data": {"spec": json.dumps(spec)}, "files": {"file": table}},
    )


def _profile_parquet(profiles: pd.DataFrame) -> bytes:
    """A profile table as Parquet: a datetime index becomes the `time` column, datetimes are sent as ISO text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = profiles
    if not {"time", "timestamp", "timestamps"} & set(map(str, frame.columns)):
        frame = frame.rename_axis("time").reset_index()
    frame = frame.copy()
    for column in frame.columns:
        if pd.api.types.is_datetime64_any_dtype(frame[column]):
            frame[column] = frame[column].dt.strftime("%Y-%m-%dT%H:%M:%S")
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), sink)
    return sink.getvalue()


def _study(response: httpx.Response) -> Study:
    answer = response.json()
    summary = pd.DataFrame(answer.pop("summary")).set_index("bus")
    long = answer.pop("long")
    return Study(summary, None if long is None else pd.DataFrame(long), answer)


def _by_bus(key: str) -> Callable[[httpx.Response], pd.DataFrame]:
    """An answer's per-bus list `key` as a DataFrame indexed by bus, the rest of the answer in .attrs."""

    def parse(response: httpx.Response) -> pd.DataFrame:
        answer = response.json()
        frame = pd.DataFrame(answer.pop(key)).set_index("bus")
        frame.attrs.update(answer)
        return frame

    return parse


_hosting = _by_bus("buses")


def _query_fields(
    context_id: str | None,
    context: tuple[Any, Any] | None,
    quantiles: Sequence[float],
    voltage_band: Sequence[float] | None,
    network: str | None = None,
) -> dict[str, Any]:
    fields: dict[str, Any] = {"quantiles": [float(q) for q in quantiles]}
    if context is not None:
        fields["context"] = {
            "x": _rows(context[0], "context.x"),
            "y": _rows(context[1], "context.y"),
            "network": network or "ieee33",
        }
    else:
        fields["context_id"] = context_id
    if voltage_band is not None:
        fields["voltage_band"] = [float(b) for b in voltage_band]
    return fields


def _arrow_call(path: str, queries: Any, fields: dict[str, Any], features: Sequence[str] | None = None) -> Call:
    """A query route called with an Arrow body and read as Arrow into a DataFrame (metadata in .attrs)."""
    return Call(
        "POST",
        path,
        _arrow_frame,
        options={
            "content": arrow_request_body(queries, fields, features),
            "headers": {"Content-Type": ARROW_STREAM, "Accept": ARROW_STREAM},
        },
    )


def _arrow_frame(response: httpx.Response) -> pd.DataFrame:
    import pyarrow as pa

    table = pa.ipc.open_stream(response.content).read_all()
    frame = table.to_pandas()
    frame.attrs.update(json.loads(table.schema.metadata[b"gridpfn"]))
    return frame


def arrow_request_body(queries: Any, fields: dict[str, Any], features: Sequence[str] | None = None) -> bytes:
    """A predict body as Arrow: a column per load feature, a row per query, the request's other `fields`
    as JSON in the schema metadata `gridpfn` (see service.http.arrow_request). An array's columns are
    named `features` (default LOAD_FEATURES); a DataFrame keeps its own."""
    import numpy as np
    import pyarrow as pa

    if isinstance(queries, pd.DataFrame):
        table = pa.Table.from_pandas(queries, preserve_index=False)
    else:
        names = list(LOAD_FEATURES if features is None else features)
        matrix = np.asarray(queries, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[1] != len(names):
            raise ValueError(f"queries: expected an (m, {len(names)}) array or a DataFrame, got shape {matrix.shape}")
        table = pa.table(dict(zip(names, np.ascontiguousarray(matrix.T))))
    table = table.replace_schema_metadata({b"gridpfn": json.dumps(fields).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _rows(a: Any, field: str) -> list:
    """Rows of numbers as JSON lists: an array's, a DataFrame's or a list's; NaN and None (a value not
    measured) become null, which JSON has and NaN is not. JSON has no infinity either: one is a ValueError
    naming its cell as the server's 422 would (`field[row][column]: is infinite`), before anything is sent."""
    import numpy as np  # pandas' own dependency

    if isinstance(a, pd.DataFrame):
        a = a.to_numpy(dtype=float, na_value=np.nan)
    if isinstance(a, np.ndarray) and a.dtype.kind in "fiu" and not np.isnan(a).any():
        if a.dtype.kind == "f" and np.isinf(a).any():
            _infinite(field, *map(int, np.argwhere(np.isinf(a))[0]))
        return a.tolist()  # the common case: every value given
    rows = a.tolist() if hasattr(a, "tolist") else [list(row) for row in a]
    out = [[None if v is None or v != v else float(v) for v in row] for row in rows]
    for i, row in enumerate(out):
        for j, v in enumerate(row):
            if v is not None and abs(v) == float("inf"):
                _infinite(field, i, j)
    return out


def _infinite(field: str, row: int, column: int) -> None:
    raise ValueError(f"{field}[{row}][{column}]: is infinite (expected a finite number; JSON has no infinity)")


def _finite(values: Any, field: str) -> list[float]:
    """A list of finite floats; a ValueError naming the first that is not (NaN or infinite)."""
    out = [float(v) for v in values]
    for i, v in enumerate(out):
        if v != v or abs(v) == float("inf"):
            raise ValueError(f"{field}[{i}]: is {v}, not a finite number")
    return out


def _fields(
    model: str, context_id: str, quantiles: Sequence[float], band: Sequence[float] | None, truth: bool
) -> dict[str, str]:
    fields = {"model": model, "context_id": context_id, "with_ground_truth": "true" if truth else "false"}
    if quantiles:
        fields["quantiles"] = ",".join(repr(float(q)) for q in quantiles)
    if band:
        fields["voltage_band"] = ",".join(repr(float(b)) for b in band)
    return fields

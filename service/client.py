"""Python client for planning tools: context sets, predictions (as Arrow) and batch jobs over HTTP.

Needs only httpx and pandas (plus pyarrow to read Arrow answers and Parquet results), never torch or the rest of
GridPFN, so a planning tool can `pip install httpx pandas pyarrow` and copy this one file.

    client = GridPFNClient("http://127.0.0.1:8000", api_key=None)
    cid = client.create_context(simulate={"network": "ieee33", "delta": 0.1, "n": 500, "seed": 0})
    answer = client.predict(loads, model="transformer-dva", context_id=cid, quantiles=[0.05, 0.95])  # DataFrame
    job = client.submit("loads.parquet", model="ieee33-transformer-dva", context_id=cid, quantiles=[0.05, 0.95])
    client.wait(job["id"])
    frame = client.fetch(job["id"])            # pandas DataFrame (or fetch(id, "out.parquet") to a file)
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx
import pandas as pd

TERMINAL = ("done", "failed", "cancelled")
ARROW_STREAM = "application/vnd.apache.arrow.stream"
# The model cards' feature names (IEEE 33-bus: P then Q at buses 2..33), for queries given as arrays.
LOAD_FEATURES = [f"p_mw_bus{bus}" for bus in range(2, 34)] + [f"q_mvar_bus{bus}" for bus in range(2, 34)]


class GridPFNError(RuntimeError):
    """An error answer from the service, with its RFC 9457 problem body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"HTTP {status}: {problem.get('detail') or problem.get('title') or problem}")
        self.status, self.problem = status, problem


class GridPFNClient:
    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 timeout_s: float = 300.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "GridPFNClient":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"detail": response.text[:500]}
            raise GridPFNError(response.status_code, problem)
        return response

    # --- context sets ------------------------------------------------------------------------------
    def create_context(self, x: Any = None, y: Any = None, simulate: dict | None = None) -> str:
        """Store a context set (arrays, or a gridsim simulate spec); returns its id."""
        body = {"simulate": simulate} if simulate is not None else {"x": _rows(x), "y": _rows(y)}
        return self._check(self.http.post("/v1/context-sets", json=body)).json()["id"]

    # --- predictions ---------------------------------------------------------------------------------
    def predict(self, queries: Any, model: str, context_id: str | None = None, context: tuple[Any, Any] | None = None,
                quantiles: Sequence[float] = (), voltage_band: Sequence[float] | None = None,
                compare_gp: bool = False) -> pd.DataFrame:
        """POST /v1/predict with the queries sent as Arrow and answered as Arrow: a DataFrame with a row per
        query and a float32 column per statistic and bus (`mean_vm_pu_bus2`, `q0.05_...`, ...); model,
        timing etc. in `frame.attrs`. `queries`: a DataFrame with the 64 feature columns, or an (m, 64)
        array in LOAD_FEATURES order."""
        import pyarrow as pa

        fields: dict[str, Any] = {"model": model, "quantiles": [float(q) for q in quantiles], "compare_gp": compare_gp}
        if context is not None:
            fields["context"] = {"x": _rows(context[0]), "y": _rows(context[1])}
        else:
            fields["context_id"] = context_id
        if voltage_band is not None:
            fields["voltage_band"] = [float(b) for b in voltage_band]
        response = self._check(self.http.post("/v1/predict", content=arrow_request_body(queries, fields),
                                              headers={"Content-Type": ARROW_STREAM, "Accept": ARROW_STREAM}))
        table = pa.ipc.open_stream(response.content).read_all()
        frame = table.to_pandas()
        frame.attrs.update(json.loads(table.schema.metadata[b"gridpfn"]))
        return frame

    # --- batch jobs ----------------------------------------------------------------------------------
    def submit(self, data: str | os.PathLike | pd.DataFrame, model: str, context_id: str,
               quantiles: Sequence[float] = (), voltage_band: Sequence[float] | None = None,
               with_ground_truth: bool = False) -> dict[str, Any]:
        """Upload a CSV/Parquet file (or a DataFrame) of load vectors; returns the queued job's status."""
        fields = _fields(model, context_id, quantiles, voltage_band, with_ground_truth)
        if isinstance(data, pd.DataFrame):
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "queries.parquet"
                data.to_parquet(path, index=False)
                return self._upload(path, fields)
        return self._upload(Path(data), fields)

    def _upload(self, path: Path, fields: dict[str, str]) -> dict[str, Any]:
        with open(path, "rb") as handle:
            files = {"file": (path.name, handle, "application/octet-stream")}
            return self._check(self.http.post("/v1/batch-jobs", data=fields, files=files)).json()

    def submit_simulated(self, simulate: dict, model: str, context_id: str, quantiles: Sequence[float] = (),
                         voltage_band: Sequence[float] | None = None, with_ground_truth: bool = False) -> dict:
        """A job over n load vectors sampled by gridsim on the server (no upload)."""
        body = {"simulate": simulate, "model": model, "context_id": context_id, "quantiles": list(quantiles),
                "voltage_band": list(voltage_band) if voltage_band else None, "with_ground_truth": with_ground_truth}
        return self._check(self.http.post("/v1/batch-jobs", json=body)).json()

    def status(self, job_id: str) -> dict[str, Any]:
        return self._check(self.http.get(f"/v1/batch-jobs/{job_id}")).json()

    def wait(self, job_id: str, poll_s: float = 0.5, timeout_s: float | None = None,
             on_progress: Callable[[dict], None] | None = None) -> dict[str, Any]:
        """Poll until the job is done, failed or cancelled; returns the final status."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            status = self.status(job_id)
            if on_progress is not None:
                on_progress(status)
            if status["state"] in TERMINAL:
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {status['state']} after {timeout_s} s")
            time.sleep(poll_s)

    def fetch(self, job_id: str, path: str | os.PathLike | None = None, format: str | None = None) -> Any:
        """The result: written to `path` (format from its suffix) and the path returned, or a DataFrame."""
        fmt = format or ("csv" if path is not None and str(path).endswith(".csv") else "parquet")
        with self.http.stream("GET", f"/v1/batch-jobs/{job_id}/result", params={"format": fmt}) as response:
            if response.status_code >= 400:
                response.read()
                self._check(response)
            if path is None:
                data = response.read()
                return pd.read_csv(io.BytesIO(data)) if fmt == "csv" else pd.read_parquet(io.BytesIO(data))
            tmp = Path(f"{path}.part")
            with open(tmp, "wb") as out:
                for block in response.iter_bytes(1 << 20):
                    out.write(block)
            os.replace(tmp, path)
            return Path(path)

    def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Cancel an active job (returns its status) or delete a finished one (returns None)."""
        response = self._check(self.http.delete(f"/v1/batch-jobs/{job_id}"))
        return response.json() if response.status_code == 202 else None


def arrow_request_body(queries: Any, fields: dict[str, Any]) -> bytes:
    """A predict body as Arrow: a column per load feature, a row per query, the request's other `fields`
    as JSON in the schema metadata `gridpfn` (see service.arrow_request)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(queries, pd.DataFrame):
        table = pa.Table.from_pandas(queries, preserve_index=False)
    else:
        matrix = np.asarray(queries, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[1] != len(LOAD_FEATURES):
            raise ValueError(f"queries: expected an (m, {len(LOAD_FEATURES)}) array or a DataFrame, got shape {matrix.shape}")
        table = pa.table(dict(zip(LOAD_FEATURES, np.ascontiguousarray(matrix.T))))
    table = table.replace_schema_metadata({b"gridpfn": json.dumps(fields).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _rows(a: Any) -> list:
    return a.tolist() if hasattr(a, "tolist") else [list(map(float, row)) for row in a]


def _fields(model: str, context_id: str, quantiles: Sequence[float], band: Sequence[float] | None,
            truth: bool) -> dict[str, str]:
    fields = {"model": model, "context_id": context_id, "with_ground_truth": "true" if truth else "false"}
    if quantiles:
        fields["quantiles"] = ",".join(repr(float(q)) for q in quantiles)
    if band:
        fields["voltage_band"] = ",".join(repr(float(b)) for b in band)
    return fields

"""A year of 15-minute steps as one planning study through the HTTP API (issue 31's time-series target).

The SimBench grid (default 1-LV-rural1--0-sw, a development grid) is uploaded as pandapower JSON; the
context is the year's first 500 steps (loads and the network model's voltages); the study is the whole
year (35,040 steps) as a time series: per step and load bus, the consumption factor (the SimBench
profiles' consumption over the bus's base consumption) and the generation's output share (sgen profiles
over the bus's base generation; a bus's Q takes its P's factor, so the year is SimBench's in P and close
to it in Q), sent in one JSON request to POST /v1/studies with "detail": "summary";
or (`--as profiles`) as a planner holding SimBench's own tables sends it: the context stored once as a
context set, the study as a multipart request whose file is the year's profile table (SimBench's load and
renewables tables side by side, one column per profile: `H0-A_pload`, ..., `PV5`; Parquet), the network's
loads and sgens scaled by the profile their `profile` names.
Prints the client's wall time (JSON encode, send, server, decode; target <= 10 s on this host), the
server's own time, and per bus the expected hours outside the band against the network model's power
flow on the same rows (the truth the context agrees with).

    .venv/bin/python bench/study_year.py [--grid 1-LV-rural1--0-sw] [--band 0.97 1.03] [--as profiles]
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.http_accuracy import served  # noqa: E402
from gridsim import simbench_data  # noqa: E402
from gridsim.api import VoltageModel  # noqa: E402
from gridsim.scenarios import Scenario, TimeSeries, expand  # noqa: E402
from models.registry import DEFAULT_ROOT  # noqa: E402

log = logging.getLogger("study_year")


def _share(values: np.ndarray, base: np.ndarray) -> np.ndarray:
    """values / base per bus, 0 where the bus has no base (P columns only)."""
    safe = np.where(np.abs(base) > 0, base, 1.0)
    return np.where(np.abs(base) > 0, values / safe, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", default=simbench_data.DEV_GRIDS[0])
    parser.add_argument("--steps", type=int, default=simbench_data.YEAR_STEPS)
    parser.add_argument("--band", nargs=2, type=float, default=[0.95, 1.05])
    parser.add_argument(
        "--as",
        dest="form",
        choices=("factors", "profiles"),
        default="factors",
        help="factors: per-bus factors in one JSON request; profiles: SimBench's profile table as a Parquet file",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    code = args.grid
    net = simbench_data.simbench_network(code)
    n = net.n_load
    x, y, stamps = simbench_data.simbench_year(code, steps=args.steps)
    index = simbench_data.step_indices(args.steps)
    consumption, generation = simbench_data.consumption_and_generation(code, net, index)
    load = _share(consumption[:, :n], net.base_consumption[:n])
    pv = _share(generation[:, :n], net.base_generation[:n]) if len(net.base_gen_p_mw) else np.zeros((len(index), n))
    timestamps = [str(t) for t in np.asarray(stamps).astype("datetime64[m]")]
    series = TimeSeries(tuple(timestamps), load, pv, 0.25)
    if args.form == "profiles":  # SimBench's own profiles: Q follows its own profile, not P's factor
        table = _profile_table(code, index)
        named = {name: table[name].to_numpy(dtype=np.float64) for name in table.columns if name != "time"}
        series = TimeSeries(tuple(table["time"]), np.ones(len(index)), np.ones(len(index)), 0.25, named)
    rows = expand(net, [Scenario("year")], series).rows
    truth = VoltageModel(net)(rows)
    outside = (truth < args.band[0]) | (truth > args.band[1])
    gap = float(np.max(np.abs(rows[:, :n] - x[:, :n])))
    log.info(
        "%s: %d steps, %d load buses; the study's rows differ from SimBench's P by at most %.2e MW",
        code,
        len(rows),
        n,
        gap,
    )
    body = {
        "context": {"x": x[:500].tolist(), "y": y[:500].tolist()},
        "scenarios": [{"name": "year"}],
        "time_series": {"timestamps": timestamps, "load": load.tolist(), "pv": pv.tolist(), "step_hours": 0.25},
        "voltage_band": list(args.band),
        "detail": "summary",
    }
    with (
        served(DEFAULT_ROOT, max_rows=max(10_000, len(rows))) as url,
        httpx.Client(base_url=url, timeout=600.0) as client,
    ):
        made = client.post(
            "/v1/networks", content=simbench_data.simbench_pandapower_json(code), params={"name": code}
        ).raise_for_status()
        body["context"]["network"] = made.json()["id"]
        post = _post_profiles(client, code, body, index) if args.form == "profiles" else _post_factors(client, body)
        runs = []
        for _ in range(3):  # the first pays the context's fit; later ones find it cached
            t0 = time.perf_counter()
            response, size = post()
            if response.status_code != 200:
                raise SystemExit(f"POST /v1/studies answered {response.status_code}: {response.text[:2000]}")
            answer = orjson.loads(response.content)
            runs.append((time.perf_counter() - t0, answer["timing"]["total_ms"] / 1e3, size))
    print(
        f"{code}: a year of {len(rows)} steps, {n} load buses, band {args.band}, context = the first 500 steps, "
        f"sent as {args.form}"
    )
    for i, (wall, server, size) in enumerate(runs):
        print(f"  run {i + 1}: client wall {wall:.2f} s (server {server:.2f} s, request {size / 1e6:.1f} MB)")
    got = np.array([s["hours_outside"] for s in answer["summary"]])
    std = np.array([s["hours_outside_std"] for s in answer["summary"]])
    want = outside.sum(axis=0) * 0.25
    print("  bus | hours outside: study (std) | power flow on the same rows")
    for bus, g, s, w in zip(net.output_buses, got, std, want, strict=True):
        if g > 0 or w > 0:
            print(f"  {bus} | {g:.2f} ({s:.2f}) | {w:.2f}")
    print(
        f"  buses with any hour outside: study {int((got > 0.125).sum())}, power flow {int((want > 0).sum())}; "
        f"largest |study - power flow| {np.max(np.abs(got - want)):.2f} h"
    )


def _profile_table(code: str, index: np.ndarray) -> pd.DataFrame:
    """SimBench's load and renewables profile tables side by side, row for row (their time labels repeat at
    the autumn clock change, so no join on them), at the year's steps `index`."""
    profiles = simbench_data.simbench_net(code).profiles
    return pd.concat([profiles["load"], profiles["renewables"].drop(columns="time")], axis=1).iloc[index]


def _post_factors(client: httpx.Client, body: dict) -> Callable[[], tuple[httpx.Response, int]]:
    """The study as one JSON request (the context inline, per-bus factors per step)."""

    def post() -> tuple[httpx.Response, int]:
        content = orjson.dumps(body)
        return client.post("/v1/studies", content=content, headers={"content-type": "application/json"}), len(content)

    return post


def _post_profiles(
    client: httpx.Client, code: str, body: dict, index: np.ndarray
) -> Callable[[], tuple[httpx.Response, int]]:
    """The context stored once (a context set), then the study as multipart: its spec and SimBench's own
    profile table (load and renewables side by side, row for row) as Parquet, built per request."""
    stored = client.post("/v1/context-sets", json=body["context"]).raise_for_status().json()["id"]
    table = _profile_table(code, index)
    spec = {k: v for k, v in body.items() if k not in ("context", "time_series")}
    spec.update(context_id=stored, step_hours=0.25)

    def post() -> tuple[httpx.Response, int]:
        sink = io.BytesIO()
        pq.write_table(pa.Table.from_pandas(table.astype({"time": str}), preserve_index=False), sink)
        files = {"file": ("year.parquet", sink.getvalue(), "application/vnd.apache.parquet")}
        spec_text = orjson.dumps(spec).decode()
        response = client.post("/v1/studies", data={"spec": spec_text}, files=files)
        return response, len(sink.getvalue()) + len(spec_text)

    return post


if __name__ == "__main__":
    main()

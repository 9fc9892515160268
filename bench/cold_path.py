"""The cold path as a user sees it: a new 500-row context and 4,000 queries in one JSON request.

For each served model on IEEE 33 and the exact GP, the client's wall time of one POST /v1/predict
(or /v1/gp/predict) whose body holds a context no request has sent before (so its fit is not
cached) and the queries, answered as JSON with 95 % quantiles; repeated with fresh contexts, the
median reported, every model and the GP measured side by side in the same run against the same
server. Ratio = the GP's median over the model's. Issue 29's target: the default model >= 20x.

    .venv/bin/python bench/cold_path.py              # -> stdout and bench/results/cold-path.md
    .venv/bin/python bench/cold_path.py --repeats 5 --models network-fit physics-fit
    .venv/bin/python bench/cold_path.py --truth pandapower --out bench/results/cold-path-pandapower.md
    .venv/bin/python bench/cold_path.py --noise 1e-4 --band 0.95 1.05 --out bench/results/cold-path-noisy-band.md

`--noise` adds meter noise (normal, that std in p.u.) to the context's readings, `--band` asks every answer
for its probability of leaving that voltage band (`voltage_band`): an operator's usual request.

    .venv/bin/python bench/cold_path.py --grid 1-MV-rural--0-sw --metered 0.5 --out bench/results/cold-path-partly-metered.md

`--grid` takes the context and queries from a SimBench development grid's year instead (500 and 4,000 random steps
of its 3,000, uploaded as a user would), `--metered` leaves that share of its load buses metered (the others null
in every context row, fresh at random per repeat): only network-fit takes such a context, so it is timed beside the
same request fully metered and the exact GP on that one (the ratio is the GP's over each).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gridsim  # noqa: E402
from bench import report as bench_report  # noqa: E402
from bench.http_accuracy import served  # noqa: E402
from gridsim import simbench_data  # noqa: E402
from gridsim.sampling import sample_loads  # noqa: E402
from models.registry import DEFAULT_ROOT  # noqa: E402

N_CONTEXT, N_QUERIES, DELTA = 500, 4000, 0.1
MODELS = ("network-fit", "physics-fit", "transformer-dva", "transformer-dva-fast")
RESULTS = Path(__file__).resolve().parent / "results" / "cold-path.md"

log = logging.getLogger("bench.cold_path")


def _body(seed: int, truth: str = "batched", noise: float = 0.0, band: tuple[float, float] | None = None) -> dict:
    """A fresh context and queries on IEEE 33, as the JSON body's fields. `truth`: the context's voltages from the
    batched solver (the service's own network model, to the bit: the guard's exact probe is then the model's own fit)
    or from pandapower (as measured: ~1e-9 p.u. from it, so that probe is a second fit); `noise`: the readings'
    meter noise std (p.u.); `band`: the voltage band every answer's probability of leaving is asked for."""
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(seed)
    x = sample_loads(net, N_CONTEXT + N_QUERIES, DELTA, rng)
    y = gridsim.solve(x[:N_CONTEXT], network=net, solver=truth).vm_pu
    y = y + rng.normal(0.0, noise, y.shape) if noise > 0 else y
    body = {
        "context": {"x": x[:N_CONTEXT].tolist(), "y": y.tolist(), "network": "ieee33"},
        "queries": x[N_CONTEXT:].tolist(),
        "quantiles": [0.025, 0.975],
    }
    return body if band is None else {**body, "voltage_band": list(band)}


def _grid_body(seed: int, code: str, network_id: str, metered: float) -> tuple[dict, dict]:
    """A fresh context and queries from a SimBench grid's year (random steps), as two JSON bodies: with a random
    `metered` share of its load buses metered (the others null in every context row), and fully metered."""
    x, y, _ = simbench_data.simbench_year(code, steps=3000)
    ok = np.isfinite(y).all(axis=1)
    x, y = x[ok], y[ok]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))[: N_CONTEXT + N_QUERIES]
    cx, cy, qx = x[order[:N_CONTEXT]], y[order[:N_CONTEXT]], x[order[N_CONTEXT:]]
    never = rng.random(x.shape[1] // 2) >= metered
    sparse = cx.copy()
    sparse[:, np.r_[never, never]] = np.nan
    full = {
        "context": {"x": cx.tolist(), "y": cy.tolist(), "network": network_id},
        "queries": qx.tolist(),
        "quantiles": [0.025, 0.975],
    }
    cells = [[None if np.isnan(v) else v for v in row] for row in sparse.tolist()]
    return {**full, "context": {**full["context"], "x": cells}}, full


def _timed(client: httpx.Client, path: str, body: dict) -> float:
    """Encode, send, receive and decode, as a client with a fast JSON library (orjson, as the server) does."""
    started = time.perf_counter()
    response = client.post(path, content=orjson.dumps(body), headers={"content-type": "application/json"})
    answer = orjson.loads(response.content)
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"{path}: HTTP {response.status_code}: {str(answer)[:300]}")
    if len(answer["mean"]) != len(body["queries"]):
        raise RuntimeError(f"{path}: {len(answer['mean'])} answers for {len(body['queries'])} queries")
    return seconds


def _grid_times(client: httpx.Client, code: str, metered: float, repeats: int, seed: int) -> dict[str, list[float]]:
    """network-fit on a partly metered context of a SimBench grid, on the same fully metered, and the exact GP."""
    network_id = client.post("/v1/networks", content=simbench_data.simbench_pandapower_json(code).encode()).json()["id"]
    label = f"network-fit, {metered:.0%} of load buses metered"
    times: dict[str, list[float]] = {label: [], "network-fit, fully metered": [], "exact GP, fully metered": []}
    for repeat in range(repeats):
        sparse, full = _grid_body(seed + repeat, code, network_id, metered)
        times[label].append(_timed(client, "/v1/predict", {**sparse, "model": "network-fit"}))
        sparse, full = _grid_body(seed + repeats + repeat, code, network_id, metered)
        times["network-fit, fully metered"].append(_timed(client, "/v1/predict", {**full, "model": "network-fit"}))
        times["exact GP, fully metered"].append(_timed(client, "/v1/gp/predict", full))
        log.info("repeat %d: %s", repeat, {k: f"{v[-1]:.3f}" for k, v in times.items()})
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--truth", choices=["batched", "pandapower"], default="batched", help="_body's `truth`")
    parser.add_argument("--noise", type=float, default=0.0, help="the context readings' meter noise std, p.u.")
    parser.add_argument(
        "--band", type=float, nargs=2, metavar=("LOW", "HIGH"), help="voltage_band asked of every answer"
    )
    parser.add_argument("--grid", choices=simbench_data.DEV_GRIDS, help="a SimBench development grid (_grid_body)")
    parser.add_argument("--metered", type=float, default=0.5, help="with --grid: the share of load buses metered")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.grid is not None:
        return _main_grid(args)
    fresh = lambda seed: _body(seed, args.truth, args.noise, args.band)  # noqa: E731
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    times: dict[str, list[float]] = {name: [] for name in [*args.models, "exact GP"]}
    seed = int(time.time())  # contexts no earlier run has sent: the server's fit caches stay cold
    with served(DEFAULT_ROOT, max_rows=N_QUERIES) as url, httpx.Client(base_url=url, timeout=600.0) as client:
        for repeat in range(args.repeats):
            for name in args.models:
                seed += 1
                times[name].append(_timed(client, "/v1/predict", {**fresh(seed), "model": name}))
            seed += 1
            times["exact GP"].append(_timed(client, "/v1/gp/predict", fresh(seed)))
            log.info("repeat %d: %s", repeat, {k: f"{v[-1]:.3f}" for k, v in times.items()})
    noise = f"meter noise {args.noise:g} p.u. on them" if args.noise else "no meter noise"
    band = "no voltage band" if args.band is None else f"voltage band {args.band[0]:g}-{args.band[1]:g} p.u. asked"
    truth = "the service network model to the bit" if args.truth == "batched" else "as measured, 1e-9 p.u. from it"
    lines = [
        "# Cold path: a new 500-row context and 4,000 queries in one JSON request (issue 29)",
        "",
        f"{bench_report.provenance('bench/cold_path.py')}; this repository's `gridpfn serve` on loopback; client wall "
        f"time (JSON both ways, encoded and decoded with orjson), median of {args.repeats} fresh contexts each; the "
        f"context's voltages from the {args.truth} solver ({truth}), {noise}; {band}.",
        "",
    ]
    _write(args.out, lines, times, "exact GP", "model")


def _main_grid(args: argparse.Namespace) -> None:
    """`--grid`: a partly metered context beside the same fully metered (`_grid_times`)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    seed = int(time.time())  # contexts no earlier run has sent: the server's fit caches stay cold
    with served(DEFAULT_ROOT, max_rows=N_QUERIES) as url, httpx.Client(base_url=url, timeout=600.0) as client:
        times = _grid_times(client, args.grid, args.metered, args.repeats, seed)
    lines = [
        f"# Cold path on {args.grid}: a new 500-row context and 4,000 queries in one JSON request, partly metered",
        "",
        f"{bench_report.provenance('bench/cold_path.py')}; this repository's `gridpfn serve` on loopback, the grid "
        f"uploaded as pandapower JSON; client wall time (JSON both ways, orjson), median of {args.repeats} fresh "
        f"contexts each (500 and 4,000 random steps of the grid's year, voltages from the batched solver, no meter "
        f"noise); a random {args.metered:.0%} of the load buses metered (the others null in every context row).",
        "",
    ]
    _write(args.out, lines, times, "exact GP, fully metered", "request")


def _write(out: Path, lines: list[str], times: dict[str, list[float]], gp_name: str, what: str) -> None:
    """The results file: `lines` (title and provenance), then a row per timed request with the GP's median over its."""
    gp = statistics.median(times[gp_name])
    lines += [f"| {what} | median s | all runs s | exact GP / {'model' if what == 'model' else 'this'} |"]
    lines.append("|---|---|---|---|")
    for name, runs in times.items():
        median = statistics.median(runs)
        lines.append(f"| {name} | {median:.3f} | {', '.join(f'{t:.3f}' for t in runs)} | {gp / median:.1f}x |")
    bench_report.write(out, lines)


if __name__ == "__main__":
    main()

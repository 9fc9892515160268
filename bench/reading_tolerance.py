"""How far legitimate voltage readings lie from the network model's power flow: the measurement behind
READING_TOLERANCE_PU (models/limits.py), the largest |reading - network model| a context row may show.

Every row of these contexts is one the service must keep taking; each reading is compared with what the
network model the service is told (`gridsim.api.VoltageModel`, as the check in service/engine/readings.py
solves it) gives at the row's reported loads. Scenarios (bench/accuracy_v3.py's, with more noise):

- SimBench development grids (gridsim.simbench_data.DEV_GRIDS) uploaded as networks (their snapshot is
  what POST /v1/networks builds): every one of `--steps` steps of the year (load and PV profiles);
- IEEE 33 with the model right and, over `--mismatch-seeds` draws, every line's impedance scaled by its own
  factor in 0.7-1.3 for the truth while the service is told plain `ieee33` (and the box's corners: every
  line x0.7, every line x1.3); loads within +-10 % of base, grown by a uniform factor 1.3-1.6 per row (times
  +-10 % per load), and PV export (net P of 8 buses -2.0..-1.0 x base, the rest +-10 %);
- on every one: voltage-reading noise N(0, std^2) at each `--noises` std and relative load-reading noise
  `--load-noise` (the context's loads as reported, not as drawn).

Prints, per network and scenario, the largest and the 99.99th percentile |reading - model| over every
reading, and the threshold's margin over the largest of all.

Then the measurement behind READING_SCATTER_PU (`--no-scatter` skips it): how far a context's readings scatter
around a smooth function of the loads, as the check infers it (service.engine.readings.reading_scatter: the
noise std a Bayesian linear fit of readings - model on the loads leaves, per bus). Per scenario and voltage
noise, the largest over buses and over `--scatter-draws` contexts of each of `--scatter-sizes` rows, each
context drawn from ONE truth network (the per-line scenario: context d from draw d; pooling rows of several
truths would report the networks' differences as noise) with the same load noise; a scenario the table above
lacks: IEEE 33 at 0.3-1.6x base load. SimBench contexts are alternately a stretch of consecutive steps and steps
drawn across the year. Then attacks: the network model's own voltages plus uniform noise of +-`--attacks` p.u.
(within READING_TOLERANCE_PU: the tolerance check keeps them), the smallest and largest inferred noise over the
draws and how many contexts the check refuses; and the threshold's margin over the legitimate largest.

Last, what the check adds to a new 500-row context set (`--no-timing` skips it): POST /v1/context-sets of real
IEEE 33 power flows (new content each time) on an in-process server with the shipped models, alternately with
the check and with it skipped, median of each.

    .venv/bin/python bench/reading_tolerance.py | tee bench/results/reading-tolerance.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import socket
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gridsim  # noqa: E402
from gridsim import simbench_data  # noqa: E402
from gridsim.api import VoltageModel  # noqa: E402
from models.limits import READING_GLITCH_PU, READING_SCATTER_PU, READING_TOLERANCE_PU  # noqa: E402
from service.engine.readings import GLITCH_Z, reading_scatter  # noqa: E402

PV_BUSES = (6, 12, 15, 18, 22, 25, 30, 33)  # IEEE numbers, as bench/accuracy_v3.py
PV_EXPORT = (-2.0, -1.0)
GROWTH = (1.3, 1.6)
MISMATCH = (0.7, 1.3)
DELTA = 0.10
WIDE = (0.3, 1.6)  # the scatter table's extra IEEE 33 load range (base load times a factor per row)
TOLERANCE_SETS = ("+-10 %", "growth 1.3-1.6x", "PV export")  # the first table's IEEE 33 load sets


def _deviation(model: VoltageModel, x: np.ndarray, truth: np.ndarray, noise: float, load_noise: float, seed) -> dict:
    """|reading - model| over every reading: readings = truth + noise, the model solved at the reported loads."""
    rng = np.random.default_rng(seed)
    reported = simbench_data.add_load_noise(x, load_noise, rng)
    readings = simbench_data.add_meter_noise(truth, noise, rng)
    v = model(reported)
    solved = np.isfinite(v).all(axis=1)
    dev = np.abs(readings[solved] - v[solved])
    return {
        "max": float(dev.max()),
        "p9999": float(np.quantile(dev, 0.9999)),
        "rows": int(solved.sum()),
        "unsolved": int((~solved).sum()),
    }


def simbench_rows(args) -> list[tuple[str, str, np.ndarray, np.ndarray, VoltageModel]]:
    out = []
    for code in simbench_data.DEV_GRIDS:
        network = simbench_data.simbench_network(code)
        x, y, _ = simbench_data.simbench_year(code, steps=args.steps)
        ok = np.isfinite(y).all(axis=1)
        out.append((code, f"year, {int(ok.sum())} steps", x[ok], y[ok], VoltageModel(network)))
    return out


def ieee33_rows(pools) -> list[tuple[str, str, np.ndarray, np.ndarray, VoltageModel]]:
    """The first table's IEEE 33 scenarios: each one's rows of every truth network pooled."""
    return [
        (label, kind, np.concatenate([x for x, _ in truths]), np.concatenate([y for _, y in truths]), model)
        for label, kind, truths, model in pools
        if kind in TOLERANCE_SETS
    ]


def ieee33_pools(args) -> list[tuple[str, str, list[tuple[np.ndarray, np.ndarray]], VoltageModel]]:
    """Per truth and load set: (label, kind, [(x, vm_pu) of each truth network's converged rows], model)."""
    network = gridsim.network("ieee33")
    model = VoltageModel(network)
    rng = np.random.default_rng(args.seed)
    n, m = network.n_load, args.rows

    def around(rows: int) -> np.ndarray:
        return network.base_x * (1.0 + DELTA * rng.uniform(-1.0, 1.0, (rows, 2 * n)))

    pv = around(m)
    at = [network.load_buses.index(b) for b in PV_BUSES]
    pv[:, at] = network.base_p_mw[at] * rng.uniform(*PV_EXPORT, (m, len(at)))
    sets = {"+-10 %": around(m), "growth 1.3-1.6x": around(m) * rng.uniform(*GROWTH, (m, 1)), "PV export": pv}
    wide = np.random.default_rng([args.seed, 1])  # its own stream: the first table's draws stay as they were
    sets[f"load {WIDE[0]:g}-{WIDE[1]:g}x"] = (
        network.base_x * (1.0 + DELTA * wide.uniform(-1.0, 1.0, (m, 2 * n))) * wide.uniform(*WIDE, (m, 1))
    )

    def scaled(factor) -> object:
        return dataclasses.replace(network, r_ohm=network.r_ohm * factor, x_ohm=network.x_ohm * factor)

    draws = [
        np.random.default_rng([args.seed, d]).uniform(*MISMATCH, network.n_lines) for d in range(args.mismatch_seeds)
    ]
    truths = {
        "ieee33, model right": [network],
        # the box's corners: every line off by the most, one way or the other
        **{f"ieee33, every line x{corner}": [scaled(corner)] for corner in MISMATCH},
        f"ieee33, each line x0.7-1.3 ({args.mismatch_seeds} draws)": [scaled(scale) for scale in draws],
    }
    out = []
    for label, nets in truths.items():
        for kind, x in sets.items():
            solved = [gridsim.solve(x, network=net, solver="batched") for net in nets]
            out.append((label, kind, [(x[sim.converged], sim.vm_pu[sim.converged]) for sim in solved], model))
    return out


# Legitimate contexts' reading farthest from the scatter fit, in p.u. and in its bus's noise stds: (p.u., z, where).
FARTHEST: dict[str, tuple[float, float, str]] = {}


def _scatter(model: VoltageModel, x: np.ndarray, y: np.ndarray, where: str = "") -> float | None:
    """The largest inferred noise over buses of one context (`x` the reported loads), as the check infers it; a
    legitimate context (`where` named) also records its farthest reading (FARTHEST)."""
    v = model(x)
    solved = np.isfinite(v).all(axis=1)
    found = reading_scatter(x[solved], y[solved], v[solved])
    if found is None:
        return None
    if where:
        z = found.far_z  # in the held-out distance's own std (service.engine.readings.glitch_scores)
        if found.far_pu > FARTHEST.get("pu", (0.0, 0.0, ""))[0]:
            FARTHEST["pu"] = (found.far_pu, z, where)
        if z > FARTHEST.get("z", (0.0, 0.0, ""))[1]:
            FARTHEST["z"] = (found.far_pu, z, where)
    return float(np.nanmax(found.noise))


def _context_rows(rng: np.random.Generator, rows: int, size: int, stretch: bool) -> np.ndarray:
    """`size` rows of `rows`: a stretch of consecutive ones from a random start, or drawn without replacement."""
    if stretch:
        start = int(rng.integers(0, rows - size + 1))
        return np.arange(start, start + size)
    return np.sort(rng.choice(rows, size, replace=False))


def _span(values: list[float | None]) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "-"
    low, high = min(found), max(found)
    return f"{high:.2e}" if low == high else f"{low:.2e}-{high:.2e}"


def scatter(args, simbench, pools) -> None:
    """The second table: legitimate contexts' largest inferred noise, then the attacks', against READING_SCATTER_PU."""
    sizes, draws = args.scatter_sizes, args.scatter_draws
    scenarios = [(code, kind, [(x, y)], model, True) for code, kind, x, y, model in simbench]
    scenarios += [(label, kind, truths, model, False) for label, kind, truths, model in pools]
    print("\n## Scatter around a smooth function of the loads (READING_SCATTER_PU)\n")
    print(
        f"Largest inferred noise std (p.u., max over buses and over {draws} contexts per size; each context from one "
        f"truth network), load-reading noise {args.load_noise:g} (relative).\n"
    )
    print("| network | rows | reading noise (p.u.) | " + " | ".join(f"{n} rows" for n in sizes) + " |")
    print("|---|---|---|" + "---|" * len(sizes))
    largest, where = 0.0, ""
    for i, (label, kind, truths, model, year) in enumerate(scenarios):
        if len(truths) > 1:
            label = f"{label.split(' (')[0]} (context d from draw d of {len(truths)})"
        for j, noise in enumerate(args.noises):
            cells = []
            for size in sizes:
                found = []
                for d in range(draws):
                    x, y = truths[d % len(truths)]
                    rng = np.random.default_rng([args.seed, 7, i, j, size, d])
                    idx = _context_rows(rng, len(x), min(size, len(x)), stretch=year and d % 2 == 0)
                    reported = simbench_data.add_load_noise(x[idx], args.load_noise, rng)
                    readings = simbench_data.add_meter_noise(y[idx], noise, rng)
                    found.append(_scatter(model, reported, readings, f"{label}, {kind}, noise {noise:g}, {size} rows"))
                top = max((f for f in found if f is not None), default=None)
                cells.append("-" if top is None else f"{top:.2e}")
                if top is not None and top > largest:
                    largest, where = top, f"{label}, {kind}, noise {noise:g}, {size} rows"
            print(f"| {label} | {kind} | {noise:g} | " + " | ".join(cells) + " |")
    print(f"\nLargest legitimate inferred noise: {largest:.2e} p.u. ({where}).")
    print(f"READING_SCATTER_PU = {READING_SCATTER_PU:g} p.u.: {READING_SCATTER_PU / largest:.1f}x that.\n")
    far_pu, far_z = FARTHEST["pu"], FARTHEST["z"]
    print(
        f"Farthest single reading from the fit (a glitch is refused over READING_GLITCH_PU = {READING_GLITCH_PU:g} "
        f"p.u. and GLITCH_Z = {GLITCH_Z:g} of its held-out distance's stds, a robust noise std of its bus): {far_pu[0]:.2e} p.u. ({far_pu[1]:.1f} stds; "
        f"{far_pu[2]}), {READING_GLITCH_PU / far_pu[0]:.1f}x under the threshold; most stds {far_z[1]:.1f} "
        f"({far_z[0]:.2e} p.u.; {far_z[2]}).\n"
    )
    targets = [(code, x, model) for code, _, x, _, model in simbench]
    targets += [(f"{label}, {kind}", truths[0][0], model) for label, kind, truths, model in pools[:1]]
    print(
        f"Attacks: the network model's voltages at the loads plus uniform noise (the readings' std is a / sqrt(3)); "
        f"inferred noise, smallest-largest over {draws} contexts per size; refused: contexts over "
        f"READING_SCATTER_PU = {READING_SCATTER_PU:g} of all.\n"
    )
    print("| network | readings | " + " | ".join(f"{n} rows" for n in sizes) + " | refused |")
    print("|---|---|" + "---|" * len(sizes) + "---|")
    for i, (label, x, model) in enumerate(targets):
        for k, a in enumerate(args.attacks):
            cells, refused, total = [], 0, 0
            for size in sizes:
                found = []
                for d in range(draws):
                    rng = np.random.default_rng([args.seed, 11, i, k, size, d])
                    idx = _context_rows(rng, len(x), min(size, len(x)), stretch=False)
                    v = model(x[idx])
                    found.append(_scatter(model, x[idx], v + rng.uniform(-a, a, v.shape)))
                refused += sum(f is not None and f > READING_SCATTER_PU for f in found)
                total += len(found)
                cells.append(_span(found))
            print(f"| {label} | model +- uniform {a:g} | " + " | ".join(cells) + f" | {refused}/{total} |")


def timing(rows: int, repeats: int) -> None:
    """The median server time (Server-Timing) of POST /v1/context-sets with `rows` new rows, with the check and
    with it skipped (service.engine.readings.Readings.checked replaced by a pass-through), alternately."""
    import httpx
    import uvicorn

    from models.registry import DEFAULT_ROOT
    from service.engine import readings
    from service.http.app import create_app
    from service.settings import Settings

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(Settings(model_dir=DEFAULT_ROOT, redis_url=None)), port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    checked = readings.Readings.checked

    async def skipped(self, ctx, net, field):
        return ctx

    sim = gridsim.simulate(rows, 0.1, 0)
    seconds: dict[bool, list[float]] = {True: [], False: []}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
        for i in range(2 * repeats + 4):
            on = i % 2 == 0
            readings.Readings.checked = checked if on else skipped
            body = json.dumps({"x": sim.x.tolist(), "y": (sim.vm_pu + 1e-12 * (i + 1)).tolist()})  # a new id each time
            answer = client.post("/v1/context-sets", content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 201, answer.text
            if i >= 4:  # the first ones build the caches
                seconds[on].append(float(answer.headers["server-timing"].split("dur=")[1]))
    readings.Readings.checked = checked
    server.should_exit = True
    thread.join(timeout=30)
    off, on = float(np.median(seconds[False])), float(np.median(seconds[True]))
    print(
        f"\nPOST /v1/context-sets, {rows} new IEEE 33 rows, median of {repeats} each (Server-Timing): "
        f"{off:.1f} ms with the check skipped, {on:.1f} ms with it: +{on - off:.1f} ms."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="SimBench steps of the year")
    parser.add_argument("--rows", type=int, default=2000, help="IEEE 33 rows per scenario")
    parser.add_argument("--mismatch-seeds", type=int, default=32)
    parser.add_argument("--noises", type=float, nargs="+", default=[0.0, 1e-3, 2e-3])
    parser.add_argument("--load-noise", type=float, default=0.02, help="relative noise on the reported loads")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--no-timing", dest="timing", action="store_false", help="skip the HTTP timing")
    parser.add_argument("--timing-rows", type=int, default=500)
    parser.add_argument("--no-scatter", dest="scatter", action="store_false", help="skip the scatter table")
    parser.add_argument("--scatter-sizes", type=int, nargs="+", default=[16, 64, 500], help="context rows")
    parser.add_argument("--scatter-draws", type=int, default=8, help="contexts per scenario and size")
    parser.add_argument("--attacks", type=float, nargs="+", default=[0.005, 0.02, 0.03, 0.05, 0.19], help="+-a p.u.")
    args = parser.parse_args()
    t0 = time.time()
    print("# Voltage readings against the network model's power flow\n")
    print(
        f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `bench/reading_tolerance.py`; "
        f"{platform.machine()}, {os.cpu_count()} CPU cores. Load-reading noise {args.load_noise:g} (relative) on "
        f"every row; voltage-reading noise std {', '.join(f'{s:g}' for s in args.noises)} p.u.\n"
    )
    print("| network | rows | reading noise (p.u.) | rows solved | max abs(reading - model) | 99.99th pct |")
    print("|---|---|---|---|---|---|")
    largest, where = 0.0, ""
    simbench, pools = simbench_rows(args), ieee33_pools(args)
    scenarios = simbench + ieee33_rows(pools)
    for i, (label, kind, x, y, model) in enumerate(scenarios):
        for j, noise in enumerate(args.noises):
            d = _deviation(model, x, y, noise, args.load_noise, [args.seed, i, j])
            print(
                f"| {label} | {kind} | {noise:g} | {d['rows']}"
                + (f" ({d['unsolved']} unsolved)" if d["unsolved"] else "")
                + f" | {d['max']:.2e} | {d['p9999']:.2e} |"
            )
            if d["max"] > largest:
                largest, where = d["max"], f"{label}, {kind}, noise {noise:g}"
    print(f"\nLargest abs(reading - model) of all: {largest:.4f} p.u. ({where}).")
    print(f"READING_TOLERANCE_PU = {READING_TOLERANCE_PU:g} p.u.: {READING_TOLERANCE_PU / largest:.1f}x that.")
    if args.scatter:
        scatter(args, simbench, pools)
    if args.timing:
        timing(args.timing_rows, 30)
    print(f"\n{time.time() - t0:.0f} s.")


if __name__ == "__main__":
    main()

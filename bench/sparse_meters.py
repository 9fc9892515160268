"""Sparse meters (issue 30): network-fit on contexts that read only some buses and some loads, in process.

Rows (every figure over random meter sets, one per seed; the truth is the batched solver, which agrees
with pandapower to ~1e-9 p.u., on the feeder as it really is; no reading noise):

- `IEEE 33, lines off`: every line's r and x scaled by its own factor in 0.7-1.3 (not told to the method),
  500 context rows and 500 queries with loads +-30 % around base, voltages read at 100/50/25/10 % of buses
  (null elsewhere). Per fraction: MAE over the unread buses / the uncorrected power flow's there; how many
  unread buses are worse than that power flow; the metered buses' MAE / least squares' (per bus, every
  load, fitted on the same rows); the worst bus's 95 % coverage over ALL buses; fit + predict seconds.
- `IEEE 33 nominal`: the model right, loads +-10 % (the nominal protocol): metered buses' MAE / least squares'.
- `oracle` (next to the model, for every `lines off` row with a bus unread): the exact power flow on a feeder
  that has the TRUE factor on every line on the path from the slack to some read bus (what the meters can pin
  in principle) and the model's (1.0) on every other line, at the same queries, meter sets and seeds. It
  knows more than any fit of these readings can (exact factors, not estimates); the prior mean 1.0 is the
  best guess for a line no meter sees, so where the oracle is worse than the uncorrected power flow, no
  estimator can be better than it there but by luck.
- `SimBench <grid>, lines off`: the development grids (gridsim.simbench_data.DEV_GRIDS; a year of profiles,
  3000 steps, cached in ~/.cache/gridpfn), lines 0.7-1.3 off, 500 random steps as context, 1000 of the
  others as queries; same columns.
- `30 % loads unmetered`: IEEE 33 lines off, every voltage read, 30 % of load buses null in every context row
  (their true loads +-30 % around base; the method takes the base as typical); queries give every load.
  MAE / least squares on the metered loads alone (mean, and the worst bus), worst-bus coverage.
- `placement`: IEEE 33 lines off at 25 % and 10 % metered: the top-ranked bus (models.meter_placement) and a
  random other unread bus each get a meter (their true readings) and the fit is redone; a win when the
  top-ranked one leaves the smaller largest spread over the buses still unread.
- `cost`: the cold path in process (fit + predict of 500 queries), median of repeats, sparse over full.
- `--http`: through a spawned `gridpfn serve` (bench/http_accuracy.served): IEEE 33 lines off, one seed per
  metered fraction, the context sent inline as JSON with null where a bus is not read, the answer's 95 %
  quantiles scored as above; the cold path's wall time per request (a context never sent before, 500 queries).

    .venv/bin/python bench/sparse_meters.py                 # -> stdout and bench/results/sparse-meters.md
    .venv/bin/python bench/sparse_meters.py --seeds 2 --no-simbench --trials 10   # a quick look
    .venv/bin/python bench/sparse_meters.py --http       # also the figures through the HTTP API

The file's hand-written reading (from `## Reading this run` on) is kept when the tables are rewritten.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gridsim  # noqa: E402
from gridsim import simbench_data  # noqa: E402
from gridsim.api import VoltageModel  # noqa: E402
from gridsim.network import Network  # noqa: E402
from gridsim.sampling import sample_loads  # noqa: E402
from gridsim.tree import downstream  # noqa: E402
from models.linear import LeastSquares  # noqa: E402
from models.meter_placement import rank_meters  # noqa: E402
from models.network_fit import method_for  # noqa: E402

FRACTIONS = (1.0, 0.5, 0.25, 0.1)
MISMATCH = (0.7, 1.3)
OUT = Path(__file__).resolve().parent / "results" / "sparse-meters.md"
NOTES = "## Reading this run"  # the hand-written part of OUT from this heading on, kept across reruns
log = logging.getLogger("bench.sparse_meters")


def _factors(net: Network, rng: np.random.Generator) -> np.ndarray:
    """(n_lines,) each line's true impedance factor: the feeder as it really is, not told to the method."""
    return rng.uniform(*MISMATCH, net.n_lines)


def _off(net: Network, scale: np.ndarray, known: np.ndarray | None = None) -> Network:
    """The feeder with each line's r and x times its factor; where `known` (n_lines,) is False the line keeps
    the model's impedance (factor 1.0): the truth with None, the oracle with the lines the meters see."""
    scale = scale if known is None else np.where(known, scale, 1.0)
    return dataclasses.replace(net, r_ohm=net.r_ohm * scale, x_ohm=net.x_ohm * scale)


def _seen_lines(net: Network, read: np.ndarray) -> np.ndarray:
    """(n_lines,) True for a line on the path from the slack to some read bus: the lines whose factors the
    readings can determine; any other line changes no read voltage (but through its losses, second order)."""
    below = downstream(net)  # [c, j]: j is c or below c, so the branch into c lies on j's path
    index = {bus: i for i, bus in enumerate(net.output_buses)}
    depth = below.sum(axis=0)  # buses on each bus's path; the slack is at 0
    on_path = below[:, read].any(axis=1)  # (k,) the branch into the bus feeds some read bus

    def child(a: int, b: int) -> int:
        return a if (depth[index[a]] if a in index else 0) > (depth[index[b]] if b in index else 0) else b

    ends = zip(np.asarray(net.from_bus).tolist(), np.asarray(net.to_bus).tolist(), strict=True)
    return np.array([bool(on_path[index[child(int(a), int(b))]]) for a, b in ends], dtype=bool)


def _meters(k: int, fraction: float, rng) -> np.ndarray:
    read = np.zeros(k, dtype=bool)
    read[rng.choice(k, max(1, round(fraction * k)), replace=False)] = True
    return read


def _score(net, x, y, q, truth, read, oracle: np.ndarray | None = None) -> dict:
    """The model's figures on one meter set; with `oracle` (the oracle's voltages at q), the oracle's too."""
    method = method_for(net)
    t0 = time.perf_counter()
    fitted = method.fit(x, np.where(read, y, np.nan))
    answer = method.predict(fitted, q)
    seconds = time.perf_counter() - t0
    lo, hi = answer.interval(0.95)
    error = np.abs(answer.mean - truth).mean(axis=0)
    flow = np.abs(VoltageModel(net)(q) - truth).mean(axis=0)
    ls = LeastSquares()
    ls_error = np.abs(ls.predict(ls.fit(x, y[:, read]), q).mean - truth[:, read]).mean(axis=0)
    unread = ~read
    exact = not unread.any() or flow[unread].mean() == 0.0  # nothing unread, or the model is the feeder
    extra = {}
    if oracle is not None and not exact:
        known = np.abs(oracle - truth).mean(axis=0)
        extra = {
            "oracle_over_flow": float(known[unread].mean() / flow[unread].mean()),
            "oracle_worse": int((known[unread] > flow[unread]).sum()),
            "both_worse": int(((known > flow) & (error > flow))[unread].sum()),
        }
    return extra | {
        "unread_over_flow": float("nan") if exact else float(error[unread].mean() / flow[unread].mean()),
        "unread_mae": float(error[unread].mean()) if unread.any() else float("nan"),
        "worse_than_flow": int((error[unread] > flow[unread]).sum()),
        "unread": int(unread.sum()),
        "metered_over_ls": float(error[read].mean() / ls_error.mean()),
        "coverage_worst": float(((truth >= lo) & (truth <= hi)).mean(axis=0).min()),
        "seconds": seconds,
    }


def _row(name: str, fraction: float, scores: list[dict]) -> str:
    cell = lambda key, fmt: " / ".join(format(s[key], fmt) for s in scores)  # noqa: E731
    worse = " / ".join(f"{s['worse_than_flow']} of {s['unread']}" for s in scores)
    if all(np.isnan(s["unread_over_flow"]) for s in scores):  # no bus unread, or the power flow is exact
        ratio = "-" if fraction == 1 else f"the model is the feeder: unread MAE {cell('unread_mae', '.1e')} p.u."
    else:
        ratio = f"{cell('unread_over_flow', '.3f')} (mean {statistics.mean(s['unread_over_flow'] for s in scores):.3f})"
    return (
        f"| {name} | {fraction:.0%} | {ratio} | {worse} | "
        f"{cell('metered_over_ls', '.3f')} | {cell('coverage_worst', '.2f')} | {cell('seconds', '.2f')} |"
    )


def _oracle_row(name: str, fraction: float, scores: list[dict]) -> str:
    """The model's and the oracle's figures side by side, per seed (one meter set each)."""

    def ratios(key: str) -> str:
        each = " / ".join(f"{s[key]:.3f}" for s in scores)
        return f"{each} (mean {statistics.mean(s[key] for s in scores):.3f})"

    def counts(key: str) -> str:
        return " / ".join(f"{s[key]} of {s['unread']}" for s in scores)

    unseen = " / ".join(f"{s['unseen']} of {s['lines']}" for s in scores)
    return (
        f"| {name} | {fraction:.0%} | {unseen} | {ratios('unread_over_flow')} | {ratios('oracle_over_flow')} | "
        f"{counts('worse_than_flow')} | {counts('oracle_worse')} | {counts('both_worse')} |"
    )


def _with_oracle(net: Network, scale: np.ndarray, read: np.ndarray, q: np.ndarray) -> dict:
    """The oracle's voltages at q for `_score` (module docstring), and how many lines no meter sees."""
    seen = _seen_lines(net, read)
    oracle = VoltageModel(_off(net, scale, seen))(q)
    return {"oracle": oracle, "unseen": int((~seen).sum()), "lines": int(seen.size)}


def ieee33_rows(seeds: int, mismatch: bool) -> tuple[list[str], list[str]]:
    """The rows, and (lines off only) the oracle's rows next to the model's."""
    net, out, oracle_out = gridsim.network("ieee33"), [], []
    delta = 0.3 if mismatch else 0.1
    for fraction in FRACTIONS:
        scores = []
        for seed in range(seeds):
            rng = np.random.default_rng([30, seed])
            scale = _factors(net, rng) if mismatch else None
            truth_of = VoltageModel(_off(net, scale) if scale is not None else net)
            x, q = sample_loads(net, 500, delta, rng), sample_loads(net, 500, delta, rng)
            read = _meters(net.n_outputs, fraction, rng)
            known = _with_oracle(net, scale, read, q) if scale is not None and fraction < 1 else {}
            oracle = known.pop("oracle", None)
            scores.append(_score(net, x, truth_of(x), q, truth_of(q), read, oracle) | known)
        out.append(_row("IEEE 33, lines off" if mismatch else "IEEE 33 nominal", fraction, scores))
        log.info(out[-1])
        if mismatch and fraction < 1:
            oracle_out.append(_oracle_row("IEEE 33, lines off", fraction, scores))
            log.info(oracle_out[-1])
    return out, oracle_out


def simbench_rows(seeds: int, steps: int) -> tuple[list[str], list[str]]:
    """The rows, and the oracle's rows next to the model's."""
    out, oracle_out = [], []
    for code in simbench_data.DEV_GRIDS:
        t0 = time.perf_counter()
        net = simbench_data.simbench_network(code)
        years, _, _ = simbench_data.simbench_year(code, steps=steps)
        log.info("%s: %d buses, year loaded in %.1f s", code, net.n_outputs, time.perf_counter() - t0)
        for fraction in FRACTIONS:
            scores = []
            for seed in range(seeds):
                rng = np.random.default_rng([31, seed])
                scale = _factors(net, rng)
                truth = VoltageModel(_off(net, scale))(years)
                ok = np.flatnonzero(np.isfinite(truth).all(axis=1))
                order = rng.permutation(ok)
                context, queries = order[:500], order[500:1500]
                read = _meters(net.n_outputs, fraction, rng)
                known = _with_oracle(net, scale, read, years[queries]) if fraction < 1 else {}
                oracle = known.pop("oracle", None)
                scores.append(
                    _score(net, years[context], truth[context], years[queries], truth[queries], read, oracle) | known
                )
            out.append(_row(f"SimBench {code}, lines off", fraction, scores))
            log.info(out[-1])
            if fraction < 1:
                oracle_out.append(_oracle_row(f"SimBench {code}, lines off", fraction, scores))
                log.info(oracle_out[-1])
    return out, oracle_out


def unmetered_load_rows(seeds: int) -> list[str]:
    net, cells = gridsim.network("ieee33"), []
    for seed in range(seeds):
        rng = np.random.default_rng([32, seed])
        truth_of = VoltageModel(_off(net, _factors(net, rng)))
        x, q = sample_loads(net, 500, 0.3, rng), sample_loads(net, 500, 0.3, rng)
        y, truth = truth_of(x), truth_of(q)
        unmetered = rng.choice(net.n_load, round(0.3 * net.n_load), replace=False)
        columns = np.concatenate([unmetered, net.n_load + unmetered])
        sparse = x.copy()
        sparse[:, columns] = np.nan
        method = method_for(net)
        answer = method.predict(method.fit(sparse, y), q)
        lo, hi = answer.interval(0.95)
        kept = np.setdiff1d(np.arange(net.n_features), columns)
        ls = LeastSquares()
        ls_error = np.abs(ls.predict(ls.fit(x[:, kept], y), q[:, kept]).mean - truth).mean(axis=0)
        ratio = np.abs(answer.mean - truth).mean(axis=0) / ls_error
        coverage = float(((truth >= lo) & (truth <= hi)).mean(axis=0).min())
        cells.append(f"{ratio.mean():.3f} (worst bus {ratio.max():.2f}, coverage {coverage:.2f})")
    row = "| 30 % loads unmetered, IEEE 33 lines off | " + " / ".join(cells) + " |"
    log.info(row)
    return [row]


def _largest_left(method, x, y, read, q, bus: int) -> float:
    """The largest spread over the buses still unread once a meter at `bus` reads its true voltages."""
    now = read.copy()
    now[bus] = True
    return float(method.predict(method.fit(x, np.where(now, y, np.nan)), q).std[:, ~now].max())


def placement_rows(trials: int) -> list[str]:
    net, out = gridsim.network("ieee33"), []
    for fraction in (0.25, 0.1):
        wins, seconds = 0, []
        for trial in range(trials):
            rng = np.random.default_rng([33, trial, round(fraction * 100)])
            truth_of = VoltageModel(_off(net, _factors(net, rng)))
            x, q = sample_loads(net, 500, 0.3, rng), sample_loads(net, 200, 0.3, rng)
            y = truth_of(x)
            read = _meters(net.n_outputs, fraction, rng)
            method = method_for(net)
            fitted = method.fit(x, np.where(read, y, np.nan))
            t0 = time.perf_counter()
            best = int(rank_meters(method, fitted, x, q, top=1).candidates[0])
            seconds.append(time.perf_counter() - t0)
            other = int(rng.choice(np.setdiff1d(np.flatnonzero(~read), [best])))
            case = (method, x, y, read, q)
            wins += _largest_left(*case, best) < _largest_left(*case, other)
        out.append(
            f"| placement, IEEE 33 lines off, {fraction:.0%} metered | top-ranked beats random in {wins} of "
            f"{trials} ({wins / trials:.0%}) | ranking {statistics.median(seconds):.2f} s (median) |"
        )
        log.info(out[-1])
    return out


def cost_rows(repeats: int) -> list[str]:
    net = gridsim.network("ieee33")
    rng = np.random.default_rng(34)
    truth_of = VoltageModel(_off(net, _factors(net, rng)))
    x, q = sample_loads(net, 500, 0.3, rng), sample_loads(net, 500, 0.3, rng)
    y = truth_of(x)
    method = method_for(net)
    timings: dict[float, list[float]] = {f: [] for f in FRACTIONS}
    reads = {f: _meters(net.n_outputs, f, rng) for f in FRACTIONS}
    for _ in range(repeats):  # interleaved, so a busy moment hits every fraction alike
        for fraction, read in reads.items():
            t0 = time.perf_counter()
            method.predict(method.fit(x, np.where(read, y, np.nan)), q)
            timings[fraction].append(time.perf_counter() - t0)
    full = statistics.median(timings[1.0])
    cells = [f"{f:.0%}: {statistics.median(t):.3f} s ({statistics.median(t) / full:.2f}x)" for f, t in timings.items()]
    row = "| cold path, fit + 500 queries, IEEE 33 | " + " / ".join(cells) + " |"
    log.info(row)
    return [row]


def http_rows(repeats: int) -> list[str]:
    import httpx
    import orjson

    from bench.http_accuracy import served
    from models.registry import DEFAULT_ROOT

    net, out = gridsim.network("ieee33"), []

    def post(client: httpx.Client, x, y, q) -> tuple[dict, float]:
        body = {
            "model": "network-fit",
            "context": {"x": x.tolist(), "y": [[None if np.isnan(v) else v for v in row] for row in y.tolist()]},
            "queries": q.tolist(),
            "quantiles": [0.025, 0.975],
        }
        t0 = time.perf_counter()
        response = client.post("/v1/predict", content=orjson.dumps(body), headers={"content-type": "application/json"})
        answer = orjson.loads(response.content)
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {str(answer)[:300]}")
        return answer, time.perf_counter() - t0

    with served(DEFAULT_ROOT, max_rows=1000) as url, httpx.Client(base_url=url, timeout=600.0) as client:
        for fraction in FRACTIONS:
            rng = np.random.default_rng([35, round(fraction * 100)])
            truth_of = VoltageModel(_off(net, _factors(net, rng)))
            x, q = sample_loads(net, 500, 0.3, rng), sample_loads(net, 500, 0.3, rng)
            y, truth = truth_of(x), truth_of(q)
            read = _meters(net.n_outputs, fraction, rng)
            answer, _ = post(client, x, np.where(read, y, np.nan), q)
            mean = np.asarray(answer["mean"], dtype=np.float64)
            lo, hi = (np.asarray(answer["quantiles"][key], dtype=np.float64) for key in ("0.025", "0.975"))
            error = np.abs(mean - truth).mean(axis=0)
            flow = np.abs(VoltageModel(net)(q) - truth).mean(axis=0)
            unread = ~read
            ratio = f"{error[unread].mean() / flow[unread].mean():.3f}" if unread.any() else "-"
            coverage = float(((truth >= lo) & (truth <= hi)).mean(axis=0).min())
            out.append(
                f"| IEEE 33 lines off, via HTTP | {fraction:.0%} | {ratio} | "
                f"{int((error[unread] > flow[unread]).sum())} of {int(unread.sum())} | {coverage:.2f} |"
            )
            log.info(out[-1])
        times: dict[float, list[float]] = {f: [] for f in FRACTIONS}
        for repeat in range(repeats):  # a context never sent before each time: the server's fit cache is cold
            rng = np.random.default_rng([36, repeat, int(time.time())])
            truth_of = VoltageModel(_off(net, _factors(net, rng)))
            x, q = sample_loads(net, 500, 0.3, rng), sample_loads(net, 500, 0.3, rng)
            y = truth_of(x)
            for fraction in FRACTIONS:
                x = x * (1.0 + 1e-9 * rng.standard_normal(x.shape))  # another context: another id
                times[fraction].append(
                    post(client, x, np.where(_meters(net.n_outputs, fraction, rng), y, np.nan), q)[1]
                )
    full = statistics.median(times[1.0])
    cells = [f"{f:.0%}: {statistics.median(t):.3f} s ({statistics.median(t) / full:.2f}x)" for f, t in times.items()]
    out.append("| cold path via HTTP, 500-row context + 500 queries | " + " / ".join(cells) + " |")
    log.info(out[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=20, help="placement trials per metered fraction")
    parser.add_argument("--repeats", type=int, default=7, help="cold-path timings per fraction")
    parser.add_argument("--steps", type=int, default=3000, help="SimBench steps over the year")
    parser.add_argument("--no-simbench", action="store_true")
    parser.add_argument("--http", action="store_true", help="also through the HTTP API of a spawned server")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    head = (
        "| scenario | metered | unread MAE / power flow, per seed | unread buses worse than the power flow "
        "| metered MAE / least squares | worst-bus coverage (all buses) | fit + predict s |\n|---|---|---|---|---|---|---|"
    )
    accuracy, oracle = ieee33_rows(args.seeds, True)
    accuracy += ieee33_rows(args.seeds, False)[0]
    if not args.no_simbench:
        rows, oracle_rows = simbench_rows(min(args.seeds, 3), args.steps)
        accuracy, oracle = accuracy + rows, oracle + oracle_rows
    loads = unmetered_load_rows(args.seeds)
    placement = placement_rows(args.trials)
    cost = cost_rows(args.repeats)
    http = http_rows(args.repeats) if args.http else []
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/sparse_meters.py", *sys.argv[1:]])
    text = "\n".join(
        [
            "# Sparse meters (issue 30): network-fit in process",
            "",
            f"`{command}` on {platform.node()} ({platform.machine()}, {platform.processor() or 'cpu'}), "
            f"{time.strftime('%Y-%m-%d')}; the method in bench/sparse_meters.py's docstring.",
            "",
            head,
            *accuracy,
            "",
            "| oracle: true factors on the lines the meters see (module docstring) | metered | lines no meter sees "
            "| model: unread MAE / power flow | oracle: unread MAE / power flow | model: unread worse than the power "
            "flow | oracle: unread worse than it | worse for both |\n|---|---|---|---|---|---|---|---|",
            *oracle,
            "",
            "| scenario | MAE / least squares on the metered loads alone, per seed |\n|---|---|",
            *loads,
            "",
            "| scenario | result | cost |\n|---|---|---|",
            *placement,
            "",
            "| scenario | median seconds per metered fraction (over full) |\n|---|---|",
            *cost,
            "",
            *(
                [
                    "| through HTTP | metered | unread MAE / power flow | unread worse than it | worst-bus coverage |",
                    "|---|---|---|---|---|",
                    *http[:-1],
                    "",
                    "| cold path | median seconds per request (over full) |\n|---|---|",
                    http[-1],
                    "",
                ]
                if http
                else []
            ),
        ]
    )
    notes = args.out.read_text().partition(NOTES) if args.out.exists() else ("", "", "")
    args.out.write_text(text + (f"\n{NOTES}{notes[2]}" if notes[1] else ""))
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()

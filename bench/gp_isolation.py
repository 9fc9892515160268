"""Does the exact GP starve the models? One-query predict latency without and during 4 GP fits.

Starts a real `gridpfn serve` (or uses --url), stores one context for predicts and 4 contexts of
--gp-rows rows (1,000: the largest the on-demand GP fits by default), then measures one-query
predicts at a steady --rate twice, side by side in one run:
  1. quiet: nothing else running, for --seconds;
  2. during fits: 4 concurrent /v1/gp/predict requests, one per 1,000-row context (each needs a
     fit), sent at once; predicts are measured while any of them is unanswered.
Prints p50 / p99 of both phases, their ratio, and how the 4 GP requests were answered (200, or 429
with Retry-After when GRIDPFN_GP_WORKERS + GRIDPFN_GP_QUEUE_SIZE are full).

Target (issue 28, finding 6): the one-query predict stays under 100 ms p99 while 4 GP fits run.

    python bench/gp_isolation.py                       # spawns a server with the shipped models
    python bench/gp_isolation.py --tiny                # a tiny test model
    python bench/gp_isolation.py --env GRIDPFN_GP_WORKERS=4 --env GRIDPFN_GP_QUEUE_SIZE=0   # 4 fits at once
    python bench/gp_isolation.py --url http://127.0.0.1:8000 --model transformer-dva [--api-key KEY]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_load import spawn  # noqa: E402  (the same server start-up as the HTTP load benchmark)

log = logging.getLogger("bench.gp_isolation")
GP_REQUESTS = 4


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def stored_context(api: httpx.Client, rows: int, seed: int) -> str:
    response = api.post(
        "/v1/context-sets", json={"simulate": {"network": "ieee33", "delta": 0.1, "n": rows, "seed": seed}}, timeout=300
    )
    response.raise_for_status()
    return response.json()["id"]


def predict_latencies(api: httpx.Client, body: dict, rate: float, keep_going) -> tuple[list[float], int]:
    """One-query predicts every 1/rate s while keep_going(); returns (latencies s, non-200 answers)."""
    latencies, failures, next_at = [], 0, time.perf_counter()
    while keep_going():
        t0 = time.perf_counter()
        response = api.post("/v1/predict", json=body)
        latencies.append(time.perf_counter() - t0)
        failures += response.status_code != 200
        next_at += 1.0 / rate
        time.sleep(max(0.0, next_at - time.perf_counter()))
    return latencies, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="base URL of a running server (default: spawn one)")
    parser.add_argument("--tiny", action="store_true", help="spawned server: a tiny random-init test model")
    parser.add_argument("--model-dir", help="spawned server: registry to serve (default: the shipped models)")
    parser.add_argument("--model", help="model name (default: transformer-dva if served, else the first in /v1/models)")
    parser.add_argument("--api-key", default=os.environ.get("GRIDPFN_BENCH_KEY"))
    parser.add_argument("--gp-rows", type=int, default=1000, help="rows of each GP context")
    parser.add_argument("--rate", type=float, default=50.0, help="one-query predicts per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the quiet phase")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="longest the during-fits phase runs")
    parser.add_argument("--env", action="append", default=[], help="spawned server: extra GRIDPFN_X=value settings")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)

    env = {
        "GRIDPFN_GP_MAX_CONTEXT": str(args.gp_rows),
        "GRIDPFN_MAX_SIMULATE": str(max(args.gp_rows, 1000)),
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    env.update(item.split("=", 1) for item in args.env)
    proc = None
    if args.url:
        url = args.url
    else:
        proc, url = spawn(args.model_dir, args.tiny, env)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=600) as api:
            names = [m["name"] for m in api.get("/v1/models").json()["models"]]
            model = args.model or ("transformer-dva" if "transformer-dva" in names else names[0])
            small = stored_context(api, 500, seed=0)
            gp_contexts = [stored_context(api, args.gp_rows, seed=100 + i) for i in range(GP_REQUESTS)]
            data = api.get(f"/v1/context-sets/{small}", params={"include_data": "true"})
            data.raise_for_status()
            body = {"model": model, "context_id": small, "queries": data.json()["x"][:1]}
            for _ in range(20):  # encode the context and warm the path
                api.post("/v1/predict", json=body).raise_for_status()

            log.info("quiet phase: %.0f s of one-query predicts at %g/s", args.seconds, args.rate)
            quiet_until = time.perf_counter() + args.seconds
            quiet, quiet_failed = predict_latencies(api, body, args.rate, lambda: time.perf_counter() < quiet_until)

            answers: list[tuple[int, str | None, float]] = [None] * GP_REQUESTS  # type: ignore[list-item]

            def gp_request(i: int) -> None:
                with httpx.Client(base_url=url, headers=headers, timeout=600) as gp_api:
                    t0 = time.perf_counter()
                    r = gp_api.post("/v1/gp/predict", json={"context_id": gp_contexts[i], "queries": body["queries"]})
                    answers[i] = (r.status_code, r.headers.get("retry-after"), time.perf_counter() - t0)

            threads = [threading.Thread(target=gp_request, args=(i,)) for i in range(GP_REQUESTS)]
            log.info(
                "during-fits phase: %d GP requests on %d-row contexts, predicts until they are answered",
                GP_REQUESTS,
                args.gp_rows,
            )
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            busy, busy_failed = predict_latencies(
                api,
                body,
                args.rate,
                lambda: any(t.is_alive() for t in threads) and time.perf_counter() - started < args.max_seconds,
            )
            for thread in threads:
                thread.join()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)

    def row(name: str, lat: list[float], failed: int) -> str:
        return (
            f"{name:<28} {len(lat):>6} {statistics.median(lat) * 1e3:>9.1f} {percentile(lat, 0.99) * 1e3:>9.1f} "
            f"{max(lat) * 1e3:>9.1f} {failed:>7}"
        )

    print(f"\none-query predict, model {model}, {args.rate:g}/s ({os.cpu_count()} CPUs)")
    print(f"{'phase':<28} {'n':>6} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'non-200':>7}")
    print(row("quiet", quiet, quiet_failed))
    print(row(f"during {GP_REQUESTS} GP fits", busy, busy_failed))
    print(
        f"ratio during/quiet: p50 {statistics.median(busy) / statistics.median(quiet):.2f}x, "
        f"p99 {percentile(busy, 0.99) / percentile(quiet, 0.99):.2f}x; target p99 < 100 ms: "
        f"{'met' if percentile(busy, 0.99) < 0.100 else 'NOT met'}"
    )
    print(f"\n{GP_REQUESTS} concurrent GP requests ({args.gp_rows}-row contexts), in the order sent:")
    for i, (status, retry_after, seconds) in enumerate(answers):
        extra = f", Retry-After {retry_after} s" if retry_after else ""
        print(f"  GP request {i + 1}: {status}{extra} after {seconds:.1f} s")


if __name__ == "__main__":
    main()

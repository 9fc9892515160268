"""HTTP load benchmark of the GridPFN service: N concurrent clients for T seconds.

Scenario 1: single-query predicts against a stored (and already encoded) context set.
Scenario 2: 4500-query predicts (32 buses, mean + std + 3 quantiles + p_outside_band) on the same
cached context; prints client latency and the server-reported time (timing.total_ms).

    python bench/http_load.py --url http://127.0.0.1:8000 --model NAME [--api-key KEY]
    python bench/http_load.py --spawn --tiny          # starts its own server with a tiny test model
    python bench/http_load.py --spawn --model transformer-dva-fast --processes 2 --redis-url redis://127.0.0.1:6379/5
    python bench/http_load.py --spawn --model transformer-dva --processes 2 --redis-url redis://127.0.0.1:6379/5 --soak

`--soak`: only single-query predicts, 64 clients for 60 s; prints the requests over 1 s (target 0), p50, p99
(target p99 <= 5x p50) and the slowest answer.

Load generators (`--client`): `wrk` (default when installed: `apt-get install wrk`) is a C program
that keeps 32 connections busy for a few percent of one core, so nearly all of the 2 cores go to
the server; `raw` is asyncio HTTP/1.1 in this process and takes about a core itself. Both are
closed loops: each client sends its next request when the last answer arrived.
The same clients also load GET /healthz, which does no work, and that floor is printed beside
the predict figures: it is what the HTTP stack alone gives on this machine.

Targets (2-core CPU): single-query p50 <= 5 ms, p99 <= 25 ms at 32 clients, zero errors;
4500-query predict <= 100 ms server time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn(model_dir: str | None, tiny: bool, env_extra: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """Start `gridpfn serve` on a free loopback port and wait until /readyz answers 200."""
    if tiny:
        from models.testing import build_tiny_registry

        model_dir = str(build_tiny_registry(tempfile.mkdtemp(prefix="gridpfn-bench-")))
    port = _free_port()
    env = dict(os.environ, **env_extra)
    command = [sys.executable, "-m", "service.commands.cli", "--log-level", "WARNING", "serve", "--port", str(port)]
    if model_dir:
        command += ["--model-dir", model_dir]
    proc = subprocess.Popen(command, env=env, cwd=Path(__file__).resolve().parents[1])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not become ready in 180 s")


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) used so far by process `pid` and its descendants (Linux /proc).

    Per request this is the server's own cost, which a busy or drifting host changes far less than req/s."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, p in parents.items() if p == parent and child not in tree]
        tree.update(children)
        frontier += children
    return sum(times.get(p, 0.0) for p in tree)


def server_timing_ms(headers) -> float:
    """The `app;dur=` of a Server-Timing header (ms), NaN when absent."""
    for part in headers.get("server-timing", "").split(","):
        name, _, params = part.strip().partition(";")
        if name == "app" and params.startswith("dur="):
            return float(params[4:])
    return float("nan")


def percentiles(latencies: list[float]) -> tuple[float, float, float]:
    if not latencies:
        return float("nan"), float("nan"), float("nan")
    p50, p95, p99 = np.percentile(np.asarray(latencies) * 1e3, [50, 95, 99])
    return float(p50), float(p95), float(p99)


class RawClient:
    """Minimal HTTP/1.1 keep-alive client on asyncio streams, one connection.

    httpx's AsyncClient costs about 4 ms of CPU per request on this machine and its shared pool
    slows down with 32 connections (/healthz: 94 req/s through it vs 2480 req/s raw), so it would
    measure the client, not the server; `--client httpx` still runs the load through httpx.
    """

    def __init__(self, url: str, headers: dict, path: str = "/v1/predict") -> None:
        parsed = httpx.URL(url)
        self.host, self.port, self.path = parsed.host, parsed.port or 80, path
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.head = f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/json\r\n{extra}"
        self.get_head = f"GET {path} HTTP/1.1\r\nhost: {self.host}\r\n{extra}\r\n".encode()
        self.reader = self.writer = None

    async def post(self, body: bytes | None) -> tuple[int, bytes]:
        """POST body, or GET when body is None."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=2**26)
        self.writer.write(
            self.get_head if body is None else f"{self.head}content-length: {len(body)}\r\n\r\n".encode() + body
        )
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
        return status, await self.reader.readexactly(length)

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _next_body(bodies: list[bytes], i: int) -> bytes | None:
    return bodies[i % len(bodies)] if bodies else None


def _server_ms(content: bytes, path: str) -> list[float]:
    return [orjson.loads(content)["timing"]["total_ms"]] if path.endswith("predict") else []


async def load_raw(
    url: str, headers: dict, bodies: list[bytes], clients: int, seconds: float, path: str = "/v1/predict"
) -> dict:
    """Like `load`, through RawClient connections."""
    latencies: list[float] = []
    server_ms: list[float] = []
    errors: dict[str, int] = {}
    stop_at = time.perf_counter() + seconds

    async def one_client(offset: int) -> None:
        client, i = RawClient(url, headers, path), offset
        try:
            while time.perf_counter() < stop_at:
                body = _next_body(bodies, i)
                i += clients
                t0 = time.perf_counter()
                try:
                    status, content = await client.post(body)
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                    await client.aclose()
                    client = RawClient(url, headers, path)
                    continue
                elapsed = time.perf_counter() - t0
                if status != 200:
                    errors[str(status)] = errors.get(str(status), 0) + 1
                    continue
                latencies.append(elapsed)
                server_ms.extend(_server_ms(content, path))
        finally:
            await client.aclose()

    started = time.perf_counter()
    await asyncio.gather(*(one_client(k) for k in range(clients)))
    return {"latencies": latencies, "server_ms": server_ms, "errors": errors, "wall": time.perf_counter() - started}


async def load(
    url: str, headers: dict, bodies: list[bytes], clients: int, seconds: float, path: str = "/v1/predict"
) -> dict:
    """`clients` loops posting bodies round-robin for `seconds`; latencies of successes, error count."""
    latencies: list[float] = []
    server_ms: list[float] = []
    errors: dict[str, int] = {}
    stop_at = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=url, headers={**headers, "content-type": "application/json"}, limits=limits, timeout=60
    ) as client:

        async def one_client(offset: int) -> None:
            i = offset
            while time.perf_counter() < stop_at:
                body = _next_body(bodies, i)
                i += clients
                t0 = time.perf_counter()
                try:
                    response = await (client.get(path) if body is None else client.post(path, content=body))
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                    continue
                elapsed = time.perf_counter() - t0
                if response.status_code != 200:
                    errors[str(response.status_code)] = errors.get(str(response.status_code), 0) + 1
                    continue
                latencies.append(elapsed)
                server_ms.extend(_server_ms(response.content, path))

        started = time.perf_counter()
        await asyncio.gather(*(one_client(k) for k in range(clients)))
        wall = time.perf_counter() - started
    return {"latencies": latencies, "server_ms": server_ms, "errors": errors, "wall": wall}


WRK_SCRIPT = """
local bodies, i = {}, 0
for line in io.lines(os.getenv("GRIDPFN_WRK_BODIES")) do bodies[#bodies + 1] = line end
wrk.method = os.getenv("GRIDPFN_WRK_METHOD")
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("GRIDPFN_WRK_KEY")
if key ~= nil and key ~= "" then wrk.headers["Authorization"] = "Bearer " .. key end
request = function()
  if #bodies == 0 then return wrk.format(nil, nil) end
  i = i + 1
  return wrk.format(nil, nil, nil, bodies[(i % #bodies) + 1])
end
done = function(summary, latency, requests)
  local slow = 0
  for i = 1, #latency do
    local us, count = latency(i)
    if us > 1000000 then slow = slow + count end
  end
  io.write(string.format("GRIDPFN %d %d %d %d %d %d %.1f %.1f %.1f %d %d\\n", summary.requests, summary.duration,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency.min, latency.max, latency:percentile(50), latency:percentile(95), latency:percentile(99), slow,
    summary.errors.timeout))
end
"""


def load_wrk(url: str, path: str, api_key: str | None, bodies: list[bytes], clients: int, seconds: float) -> dict:
    """`clients` wrk connections (one wrk thread) for `seconds`; POST cycling through bodies, or GET without."""
    with tempfile.TemporaryDirectory(prefix="gridpfn-wrk-") as tmp:
        script, lines = Path(tmp) / "load.lua", Path(tmp) / "bodies.jsonl"
        script.write_text(WRK_SCRIPT)
        lines.write_bytes(b"".join(body + b"\n" for body in bodies))  # orjson output has no newlines
        env = dict(
            os.environ,
            GRIDPFN_WRK_BODIES=str(lines),
            GRIDPFN_WRK_METHOD="POST" if bodies else "GET",
            GRIDPFN_WRK_KEY=api_key or "",
        )
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{clients}",
                f"-d{max(1, round(seconds))}s",
                "--timeout",
                "30s",
                "-s",
                str(script),
                url + path,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    fields = next(line for line in out.splitlines() if line.startswith("GRIDPFN ")).split()[1:]
    n, duration_us, status_errors, socket_errors = (int(v) for v in fields[:4])
    p50, p95, p99 = (float(v) / 1e3 for v in fields[6:9])
    slow, timeouts = int(fields[9]), int(fields[10])  # answers over 1 s; requests unanswered after wrk's timeout
    return {
        "n": n - status_errors,
        "wall": duration_us / 1e6,
        "errors": {"non-2xx": status_errors, "socket": socket_errors},
        "percentiles": (p50, p95, p99),
        "server_ms": [],
        "over_1s": slow + timeouts,
        "max_ms": float(fields[5]) / 1e3,
    }


async def warm_every_process(url: str, headers: dict, body: bytes, connections: int = 64, rounds: int = 20) -> int:
    """Rounds of `connections` concurrent requests, each on a fresh connection, until every answer in a
    round says its context was already encoded; returns the rounds it took.

    Each server process encodes a context on its own first request (~0.3 s). Kept-alive load
    connections all land on whichever process accepted them, so a process can stay cold through a
    warm-up and stall its first measured requests; fresh connections reach the idle ones.
    """
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=url, headers={**headers, "content-type": "application/json"}, limits=limits, timeout=300
    ) as client:
        for done in range(1, rounds + 1):
            answers = await asyncio.gather(*(client.post("/v1/predict", content=body) for _ in range(connections)))
            for answer in answers:
                answer.raise_for_status()
            if all(answer.json()["timing"]["context_cached"] for answer in answers):
                return done
    raise SystemExit(f"a server process still encoded the context after {rounds} warm-up rounds")


def batch_stats(url: str) -> tuple[float, float]:
    """(forward passes, rows) so far, from the server's gridpfn_microbatch_rows histogram."""
    count = total = 0.0
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("gridpfn_microbatch_rows_count"):
            count = float(line.split()[-1])
        elif line.startswith("gridpfn_microbatch_rows_sum"):
            total = float(line.split()[-1])
    return count, total


def summarise(result: dict) -> dict:
    """ok count, req/s, (p50, p95, p99) ms, error count and requests over 1 s of a load run, whichever client made it."""
    n = result.get("n", len(result.get("latencies", ())))
    pcts = result.get("percentiles") or percentiles(result["latencies"])
    over = result.get("over_1s", sum(1 for t in result.get("latencies", ()) if t > 1.0))
    slowest = result.get("max_ms", max(result.get("latencies") or [float("nan")]) * 1e3)
    return {
        "n": n,
        "rps": n / result["wall"],
        "pcts": pcts,
        "errors": sum(result["errors"].values()),
        "over_1s": over,
        "max_ms": slowest,
    }


def report(title: str, result: dict, clients: int) -> dict:
    s = summarise(result)
    p50, p95, p99 = s["pcts"]
    line = (
        f"{title}: {clients} clients, {result['wall']:.1f} s, {s['n']} ok, {s['rps']:.1f} req/s, "
        f"latency p50 {p50:.2f} ms  p95 {p95:.2f} ms  p99 {p99:.2f} ms  max {s['max_ms']:.0f} ms, "
        f"over 1 s {s['over_1s']}, errors {s['errors']} "
        f"{ {k: v for k, v in result['errors'].items() if v} or '' }"
    )
    if result["server_ms"]:
        s50, _, s99 = percentiles([ms / 1e3 for ms in result["server_ms"]])
        line += f", server total_ms p50 {s50:.2f} p99 {s99:.2f}"
    print(line)
    return s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="base URL of a running server")
    parser.add_argument("--spawn", action="store_true", help="start a server (gridpfn serve) for the run")
    parser.add_argument("--tiny", action="store_true", help="with --spawn: serve a tiny random-init test model")
    parser.add_argument("--model-dir", help="with --spawn: registry to serve (default: GRIDPFN_MODEL_DIR)")
    parser.add_argument("--model", help="model name (default: the first in /v1/models)")
    parser.add_argument("--api-key", default=os.environ.get("GRIDPFN_BENCH_KEY"))
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--big-clients", type=int, default=1, help="clients in the 4500-query scenario")
    parser.add_argument("--big-seconds", type=float, default=10.0)
    parser.add_argument("--warmup-seconds", type=float, default=3.0, help="unmeasured single-query load first")
    parser.add_argument("--context-rows", type=int, default=500)
    parser.add_argument("--big-queries", type=int, default=4500)
    parser.add_argument(
        "--client",
        choices=["wrk", "raw", "httpx"],
        default="wrk" if shutil.which("wrk") else "raw",
        help="load generator: wrk (default when installed), raw asyncio HTTP/1.1 connections, or httpx.AsyncClient",
    )
    parser.add_argument("--env", action="append", default=[], help="with --spawn: extra GRIDPFN_X=value settings")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="with --spawn: server processes (GRIDPFN_PROCESSES); more than 1 needs --redis-url",
    )
    parser.add_argument(
        "--soak",
        action="store_true",
        help="only the soak: single-query predicts from 64 clients for 60 s (override with --clients, "
        "--seconds); prints requests over 1 s, p50 and p99",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="with --spawn: GRIDPFN_REDIS_URL of the server (default: $REDIS_URL; unset = embedded store)",
    )
    args = parser.parse_args()
    if not args.url and not args.spawn:
        parser.error("give --url or --spawn")
    if args.soak:
        explicit = set(sys.argv[1:])
        args.clients = args.clients if "--clients" in explicit else 64
        args.seconds = args.seconds if "--seconds" in explicit else 60.0

    import gridsim
    from service.client import arrow_request_body
    from service.http.responses import ARROW_STREAM

    proc = None
    url = args.url
    if args.spawn:
        env = dict(kv.split("=", 1) for kv in args.env)
        if args.processes > 1 and not args.redis_url:
            parser.error("--processes > 1 needs --redis-url (every process must see the stored context set)")
        if args.redis_url:
            env["GRIDPFN_REDIS_URL"] = args.redis_url
        env["GRIDPFN_PROCESSES"] = str(args.processes)
        proc, url = spawn(args.model_dir, args.tiny, env)
    try:
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        with httpx.Client(base_url=url, headers=headers, timeout=300) as c:
            models = c.get("/v1/models").json()["models"]
            model = args.model or models[0]["name"]
            created = c.post("/v1/context-sets", json={"simulate": {"n": args.context_rows, "delta": 0.1, "seed": 0}})
            created.raise_for_status()
            cid = created.json()["id"]
            queries = gridsim.simulate(args.big_queries, 0.1, 1).x
            c.post(
                "/v1/predict", json={"model": model, "context_id": cid, "queries": queries[:1].tolist()}
            ).raise_for_status()
            print(
                f"server {url}, model {model} ({'tiny random-init test model' if args.tiny else 'from registry'}), "
                f"context {args.context_rows} rows ({cid[:12]}...), cpu cores {os.cpu_count()}"
            )

            single = [
                orjson.dumps({"model": model, "context_id": cid, "queries": [q]}, option=orjson.OPT_SERIALIZE_NUMPY)
                for q in queries[:512]
            ]
            big = orjson.dumps(
                {
                    "model": model,
                    "context_id": cid,
                    "queries": queries,
                    "quantiles": [0.05, 0.5, 0.95],
                    "voltage_band": [0.95, 1.05],
                },
                option=orjson.OPT_SERIALIZE_NUMPY,
            )
            timings = []
            for _ in range(5):
                response = c.post("/v1/predict", content=big, headers={"content-type": "application/json"})
                timings.append({**response.json()["timing"], "server_ms": server_timing_ms(response.headers)})
            arrow_ms = []  # the same requests answered as Arrow (Accept) instead of JSON
            for _ in range(5):
                response = c.post(
                    "/v1/predict", content=big, headers={"content-type": "application/json", "accept": ARROW_STREAM}
                )
                response.raise_for_status()
                arrow_ms.append(server_timing_ms(response.headers))
            arrow_in_ms = []  # ... and sent as Arrow too (Content-Type), as GridPFNClient.predict does
            arrow_body = arrow_request_body(
                queries,
                {"model": model, "context_id": cid, "quantiles": [0.05, 0.5, 0.95], "voltage_band": [0.95, 1.05]},
            )
            for _ in range(5):
                response = c.post(
                    "/v1/predict", content=arrow_body, headers={"content-type": ARROW_STREAM, "accept": ARROW_STREAM}
                )
                response.raise_for_status()
                arrow_in_ms.append(server_timing_ms(response.headers))
        print(
            f"{args.big_queries}-query predict on the cached context, 5 sequential calls: whole request in the server "
            f"(Server-Timing: body read, JSON parse, validation, model, serialisation) "
            f"{[round(t['server_ms'], 1) for t in timings]} ms; handler total_ms {[round(t['total_ms'], 1) for t in timings]}"
            f", pfn_predict_ms {[round(t['pfn_predict_ms'], 1) for t in timings]}; request body {len(big) / 1e6:.1f} MB"
        )
        print(
            f"  the same answered as Arrow (Accept: application/vnd.apache.arrow.stream): whole request "
            f"{[round(ms, 1) for ms in arrow_ms]} ms"
        )
        print(
            f"  the same sent as Arrow too (Content-Type, {len(arrow_body) / 1e6:.1f} MB body): whole request "
            f"{[round(ms, 1) for ms in arrow_in_ms]} ms"
        )

        def run_load(bodies: list[bytes], clients: int, seconds: float, path: str = "/v1/predict") -> dict:
            if args.client == "wrk":
                return load_wrk(url, path, args.api_key, bodies, clients, seconds)
            runner = load_raw if args.client == "raw" else load
            return asyncio.run(runner(url, headers, bodies, clients, seconds, path))

        # every process of a multi-process server encodes the context on its own first request: fresh
        # connections reach them all, then a short unmeasured load phase warms the caches
        rounds = asyncio.run(warm_every_process(url, headers, single[0]))
        print(f"warm-up: every answer of round {rounds} came from an already encoded context")
        run_load(single, args.clients, args.warmup_seconds)
        if args.soak:
            soak = report("soak: single-query predicts", run_load(single, args.clients, args.seconds), args.clients)
            p50, _, p99 = soak["pcts"]
            print(
                f"\nsoak, {args.clients} clients x {args.seconds:.0f} s: requests over 1 s {soak['over_1s']} (target 0), "
                f"p50 {p50:.2f} ms, p99 {p99:.2f} ms (p99/p50 {p99 / p50:.1f}, target <= 5), slowest {soak['max_ms']:.0f} ms, "
                f"{soak['rps']:.0f} req/s, errors {soak['errors']}"
            )
            return
        floor = report(
            f"GET /healthz, no work: the HTTP stack's floor ({args.client} client)",
            run_load([], args.clients, args.seconds, "/healthz"),
            args.clients,
        )
        before = batch_stats(url)
        cpu_before = process_tree_cpu_s(proc.pid) if proc is not None else None
        result = run_load(single, args.clients, args.seconds)
        cpu_used = process_tree_cpu_s(proc.pid) - cpu_before if cpu_before is not None else None
        single_s = report(f"single-query predicts ({args.client} client)", result, args.clients)
        after = batch_stats(url)
        if cpu_used is not None:
            print(f"  server CPU per single-query request: {cpu_used / max(len(result['latencies']), 1) * 1e3:.3f} ms")
        batches, rows = after[0] - before[0], after[1] - before[1]
        print(
            f"  micro-batches{' (summed over the server processes)' if args.processes > 1 else ''}: {batches:.0f} forward passes for {rows:.0f} query rows "
            f"({rows / max(batches, 1):.1f} rows per pass)"
        )
        result_big = run_load([big], args.big_clients, args.big_seconds)
        report(f"{args.big_queries}-query predicts ({args.client} client)", result_big, args.big_clients)

        (p50, _, p99), (f50, _, f99) = single_s["pcts"], floor["pcts"]
        big_server = min(t["server_ms"] for t in timings)
        big_handler = min(t["total_ms"] for t in timings)
        print("\ntarget                                   measured")
        print(
            f"single-query p50 <= 5 ms                 {p50:.2f} ms   (GET /healthz floor {f50:.2f} ms; ratio {p50 / f50:.1f}x)"
        )
        print(
            f"single-query p99 <= 25 ms                {p99:.2f} ms   (GET /healthz floor {f99:.2f} ms; ratio {p99 / f99:.1f}x)"
        )
        print(f"single-query errors == 0                 {single_s['errors']}")
        print(f"single-query requests/s                  {single_s['rps']:.0f}   (GET /healthz {floor['rps']:.0f})")
        print(
            f"{args.big_queries}-query server time <= 100 ms     {big_server:.1f} ms (best of 5), "
            f"{statistics.median(t['server_ms'] for t in timings):.1f} ms (median): the whole request (Server-Timing)"
        )
        print(
            f"  of which the handler (after parsing)   {big_handler:.1f} ms (best of 5), "
            f"{statistics.median(t['total_ms'] for t in timings):.1f} ms (median): timing.total_ms"
        )
        print(
            f"  answered as Arrow instead of JSON      {min(arrow_ms):.1f} ms (best of 5), "
            f"{statistics.median(arrow_ms):.1f} ms (median): the whole request (Server-Timing)"
        )
        print(
            f"  sent and answered as Arrow             {min(arrow_in_ms):.1f} ms (best of 5), "
            f"{statistics.median(arrow_in_ms):.1f} ms (median): the whole request (Server-Timing)"
        )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()

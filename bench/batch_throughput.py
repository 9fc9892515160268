"""Batch-job throughput end to end: input file in -> result file out, through the real service.

Starts Redis (unless --redis-url), `gridpfn serve` and one `gridpfn worker` as subprocesses,
writes N load vectors to Parquet, stores a simulated context set, then times submit (upload +
validation) -> worker (chunks) -> fetch (result file written). Prints rows/s end to end, the time
per stage, the worker's own per-stage seconds (read / forward / statistics / write) and the peak
RSS of the worker (VmHWM) and of the server.

    python bench/batch_throughput.py                       # 1,000,000 rows, 500-point context
    python bench/batch_throughput.py --model tiny          # the tiny test architecture
    python bench/batch_throughput.py --model shipped --rows 20000

--model: `registry` (default: the newest trained checkpoint under models/registry, falling back to
`shipped` when there is none), `shipped` (the architecture of models/configs/ieee33-transformer-dva.json
with seeded untrained weights: the real per-query cost, meaningless predictions) or `tiny`.
Targets on the 2-core CPU: >= 20,000 rows/s end to end and peak worker RSS <= 2 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_ROWS_S, TARGET_RSS_GB = 20_000, 2.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _registry(kind: str, workdir: Path, wanted: str | None = None) -> tuple[Path, str, str]:
    """(model dir, model name, what it is)."""
    from models.registry import load_registry

    default = ROOT / "models" / "registry"
    if kind == "registry":
        if default.is_dir() and any(default.glob("*/*/card.json")):
            registry = load_registry(default, warmup=False)
            name = wanted or sorted(registry.models)[-1]
            if name not in registry.models:
                raise SystemExit(f"--name {name!r}: models/registry serves {sorted(registry.models)}")
            version = registry.get(name).version
            return default, name, f"trained checkpoint {name} {version} from models/registry"
        kind = "shipped"
        print("no trained checkpoint under models/registry: using the shipped architecture, untrained")
    from models.testing import tiny_card

    if kind == "tiny":
        from models.testing import build_tiny_registry

        return build_tiny_registry(workdir / "registry"), "tiny-dva", "tiny test architecture (models.testing)"
    import torch

    from models.config import ModelConfig
    from models.model import DVAPFN
    from models.registry import write_checkpoint

    config = json.loads((ROOT / "models/configs/ieee33-transformer-dva.json").read_text())["model"]
    torch.manual_seed(0)
    model = DVAPFN(ModelConfig.from_dict(config))
    torch.nn.init.normal_(model.head[-1].weight, std=0.1)
    card = {**tiny_card("shipped-untrained"), "description": "shipped architecture, untrained (benchmark only)"}
    write_checkpoint(model, card, workdir / "registry" / "shipped-untrained" / "0.0.1")
    return workdir / "registry", "shipped-untrained", "ieee33-transformer-dva architecture, untrained weights"


def _write_input(path: Path, rows: int, chunk: int = 100_000) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    import gridsim

    net = gridsim.network("ieee33")
    rng = np.random.default_rng(0)
    schema = pa.schema([(f, pa.float64()) for f in net.feature_names])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, chunk):
            x = gridsim.sample_loads(net, min(chunk, rows - start), 0.2, rng)
            writer.write_table(pa.Table.from_arrays([pa.array(x[:, j]) for j in range(x.shape[1])], schema=schema))


def _peak_rss_gb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) / 1024**2


def _start_redis(workdir: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"redis://127.0.0.1:{port}/0"


def _serve(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`gridpfn serve` on a free loopback port with `env` (not yet ready: see _wait_ready), and its URL."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "service.commands.cli", "--log-level", "WARNING", "serve", "--port", str(port)],
        env=env,
        cwd=ROOT,
    )
    return server, f"http://127.0.0.1:{port}"


def _wait_ready(url: str, proc: subprocess.Popen) -> None:
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        time.sleep(0.2)
    raise SystemExit("server not ready after 300 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--context", type=int, default=500, help="simulated context points")
    parser.add_argument("--quantiles", default="0.05,0.5,0.95")
    parser.add_argument("--model", choices=("registry", "shipped", "tiny"), default="registry")
    parser.add_argument("--name", default=None, help="with --model registry: which checkpoint (default: last by name)")
    parser.add_argument("--chunk-rows", type=int, default=None, help="GRIDPFN_JOB_CHUNK_ROWS (default: setting's)")
    parser.add_argument("--worker-threads", type=int, default=2)
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    from service.client import GridPFNClient

    workdir = Path(tempfile.mkdtemp(prefix="gridpfn-batch-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        model_dir, model, what = _registry(args.model, workdir, args.name)
        redis_url = args.redis_url
        if not redis_url:
            redis_proc, redis_url = _start_redis(workdir)
            procs.append(redis_proc)
        env = dict(
            os.environ,
            GRIDPFN_REDIS_URL=redis_url,
            GRIDPFN_MODEL_DIR=str(model_dir),
            GRIDPFN_JOBS_DIR=str(workdir / "jobs"),
            GRIDPFN_JOB_QUEUE="bench:jobs",
            GRIDPFN_WORKER_THREADS=str(args.worker_threads),
        )
        if args.chunk_rows:
            env["GRIDPFN_JOB_CHUNK_ROWS"] = str(args.chunk_rows)
        server, url = _serve(env)
        procs.append(server)
        worker_log = open(workdir / "worker.log", "w")
        worker = subprocess.Popen(
            [sys.executable, "-m", "service.commands.cli", "worker"],
            env=env,
            cwd=ROOT,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
        )
        procs.append(worker)
        input_path, output_path = workdir / "input.parquet", workdir / "result.parquet"
        t = time.perf_counter()
        _write_input(input_path, args.rows)
        print(
            f"input: {args.rows:,} rows x 64 features, {input_path.stat().st_size / 1e6:.0f} MB Parquet "
            f"(written in {time.perf_counter() - t:.1f} s, not timed)"
        )
        _wait_ready(url, server)
        with GridPFNClient(url, timeout_s=3600) as client:
            cid = client.create_context(simulate={"network": "ieee33", "delta": 0.2, "n": args.context, "seed": 0})
            while "waiting for jobs" not in (workdir / "worker.log").read_text():
                if worker.poll() is not None:
                    raise SystemExit((workdir / "worker.log").read_text())
                time.sleep(0.2)
            levels = [float(q) for q in args.quantiles.split(",")]
            rss_before = _peak_rss_gb(worker.pid)
            t0 = time.perf_counter()
            job = client.submit(input_path, model, cid, quantiles=levels)
            t1 = time.perf_counter()
            final = client.wait(job["id"], poll_s=0.5)
            t2 = time.perf_counter()
            if final["state"] != "done":
                raise SystemExit(f"job ended {final['state']}: {final['errors']}")
            client.fetch(job["id"], output_path)
            t3 = time.perf_counter()
        worker_rss, server_rss = _peak_rss_gb(worker.pid), _peak_rss_gb(server.pid)
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(output_path).metadata
        assert meta.num_rows == args.rows, (meta.num_rows, args.rows)
        total = t3 - t0
        stages = re.search(r"done: (.*)", (workdir / "worker.log").read_text())
        print(f"model: {what}; context {args.context} points; 32 buses; mean + std + quantiles {levels}")
        print(
            f"result: {meta.num_rows:,} rows x {meta.num_columns} columns, "
            f"{output_path.stat().st_size / 1e6:.0f} MB Parquet"
        )
        print(f"submit (upload + validation + queue)  {t1 - t0:8.1f} s")
        print(
            f"worker (queued -> done)               {t2 - t1:8.1f} s   ({final['rows_per_s']:,.0f} rows/s "
            f"by the job's own clock)"
        )
        print(f"fetch (result file written)           {t3 - t2:8.1f} s")
        print(f"worker stages: {stages.group(1) if stages else 'n/a'}")
        print(f"{'':38s}{'measured':>12s}{'target':>12s}")
        print(f"{'rows/s end to end':38s}{args.rows / total:12,.0f}{TARGET_ROWS_S:>12,}")
        print(f"{'peak worker RSS (GB)':38s}{worker_rss:12.2f}{TARGET_RSS_GB:12.1f}")
        print(f"{'worker RSS after start-up (GB)':38s}{rss_before:12.2f}")
        print(f"{'peak server RSS (GB)':38s}{server_rss:12.2f}")
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

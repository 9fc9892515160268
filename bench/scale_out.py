"""One batch job spread over several workers (issue 31, scale): rows/s of the same job with 1 vs 2 `gridpfn
worker` processes, and on a Dask LocalCluster of 1 vs 2 worker processes behind one coordinating `gridpfn
worker` (GRIDPFN_DASK_SCHEDULER), side by side in one run.

Starts Redis (unless --redis-url) and `gridpfn serve`, writes N load vectors to Parquet once and stores a
simulated context; then per configuration starts its workers, waits until their models are loaded, submits
the same file, waits for the job and stops the workers. Prints per run: rows/s by the job's own clock (first
chunk claimed -> result published, so the upload and the pick-up are left out), seconds from submit to done,
and how many chunks each worker ran (from the job's record).

    python bench/scale_out.py --model registry --name transformer-dva-fast --rows 300000

On a host with fewer cores than workers x threads the workers share the cores: read the figures beside
`nproc` and the load average the script prints.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.batch_throughput import _registry, _serve, _start_redis, _wait_ready, _write_input  # noqa: E402

log = logging.getLogger("bench.scale_out")


@dataclass(frozen=True)
class Setup:
    """A configuration: `workers` processes of `kind` ('worker': gridpfn worker; 'dask': Dask worker processes
    behind one coordinating gridpfn worker), each running `threads` chunks' blocks (worker) or chunks (dask)."""

    kind: str
    workers: int
    threads: int

    @property
    def label(self) -> str:
        what = "gridpfn worker" if self.kind == "worker" else "Dask worker"
        return f"{self.workers} x {what}, {self.threads} thread{'s' if self.threads > 1 else ''} each"


SETUPS = (
    Setup("worker", 1, 1),
    Setup("worker", 2, 1),
    Setup("worker", 1, 2),
    Setup("dask", 1, 1),
    Setup("dask", 2, 1),
)


def _worker(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    out = open(log_path, "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "service.commands.cli", "worker"],
        env=env,
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def _wait_workers(procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    deadline = time.monotonic() + 600
    for proc, path in zip(procs, logs):
        while "waiting for jobs" not in path.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"worker not ready:\n{path.read_text()[-3000:]}")
            time.sleep(0.2)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_setup(setup: Setup, env: dict[str, str], workdir: Path, client, states, submit: Callable[[], dict]) -> dict:  # noqa: ANN001
    """Start the setup's workers, run one job on them, stop them; the job's figures."""
    cluster = dask = None
    procs: list[subprocess.Popen[bytes]] = []
    tag = f"{setup.kind}{setup.workers}x{setup.threads}-{time.monotonic_ns()}"
    try:
        if setup.kind == "dask":
            from distributed import Client, LocalCluster

            from service.jobs.dask_chunks import preload

            cluster = LocalCluster(
                n_workers=setup.workers,
                threads_per_worker=setup.threads,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.WARNING,
            )
            dask = Client(cluster, set_as_default=False)
            dask.run(preload, env["GRIDPFN_MODEL_DIR"])  # as `dask worker --preload service.jobs.dask_chunks` does
            envs = [{**env, "GRIDPFN_DASK_SCHEDULER": cluster.scheduler_address}]
        else:
            envs = [{**env, "GRIDPFN_WORKER_THREADS": str(setup.threads)}] * setup.workers
        logs = [workdir / f"{tag}-{i}.log" for i in range(len(envs))]
        procs = [_worker(e, path) for e, path in zip(envs, logs)]
        _wait_workers(procs, logs)
        t0 = time.perf_counter()
        job = submit()
        while (final := client.status(job["id"]))["state"] in ("queued", "running"):
            time.sleep(0.1)  # a steady poll: client.wait backs off, which would blur the wall time
        wall = time.perf_counter() - t0
        if final["state"] != "done":
            raise SystemExit(f"{setup.label}: job ended {final['state']}: {final['errors']}")
        record = states.get(job["id"])
        client.cancel(job["id"])  # deletes the finished job and its files
        return {
            "rows_per_s": final["rows_per_s"],
            "wall_s": wall,
            "workers": record["workers"],
            "rows": final["rows_total"],
        }
    finally:
        _stop(procs)
        if dask is not None:
            dask.close()
        if cluster is not None:
            cluster.close()


def _study_job(client, code: str, years: list[int], context: int = 500) -> Callable[[], dict]:  # noqa: ANN001
    """A SimBench grid uploaded, its year's first `context` steps stored as the context, and the submit of its
    year as a study job: SimBench's profile table, today and 2 %/year growth over `years` (as study_year.py)."""
    from bench.study_year import _profile_table
    from gridsim import simbench_data

    network = client.upload_network(simbench_data.simbench_pandapower_json(code).encode())["id"]
    x, y, _ = simbench_data.simbench_year(code)
    cid = client.create_context(x=x[:context], y=y[:context], network=network)
    table = _profile_table(code, simbench_data.step_indices(simbench_data.YEAR_STEPS))
    table = table.astype({"time": str}).set_index("time")
    plans = [{"name": "today"}, {"name": "growth", "growth_rate": 0.02, "years": list(years)}]
    return functools.partial(
        client.study,
        plans,
        context_id=cid,
        profiles=table,
        voltage_band=[0.95, 1.05],
        quantiles=[0.05, 0.5, 0.95],
        as_job=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--context", type=int, default=500, help="simulated context points")
    parser.add_argument("--model", choices=("registry", "shipped", "tiny"), default="registry")
    parser.add_argument("--name", default="transformer-dva-fast", help="with --model registry: which checkpoint")
    parser.add_argument("--chunk-rows", type=int, default=None, help="GRIDPFN_JOB_CHUNK_ROWS (default: setting's)")
    parser.add_argument("--repeats", type=int, default=1, help="runs per setup, interleaved")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--study",
        metavar="GRID",
        help="instead of a file of rows: a SimBench grid's year (SimBench's profile table) as one study job, "
        "POST /v1/studies with as_job, network-fit on the year's first `--context` steps",
    )
    parser.add_argument(
        "--years", type=int, nargs="+", default=[0, 5, 10], help="with --study: a growth scenario's years"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers and workers it started
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for noisy in ("distributed", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    import redis

    from service.client import GridPFNClient
    from service.jobs.states import RedisJobStates

    workdir = Path(tempfile.mkdtemp(prefix="gridpfn-scale-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        model_dir, model, what = _registry(args.model, workdir, args.name)
        redis_url = args.redis_url
        if not redis_url:
            redis_proc, redis_url = _start_redis(workdir)
            procs.append(redis_proc)
        queue = f"bench-scale:{time.time_ns()}"
        env = dict(
            os.environ,
            GRIDPFN_REDIS_URL=redis_url,
            GRIDPFN_MODEL_DIR=str(model_dir),
            GRIDPFN_JOBS_DIR=str(workdir / "jobs"),
            GRIDPFN_JOB_QUEUE=queue,
        )
        if args.chunk_rows:
            env["GRIDPFN_JOB_CHUNK_ROWS"] = str(args.chunk_rows)
        server, url = _serve(env)
        procs.append(server)
        input_path = workdir / "input.parquet"
        if not args.study:
            _write_input(input_path, args.rows)
        _wait_ready(url, server)
        states = RedisJobStates(redis.Redis.from_url(redis_url), queue, 3600)
        results: dict[Setup, list[dict]] = {setup: [] for setup in SETUPS}
        with GridPFNClient(url, timeout_s=3600) as client:
            if args.study:
                submit, what = _study_job(client, args.study, args.years), f"network-fit, study of {args.study}"
            else:
                cid = client.create_context(simulate={"network": "ieee33", "delta": 0.2, "n": args.context, "seed": 0})
                job_args = {"data": input_path, "model": model, "context_id": cid, "quantiles": [0.05, 0.5, 0.95]}
                submit = functools.partial(client.submit, **job_args)
            for repeat in range(args.repeats):
                for setup in SETUPS:
                    figures = run_setup(setup, env, workdir, client, states, submit)
                    log.info("run %d, %s: %s", repeat + 1, setup.label, figures)
                    results[setup].append(figures)
        load = os.getloadavg()
        rows = results[SETUPS[0]][0]["rows"]
        print(f"\nmodel: {what}; {rows:,} rows; context {args.context} points; quantiles 0.05, 0.5, 0.95")
        print(f"host: {os.cpu_count()} CPUs; load average after the runs {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
        print(f"{'setup':44s}{'rows/s (job clock)':>22s}{'submit -> done (s)':>22s}   chunks per worker")
        for setup, runs in results.items():
            rates = ", ".join(f"{r['rows_per_s']:,.0f}" for r in runs)
            walls = ", ".join(f"{r['wall_s']:.1f}" for r in runs)
            split = "; ".join("/".join(str(n) for n in sorted(r["workers"].values(), reverse=True)) for r in runs)
            print(f"{setup.label:44s}{rates:>22s}{walls:>22s}   {split}")
    finally:
        _stop(list(reversed(procs)))
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

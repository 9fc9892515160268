"""`gridpfn worker` (run batch jobs from Redis) and `gridpfn batch submit|status|fetch|cancel`.

The batch commands talk HTTP through service.client, so they work from any machine that can reach
the server (GRIDPFN_URL, GRIDPFN_API_KEY); `worker` needs the shared Redis and jobs directory.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    worker = subparsers.add_parser(
        "worker",
        help="run chunks of batch jobs from Redis beside any other workers, or hand them to a Dask cluster "
        "(GRIDPFN_DASK_SCHEDULER; settings from GRIDPFN_* env vars)",
    )
    worker.add_argument("--model-dir", default=None, help="overrides GRIDPFN_MODEL_DIR")
    worker.add_argument("--name", default=None, help="consumer name (default host-pid)")
    worker.set_defaults(func=run_worker)

    batch = subparsers.add_parser("batch", help="submit, watch and fetch batch jobs over HTTP")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=os.environ.get("GRIDPFN_URL", "http://127.0.0.1:8000"),
        help="server URL (default $GRIDPFN_URL or http://127.0.0.1:8000)",
    )
    common.add_argument("--api-key", default=os.environ.get("GRIDPFN_API_KEY"), help="bearer key ($GRIDPFN_API_KEY)")
    commands = batch.add_subparsers(dest="batch_command", required=True)

    submit = commands.add_parser("submit", parents=[common], help="upload a CSV/Parquet file of load vectors")
    submit.add_argument("file")
    submit.add_argument("--context", required=True, help="context set id (POST /v1/context-sets)")
    submit.add_argument("--model", required=True)
    submit.add_argument("--quantiles", default="", help="comma-separated levels, e.g. 0.05,0.5,0.95")
    submit.add_argument("--voltage-band", default="", help="low,high in p.u., e.g. 0.95,1.05")
    submit.add_argument("--ground-truth", action="store_true", help="also solve the power flow per row")
    submit.add_argument("--wait", action="store_true", help="show a progress bar until the job ends")
    submit.add_argument("-o", "--output", default=None, help="with --wait: fetch the result to this file")
    submit.set_defaults(func=batch_submit)

    status = commands.add_parser("status", parents=[common], help="print a job's status as JSON")
    status.add_argument("job_id")
    status.set_defaults(func=batch_status)

    fetch = commands.add_parser("fetch", parents=[common], help="download a finished job's result")
    fetch.add_argument("job_id")
    fetch.add_argument("-o", "--output", required=True, help="out.parquet or out.csv")
    fetch.set_defaults(func=batch_fetch)

    cancel = commands.add_parser("cancel", parents=[common], help="cancel a running job (or delete a finished one)")
    cancel.add_argument("job_id")
    cancel.set_defaults(func=batch_cancel)


def run_worker(args: argparse.Namespace) -> int:
    from service.jobs.settings import JobSettings
    from service.jobs.worker import Worker
    from service.process_privacy import forbid_inspection
    from service.settings import Settings

    settings = Settings(**({"model_dir": args.model_dir} if args.model_dir else {}))
    job_settings = JobSettings()
    if not settings.redis_url:
        raise ValueError("worker: GRIDPFN_REDIS_URL is not set; without Redis the server runs jobs itself")
    if job_settings.dask_scheduler:  # the cluster's workers load the models; this one only claims and records
        from service.jobs.dask_chunks import DaskChunks

        chunks = DaskChunks.connect(
            job_settings.dask_scheduler, job_settings.jobs_dir, settings.model_dir, job_settings.dask_chunks_per_thread
        )
        worker = Worker(settings.redis_url, None, job_settings, args.name, chunks=chunks)
    else:
        worker = Worker(settings.redis_url, _registry(settings), job_settings, args.name)
    forbid_inspection()  # its environment may hold the deployment's keys (a shared env_file)
    worker.install_signals()
    worker.serve_forever()
    return 0


def _registry(settings):
    """The models of a worker that runs chunks itself, on one torch and one BLAS thread per block."""
    import torch

    from service.engine.warmup import one_blas_thread, registry_from

    torch.set_num_threads(1)  # parallel blocks instead: intra-op threads contend badly on small shared CPUs
    one_blas_thread()
    registry = registry_from(settings)
    if not registry.checkpoints:
        raise ValueError(f"worker: no usable model under {settings.model_dir}: {registry.errors}")
    return registry


def _client(args: argparse.Namespace):
    from service.client import GridPFNClient

    return GridPFNClient(args.url, api_key=args.api_key)


def _levels(text: str, name: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise ValueError(f"{name}: expected comma-separated numbers, got {text!r}") from exc


def _call(fn):
    from service.client import GridPFNError

    try:
        return fn()
    except GridPFNError as exc:
        print(json.dumps(exc.problem, indent=2), file=sys.stderr)
        raise SystemExit(1) from exc


def batch_submit(args: argparse.Namespace) -> int:
    band = _levels(args.voltage_band, "--voltage-band") or None
    with _client(args) as client:
        job = _call(
            lambda: client.submit(
                args.file, args.model, args.context, _levels(args.quantiles, "--quantiles"), band, args.ground_truth
            )
        )
        print(job["id"])
        if not args.wait:
            return 0
        final = _watch(client, job)
        if final["state"] != "done":
            print(json.dumps(final, indent=2), file=sys.stderr)
            return 1
        if args.output:
            _call(lambda: client.fetch(job["id"], args.output))
            print(f"result written to {args.output}", file=sys.stderr)
    return 0


def _watch(client, job: dict) -> dict:
    from tqdm import tqdm

    with tqdm(total=job["rows_total"], unit="rows", unit_scale=True, desc=job["id"][:8], file=sys.stderr) as bar:

        def update(status: dict) -> None:
            bar.update(status["rows_done"] - bar.n)
            bar.set_postfix_str(status["state"])

        return _call(lambda: client.wait(job["id"], poll_s=0.5, on_progress=update))


def batch_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        print(json.dumps(_call(lambda: client.status(args.job_id)), indent=2))
    return 0


def batch_fetch(args: argparse.Namespace) -> int:
    with _client(args) as client:
        path = _call(lambda: client.fetch(args.job_id, args.output))
    print(f"result written to {path}", file=sys.stderr)
    return 0


def batch_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        status = _call(lambda: client.cancel(args.job_id))
    print(json.dumps(status, indent=2) if status else f"job {args.job_id} deleted")
    return 0

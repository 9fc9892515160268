"""`gridpfn serve`: run the HTTP service with uvicorn."""

from __future__ import annotations

import argparse
import logging
import os

from pydantic import ValidationError

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve the HTTP API (settings from GRIDPFN_* env vars)")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--model-dir", default=None, help="overrides GRIDPFN_MODEL_DIR")
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="server processes sharing the port (overrides GRIDPFN_PROCESSES; > 1 needs GRIDPFN_REDIS_URL)",
    )
    parser.add_argument("--access-log", action="store_true", help="log every request (off: it costs latency)")
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from service.commands import supervisor
    from service.http.app import create_app
    from service.http.protocol import protocol_for
    from service.settings import Settings, is_loopback

    # Every process of a multi-process server builds its own Settings from the environment.
    if args.model_dir:
        os.environ["GRIDPFN_MODEL_DIR"] = str(args.model_dir)
    if args.processes:
        os.environ["GRIDPFN_PROCESSES"] = str(args.processes)
    try:
        settings = Settings()
    except ValidationError as exc:
        raise ValueError(str(exc)) from None
    if not (settings.api_keys or settings.admin_api_key) and not is_loopback(args.host):
        log.warning(
            "serving on %s beyond loopback with no API keys: anyone who reaches this port can use "
            "the API; set GRIDPFN_API_KEYS",
            args.host,
        )
    log.info(
        "serving on http://%s:%d (docs at /docs), store: %s, %d process(es)",
        args.host,
        args.port,
        "redis" if settings.redis_url else "embedded",
        settings.processes,
    )
    options = dict(
        access_log=args.access_log,
        log_config=None,
        lifespan="on",
        http=protocol_for(settings.coalesce_writes),
        limit_concurrency=settings.max_connections,
    )
    if settings.processes > 1:  # one SO_REUSEPORT socket per process (service.commands.supervisor)
        return supervisor.run(args.host, args.port, settings.processes, options)
    uvicorn.run(create_app(settings), host=args.host, port=args.port, **options)
    return 0

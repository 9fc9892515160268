"""Container health checks of the GridPFN image: exit 0 when healthy, 1 when not (reason on stderr).

  api:    GET /readyz answers 200, i.e. models loaded and warmed and the store reachable.
  worker: this container's `gridpfn worker` is a consumer of the job stream and has talked to Redis
          within GRIDPFN_JOB_CLAIM_IDLE_S, the silence after which other workers would take its job
          over; so a hung or disconnected worker turns unhealthy instead of looking fine while idle.

Installed in the image as /opt/gridpfn/healthcheck.py; the tests run it against real processes.
"""

from __future__ import annotations

import argparse
import socket
import sys
import urllib.error
import urllib.request


def check_api(port: int, timeout: float) -> str | None:
    """None when /readyz answers 200, else why not."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=timeout) as response:
            return None if response.status == 200 else f"/readyz answered {response.status}"
    except urllib.error.HTTPError as exc:
        return f"/readyz answered {exc.code}: {exc.read()[:300]!r}"
    except OSError as exc:
        return f"/readyz unreachable: {exc}"


def check_worker(timeout: float) -> str | None:
    """None when a consumer named after this host was active on the job stream recently enough."""
    import redis

    from service.jobs.queue import GROUP, RedisJobQueue
    from service.jobs.settings import JobSettings
    from service.settings import Settings

    settings, jobs = Settings(), JobSettings()
    if not settings.redis_url:
        return "GRIDPFN_REDIS_URL is not set"
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout)
    stream = RedisJobQueue(client, jobs.job_queue).stream
    try:
        consumers = client.xinfo_consumers(stream, GROUP)
    except redis.RedisError as exc:
        return f"no consumer group {GROUP!r} on {stream}: {exc}"
    prefix = f"{socket.gethostname()}-"  # the worker's default consumer name is <hostname>-<pid>
    idle_ms = [int(c["idle"]) for c in consumers if _text(c["name"]).startswith(prefix)]
    if not idle_ms:
        return f"no consumer of {stream} from this host ({prefix}*)"
    limit_ms = jobs.job_claim_idle_s * 1000
    if min(idle_ms) > limit_ms:
        return f"the worker has been silent for {min(idle_ms)} ms (limit {limit_ms:.0f} ms)"
    return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("api", "worker"))
    parser.add_argument("--port", type=int, default=8000, help="api port inside the container (default 8000)")
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds per network call (default 4)")
    args = parser.parse_args(argv)
    problem = check_api(args.port, args.timeout) if args.role == "api" else check_worker(args.timeout)
    if problem:
        sys.stderr.write(f"unhealthy {args.role}: {problem}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

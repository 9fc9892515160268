"""Uploaded networks are read in a separate, unprivileged, resource-limited process.

Why: the readers (gridsim.pandapower_json, gridsim.matpower) treat an upload as data, but parsing
and the validating power flow still run a lot of third-party code (pandas, pandapower, scipy) on
bytes an attacker chose. So they run in a reader process forked for that one upload by the
sandbox's zygote (service.engine.sandbox_zygote: no new privileges, `nobody` when the server is
root, caps on memory, CPU, files and processes): a hostile file can at worst make that process
fail, which the client sees as a 413/422. The server's event loop only awaits a pipe, and reads
the reply as JSON.

Uploads are read one at a time; `concurrency` more may wait, later ones get 503 with Retry-After.
The zygote is started on first use (or by `start()`), and again if it ever dies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Any

import orjson

from service.engine.errors import InvalidInput, QueueFull, TooLarge
from service.engine.sandbox_zygote import REPLY_CAP, SandboxLimits, frame

__all__ = ["SandboxLimits", "UploadSandbox"]

log = logging.getLogger(__name__)
START_TIMEOUT_S = 180.0  # a cold zygote imports torch and pandapower (seconds; far more on a busy small host)


class UploadSandbox:
    """The server's side of the sandbox: one zygote process, requests queued to it in turn."""

    def __init__(self, limits: SandboxLimits, concurrency: int = 2) -> None:
        self.limits, self.concurrency = limits, concurrency
        self.pending = 0  # the upload being read and those waiting for it
        self._zygote: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def snapshot(self, data: bytes, filename: str | None) -> tuple[dict[str, Any], str]:
        """(description, normalised pandapower JSON) of an upload, or the refusal its reader reported."""
        if len(data) > self.limits.max_bytes:
            raise TooLarge(
                "body",
                f"the network file is {len(data)} bytes, over the limit",
                f"at most {self.limits.max_bytes} bytes (GRIDPFN_MAX_NETWORK_BYTES)",
            )
        if self.pending > self.concurrency:
            raise QueueFull(self.pending, self.concurrency + 1)
        self.pending += 1
        try:
            async with self._lock:
                reply = await self._ask(data, filename)
        finally:
            self.pending -= 1
        if reply.get("ok") is True and isinstance(reply.get("info"), dict) and isinstance(reply.get("source"), str):
            return reply["info"], reply["source"]
        field, problem, expected = (str(reply.get(k) or "") for k in ("field", "problem", "expected"))
        if reply.get("status") == 413:
            raise TooLarge(field or "body", problem, expected)
        raise InvalidInput(field or "body", problem or "the network could not be read", expected or None)

    async def start(self) -> None:
        async with self._lock:
            await self._ready_zygote()

    async def close(self) -> None:
        zygote, self._zygote = self._zygote, None
        if zygote is not None:
            if zygote.returncode is None:
                zygote.kill()
            await zygote.wait()

    async def _ask(self, data: bytes, filename: str | None) -> dict[str, Any]:
        zygote = await self._ready_zygote()
        started = time.perf_counter()
        try:
            assert zygote.stdin is not None
            zygote.stdin.write(frame(orjson.dumps({"filename": filename})) + frame(data))
            await zygote.stdin.drain()
            reply = await asyncio.wait_for(self._read_frame(zygote), self.limits.wall_s + 30)
        except BaseException as exc:  # a dead or stuck zygote, or the client went away mid-read: start afresh
            await self.close()
            if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError, asyncio.IncompleteReadError)):
                log.error("upload sandbox: no reply (%r); zygote restarted", exc)
                raise InvalidInput(
                    "body",
                    "the network could not be read (the reader stopped)",
                    "a network that reads within the limits",
                ) from None
            raise
        log.info("upload sandbox: %d bytes read in %.2f s", len(data), time.perf_counter() - started)
        try:
            parsed = orjson.loads(reply)
        except orjson.JSONDecodeError:
            parsed = None
        return (
            parsed
            if isinstance(parsed, dict)
            else {"ok": False, "field": "body", "problem": "the reader's reply was not understood"}
        )

    async def _ready_zygote(self) -> asyncio.subprocess.Process:
        if self._zygote is not None and self._zygote.returncode is None:
            return self._zygote
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            "PYTHONDONTWRITEBYTECODE": "1",
            "LANG": "C.UTF-8",
        }
        for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # hosts where OpenBLAS needs them
            if name in os.environ:
                env[name] = os.environ[name]
        started = time.perf_counter()
        zygote = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "service.engine.sandbox_zygote",
            self.limits.to_json(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,
            env=env,
            cwd="/",
        )
        try:
            ready = await asyncio.wait_for(self._read_frame(zygote), START_TIMEOUT_S)
        except BaseException:
            if zygote.returncode is None:
                zygote.kill()
            await zygote.wait()
            raise
        if orjson.loads(ready) != {"ready": True}:
            zygote.kill()
            await zygote.wait()
            raise RuntimeError("upload sandbox: the zygote did not start")
        log.info("upload sandbox: zygote %d ready in %.1f s", zygote.pid, time.perf_counter() - started)
        self._zygote = zygote
        return zygote

    @staticmethod
    async def _read_frame(zygote: asyncio.subprocess.Process) -> bytes:
        assert zygote.stdout is not None
        size = int.from_bytes(await zygote.stdout.readexactly(4), "little")
        if size > REPLY_CAP:
            raise ConnectionError(f"reply of {size} bytes")
        return await zygote.stdout.readexactly(size)

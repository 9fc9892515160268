"""uvicorn's httptools protocol with bounded request heads, and a response's small writes sent as one.

Bounded heads: uvicorn's httptools protocol keeps whatever header bytes a client sends and waits
for the end of a head forever, so one connection could hold gigabytes of headers and a thousand
idle half-sent heads could hold a thousand sockets. `GuardedHttpToolsProtocol` answers 431 (and
closes) once a head passes `max_head_bytes` or `max_headers`, and closes a connection whose head
is not complete `head_timeout_s` after it was opened or its request began (uvicorn's keep-alive
timeout covers idle connections between requests). Limits: GRIDPFN_MAX_HEADER_BYTES,
GRIDPFN_MAX_HEADERS, GRIDPFN_HEADER_TIMEOUT_S, read in each server process (`head_limits`).

Coalesced writes: uvicorn writes a response's status line and headers, then its body, as two transport writes,
so a small JSON answer costs two send() system calls and two TCP segments. Under single-query load
those two sends were a large share of the event loop's samples (py-spy; bench/results/service-notes.md). Here the
writes made during one pass of the event loop are joined and sent when it ends (one call_soon);
a big write (a long answer) first sends what is pending, then goes out on its own, uncopied.
"""

from __future__ import annotations

import asyncio
import functools
import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Writes at least this big are not joined: copying them would cost more than the send it saves.
JOIN_BELOW_BYTES = 64 * 1024


class CoalescingTransport:
    """A transport proxy whose `write` buffers until the end of the current event-loop pass."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if len(data) >= JOIN_BELOW_BYTES:
            self.flush()
            self._transport.write(data)
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def writelines(self, chunks) -> None:  # through write, so nothing overtakes what is pending
        for chunk in chunks:
            self.write(chunk)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else is the real transport's
        return getattr(self._transport, name)


class HeadTooLarge(Exception):
    """Raised from on_headers_complete: the request head is over its limits (httptools turns it into a parser
    error, on which uvicorn answers 400; `send_400_response` answers 431 instead)."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose request heads are bounded in bytes, count and time (module docstring).

    Kept off the per-request path: no parser callback is wrapped, the size of a head is summed only
    when its bytes came in a chunk bigger than the limit or in several chunks, and one timer per
    connection (re-armed when it fires) watches the head that is open, instead of a timer per request."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.max_head_bytes, self.max_headers, self.head_timeout_s = head_limits()
        self._head_over, self._raw_head, self._in_head, self._chunk = False, 0, True, 0
        self._head_began = self.loop.time()
        self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(self.head_timeout_s, self._check_head)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _check_head(self) -> None:
        """The connection's one timer: close it when its open head is older than the timeout, else look again."""
        self._head_timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if self._in_head and now - self._head_began >= self.head_timeout_s:
            self.logger.info("closing a connection whose request head took over %.0f s", self.head_timeout_s)
            self.transport.close()
            return
        due = self._head_began + self.head_timeout_s if self._in_head else now + self.head_timeout_s
        self._head_timer = self.loop.call_at(due, self._check_head)

    def data_received(self, data: bytes) -> None:
        self._chunk = len(data)
        super().data_received(data)
        # httptools keeps a header line's bytes until the line ends: while a head is incomplete every byte
        # fed since it began belongs to it, so it is counted here, before the parser has seen the line end
        if self._in_head and not self.transport.is_closing():
            self._raw_head += len(data)
            if self._raw_head > self.max_head_bytes:
                self._head_over = True
                self._refuse_head()

    def send_400_response(self, msg: str) -> None:
        if self._head_over:  # the parser stopped because on_headers_complete raised HeadTooLarge
            self._refuse_head()
        else:
            super().send_400_response(msg)

    def _refuse_head(self) -> None:
        body = (
            b'{"type":"urn:gridpfn:problem:header-too-large","title":"Request header fields too large",'
            b'"status":431,"detail":"the request head is over '
            + str(self.max_head_bytes).encode()
            + b" bytes or "
            + str(self.max_headers).encode()
            + b' header fields","errors":[]}'
        )
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/problem+json"
            b"\r\nconnection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._raw_head, self._in_head, self._head_began = 0, True, self.loop.time()

    def on_headers_complete(self) -> None:
        self._in_head = False
        if len(self.headers) > self.max_headers or (
            (self._chunk > self.max_head_bytes or self._raw_head)  # a big chunk, or a head over several chunks
            and len(self.url) + sum(len(name) + len(value) for name, value in self.headers) > self.max_head_bytes
        ):
            self._head_over = True
            raise HeadTooLarge
        super().on_headers_complete()


class CoalescingHttpToolsProtocol(GuardedHttpToolsProtocol):
    """GuardedHttpToolsProtocol whose request cycles write through a CoalescingTransport."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]


def protocol_for(coalesce_writes: bool) -> Any:
    """The protocol class `gridpfn serve` runs: coalesced writes or not (GRIDPFN_COALESCE_WRITES); both bound heads.

    A class, not a configured copy: `--processes N` hands it to each server process by name, so the limits
    are read from the environment in each process (`head_limits`)."""
    return CoalescingHttpToolsProtocol if coalesce_writes else GuardedHttpToolsProtocol


@functools.cache
def head_limits() -> tuple[int, int, float]:
    """(max head bytes, max header fields, head timeout s) from GRIDPFN_MAX_HEADER_BYTES, GRIDPFN_MAX_HEADERS and
    GRIDPFN_HEADER_TIMEOUT_S (service.settings, read once per process)."""
    from service.settings import Settings

    fields = Settings.model_fields
    values = []
    for name in ("max_header_bytes", "max_headers", "header_timeout_s"):
        raw = os.environ.get(f"GRIDPFN_{name.upper()}")
        kind = float if name == "header_timeout_s" else int
        values.append(kind(raw) if raw else fields[name].default)
    return values[0], values[1], values[2]

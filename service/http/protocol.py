"""uvicorn's httptools protocol, with a response's small writes sent as one.

Why: uvicorn writes a response's status line and headers, then its body, as two transport writes,
so a small JSON answer costs two send() system calls and two TCP segments. Under single-query load
on the 2-core CPU those two sends were about a third of the event loop's samples (py-spy). Here the
writes made during one pass of the event loop are joined and sent when it ends (one call_soon);
a big write (a long answer) first sends what is pending, then goes out on its own, uncopied.
"""
from __future__ import annotations

import asyncio
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


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose request cycles write through a CoalescingTransport."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]


def protocol_for(coalesce_writes: bool) -> Any:
    """The `http` uvicorn serves with: this module's protocol, or uvicorn's own (GRIDPFN_COALESCE_WRITES=false)."""
    return CoalescingHttpToolsProtocol if coalesce_writes else "httptools"

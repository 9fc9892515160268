"""Refuse request bodies over the configured size with 413 before any parsing happens."""
from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import problem_response, too_large


class BodyLimitMiddleware:
    """Checks Content-Length up front, and counts streamed bytes for chunked bodies.

    Paths under `exempt` (file uploads that stream to disk) enforce their own limit instead.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, exempt: tuple[str, ...] = ()) -> None:
        self.app, self.max_bytes, self.exempt = app, max_bytes, exempt

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, size: str) -> None:
        problem = too_large("body", f"request body of {size} bytes is over the limit",
                            f"at most {self.max_bytes} bytes (GRIDPFN_MAX_BODY_BYTES)")
        await problem_response(problem)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS")
                or scope["path"].startswith(self.exempt)):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(scope, receive, send, length.decode())
            return
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            total += len(chunks[-1])
            if total > self.max_bytes:
                await self._refuse(scope, receive, send, f"more than {self.max_bytes}")
                return
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

"""The ASGI middleware around every request: security headers (outermost: every answer, refusals and
500s included), metrics and Server-Timing (also answering what nothing else handled), then the body
limit, which refuses request bodies over the configured size with 413 before any parsing happens, and the
request's Settings made current for the limits on a body's lists (service.http.limits).
"""

from __future__ import annotations

import logging
import time

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.engine.errors import TooLarge
from service.http import limits
from service.http.auth import check_authorization_header
from service.http.problems import ProblemError, problem_of, problem_response, unexpected_response
from service.metrics import Metrics
from service.settings import Settings

log = logging.getLogger(__name__)
CLIENT_CLOSED = 499  # the metrics' status of a request whose client went away before its answer (nginx's code)
# The scope key under which BodyLimitMiddleware leaves the body it read (within the limit) for the hot routes
# (service.http.hot_routes), which then take it from there instead of reading it again through Starlette.
READ_BODY = "gridpfn.body"

# The Content Security Policy of an HTML page that sets none of its own: the operator's page (service/ui),
# which loads its module scripts, stylesheet and icon from /ui/static and fetches this service's own API;
# nothing inline but the style attributes of its profile legend's colour swatches (app.js writes them into
# markup; set through CSSOM, as `el.style.left = ...` is elsewhere, they would need no allowance). Its
# downloads are blob: URLs clicked as links, which no fetch directive governs. The docs pages set their own
# (service.http.docs_pages).
PAGE_CSP = (
    "default-src 'self'; style-src-attr 'unsafe-inline'; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
_NOSNIFF = (b"x-content-type-options", b"nosniff")
_NO_FRAMES = (b"x-frame-options", b"DENY")
_PAGE_CSP = (b"content-security-policy", PAGE_CSP.encode())


class SecurityHeadersMiddleware:
    """`X-Content-Type-Options: nosniff` on every answer (a browser runs or styles nothing by guessing its
    type); on an HTML answer also `X-Frame-Options: DENY` and, unless the page set its own, PAGE_CSP.

    Plain ASGI: the start message's header list is copied with them appended, and nothing else is done
    per request (the predict path is timed: bench/results/service-notes.md says what this costs)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or ())
                headers.append(_NOSNIFF)
                html = own_policy = False
                for name, value in headers:
                    if name == b"content-type":
                        html = value.startswith(b"text/html")
                    elif name == b"content-security-policy":
                        own_policy = True
                if html:
                    headers.append(_NO_FRAMES)
                    if not own_policy:
                        headers.append(_PAGE_CSP)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_secured)


class HTTPMetricsMiddleware:
    """Counts and times every request by route template (not raw path, to bound label values), and
    tells the client that time in a `Server-Timing: app;dur=<ms>` header.

    An exception no handler took is answered here with the 500 problem (error id logged) and not
    raised further: Starlette's own last handler answers the same but re-raises, and uvicorn then
    drops the connection, which a keep-alive client meets as a failure of its next request."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics
        self._children: dict[tuple[str, str, str], tuple] = {}  # label values -> (counter, histogram) children

    def _observe(self, labels: tuple[str, str, str], seconds: float) -> None:
        """prometheus_client's .labels() takes a lock and builds a key on every call; look each pair up once."""
        children = self._children.get(labels)
        if children is None:
            children = self._children[labels] = (
                self.metrics.requests.labels(*labels),
                self.metrics.latency.labels(*labels),
            )
        children[0].inc()
        children[1].observe(seconds)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status, started = time.perf_counter(), 500, False

        async def send_status(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                # Server-Timing (W3C): the whole request inside the server, from the first byte the app
                # saw to the response start, so body parsing, validation and serialisation count too.
                elapsed_ms = (time.perf_counter() - start) * 1e3
                headers = list(message.get("headers") or []) + [
                    (b"server-timing", f"app;dur={elapsed_ms:.2f}".encode())
                ]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except ClientDisconnect:  # the client gave up (mid-upload): no one to answer, and no fault of the service
            status = status if started else CLIENT_CLOSED
            log.info("client disconnected during %s %s", scope["method"], scope["path"])
        except Exception as exc:
            if started:  # too late for an answer: uvicorn closes the connection
                raise
            await unexpected_response(scope["method"], scope["path"], exc)(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self._observe((scope["method"], route, str(status)), time.perf_counter() - start)


class RequestSettingsMiddleware:
    """Makes the app's Settings current while a request runs, so that its body's lists are counted against their
    configured limits before their items are validated (service.http.limits), by FastAPI and the hot routes."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = limits.REQUEST_SETTINGS.set(self.settings)
        try:
            await self.app(scope, receive, send)
        finally:
            limits.REQUEST_SETTINGS.reset(token)


class BodyLimitMiddleware:
    """Checks Content-Length up front, and counts streamed bytes for chunked bodies.

    Paths under `exempt` (file uploads that stream to disk) enforce their own limit instead, as do multipart
    bodies to `streamed` paths (read part by part as they arrive: service.http.form_stream). With API keys
    configured, a body is read only for a caller whose key is valid: the key is checked on the headers
    first, so a keyless client cannot make the server hold GRIDPFN_MAX_BODY_BYTES per connection (the
    401 says `Connection: close`, and the body is never read).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        exempt: tuple[str, ...] = (),
        streamed: tuple[str, ...] = (),
        api_keys: tuple[str, ...] = (),
        admin_api_key: str | None = None,
    ) -> None:
        self.app, self.max_bytes, self.exempt, self.streamed = app, max_bytes, exempt, streamed
        self.api_keys, self.admin_api_key = api_keys, admin_api_key

    async def _unauthorized(self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]) -> bool:
        """Whether a 401 was sent (a key is configured and the Authorization header holds none of them)."""
        if not self.api_keys and not self.admin_api_key:
            return False
        value = headers.get(b"authorization")
        try:
            check_authorization_header(value.decode("latin-1") if value else None, self.api_keys, self.admin_api_key)
        except ProblemError as problem:
            problem.headers = {**problem.headers, "Connection": "close"}
            await problem_response(problem)(scope, receive, send)
            return True
        return False

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, size: str) -> None:
        problem = problem_of(
            TooLarge(
                "body",
                f"request body of {size} bytes is over the limit",
                f"at most {self.max_bytes} bytes (GRIDPFN_MAX_BODY_BYTES)",
            )
        )
        await problem_response(problem)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] in ("GET", "HEAD", "DELETE", "OPTIONS")
            or scope["path"].startswith(self.exempt)
        ):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if await self._unauthorized(scope, receive, send, headers):
            return
        if scope["path"] in self.streamed and headers.get(b"content-type", b"").startswith(b"multipart/form-data"):
            await self.app(scope, receive, send)
            return
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
        scope[READ_BODY] = body

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

"""One error shape for every failure: RFC 9457 problem details (`application/problem+json`).

Handlers turn our ProblemError, the engine's domain errors (through the one table PROBLEMS),
FastAPI's validation errors, Starlette's HTTP errors and any unexpected exception into
{type, title, status, detail, errors: [{location, field, message, expected}]} so clients parse one
format whatever went wrong.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from service.engine.errors import (
    EngineError,
    GPBusy,
    GPContextTooLarge,
    GPTimeout,
    GPWorkerLost,
    InputRejected,
    InvalidInput,
    NonFiniteAnswer,
    NotFound,
    QueueFull,
    StoreUnavailable,
    TooLarge,
)
from service.http import fast_json

log = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:gridpfn:problem:"


# A problem lists at most this many field errors; `detail` says how many there were.
MAX_LISTED_ERRORS = 100


def field_error(field: str, message: str, expected: str | None = None, location: str = "body") -> dict[str, Any]:
    """One entry of a problem's `errors` list."""
    return {"location": location, "field": field, "message": message, "expected": expected}


class ProblemError(Exception):
    """An HTTP error answered as problem+json; raise it anywhere in a request."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        errors: Iterable[dict[str, Any]] = (),
        headers: dict[str, str] | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.slug, self.title, self.detail = status, slug, title, detail
        self.errors = list(errors)
        self.headers = headers or {}
        self.extensions = extensions or {}  # RFC 9457 extension members (error_id of a 500)

    def body(self) -> dict[str, Any]:
        return {
            "type": TYPE_PREFIX + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "errors": self.errors,
            **self.extensions,
        }


def unavailable(slug: str, title: str, detail: str, retry_after_s: int = 1) -> ProblemError:
    return ProblemError(503, slug, title, detail, headers={"Retry-After": str(retry_after_s)})


# The engine's domain errors as problems: status, type (after TYPE_PREFIX), title ({what} is the
# error's subject: "model", "context set", "network", ...) and Retry-After seconds for a 503.
PROBLEMS: dict[type[EngineError], tuple[int, str, str, int | None]] = {
    InvalidInput: (422, "validation-error", "Invalid request", None),
    InputRejected: (422, "input-rejected", "Input rejected by the model", None),
    GPContextTooLarge: (422, "gp-too-large", "Context too large for the on-demand GP", None),
    NotFound: (404, "not-found", "Unknown {what}", None),
    TooLarge: (413, "too-large", "Request too large", None),
    NonFiniteAnswer: (500, "non-finite-answer", "Non-finite answer", None),
    QueueFull: (503, "overloaded", "Server busy", 1),
    # 429, not 503: the server still answers model predictions; a proxy must not take the replica out of rotation
    GPBusy: (429, "gp-busy", "Exact GP busy", 1),
    GPTimeout: (504, "gp-timeout", "Exact GP stopped at its time limit", None),
    GPWorkerLost: (503, "gp-unavailable", "Exact GP worker stopped", 1),
    StoreUnavailable: (503, "store-unavailable", "{What} store unavailable", 5),
}


def problem_of(exc: EngineError) -> ProblemError:
    """The problem answering a domain error (PROBLEMS, by its class or the nearest listed base)."""
    kind = next(k for k in type(exc).__mro__ if k in PROBLEMS)
    status, slug, title, retry_after_s = PROBLEMS[kind]
    retry_after_s = getattr(exc, "retry_after_s", retry_after_s)  # an error may know better (GPBusy)
    what = getattr(exc, "what", "")
    return ProblemError(
        status,
        slug,
        title.format(what=what, What=what.capitalize()),
        exc.detail,
        exc.entries,
        headers=None if retry_after_s is None else {"Retry-After": str(retry_after_s)},
    )


def problem_response(problem: ProblemError) -> Response:
    return Response(
        orjson.dumps(problem.body()), status_code=problem.status, media_type=PROBLEM_MEDIA_TYPE, headers=problem.headers
    )


def _expected_from(err: dict[str, Any]) -> str | None:
    """Human wording of the constraint pydantic checked (range, length, type)."""
    ctx = err.get("ctx") or {}
    if "expected" in ctx:
        return str(ctx["expected"])
    if err.get("type") == "json_invalid" and fast_json.too_deep(str(ctx.get("error", ""))):
        return f"JSON nested at most {fast_json.MAX_JSON_DEPTH} levels deep"
    if err.get("type") == "json_invalid" and ctx.get("error") == fast_json.TOO_MANY_DIGITS:
        return f"JSON numbers of at most {fast_json.MAX_INT_DIGITS} digits"
    bounds = [
        f"{name} {ctx[key]}" for key, name in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")) if key in ctx
    ]
    if bounds:
        return "a number " + " and ".join(bounds)
    if "pattern" in ctx:
        return f"a string matching {ctx['pattern']}"
    if "min_length" in ctx or "max_length" in ctx:
        return f"length between {ctx.get('min_length', 0)} and {ctx.get('max_length', 'any')}"
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "no such field: unknown fields are refused (see the schema's properties)"
    if kind == "finite_number":
        return "a finite number (no NaN or infinity)"
    if kind == "float_type" and "input" in err and err["input"] is None:  # a null where a value must be given
        return "a number: every value here must be given (null marks a value not measured only in a context's x or y)"
    if kind in ("float_type", "float_parsing"):  # a string, list or object where a load or reading goes
        return "a finite number (a JSON number)"
    if kind in ("model_type", "model_attributes_type", "dict_type"):  # pydantic's own names for "an object"
        return "a JSON object"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return kind.removesuffix("_type").removesuffix("_parsing")
    return None


def _field_path(loc: Iterable[Any]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _problem_entry(err: dict[str, Any], location: str | None) -> dict[str, Any]:
    """One pydantic error in the problem shape."""
    loc = ([location] if location else []) + list(err.get("loc", ()))
    where = str(loc.pop(0)) if loc and loc[0] in ("body", "query", "path", "header") else "body"
    message = err.get("msg", "invalid")
    if err.get("type") == "float_type" and "input" in err and err["input"] is None:
        message = "is null (missing): queries and options must be complete"
    if err.get("type") == "json_invalid":  # FastAPI's loc is a character offset, not a field: name the body
        loc, reason = [], (err.get("ctx") or {}).get("error")
        message = f"Invalid JSON: {reason}" if reason and reason not in message else message
    return field_error(_field_path(loc) or where, message, _expected_from(err), where)


def validation_problem(pydantic_errors: Iterable[dict[str, Any]], location: str | None = None) -> ProblemError:
    """Pydantic's error list, renamed into the problem shape (one entry per bad field): the first
    MAX_LISTED_ERRORS of them, the rest only counted (a body of 10,000 bad cells must not answer with, or
    spend its time on, 10,000 entries).

    FastAPI's errors start their `loc` with the location ("body", "query", ...); a model validated
    directly (the hot routes) has none, so its `location` is given.
    """
    errors, count = [], 0
    for count, err in enumerate(pydantic_errors, 1):
        if count <= MAX_LISTED_ERRORS:
            errors.append(_problem_entry(err, location))
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5]) or "invalid request"
    if count > 5:
        detail += f"; and {count - 5} more"
    if count > MAX_LISTED_ERRORS:
        detail += f" ({count} errors, the first {MAX_LISTED_ERRORS} listed)"
    return ProblemError(422, "validation-error", "Invalid request", detail, errors)


def install(app: FastAPI) -> None:
    """Register the handlers that give every error the problem shape."""

    @app.exception_handler(ProblemError)
    async def _problem(_: Request, exc: ProblemError) -> Response:
        return problem_response(exc)

    @app.exception_handler(EngineError)
    async def _refused(_: Request, exc: EngineError) -> Response:
        return problem_response(problem_of(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> Response:
        return problem_response(validation_problem(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        slug = {401: "unauthorized", 404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(app, request.url.path, headers.get("Allow", ""))
        problem = ProblemError(exc.status_code, slug, str(exc.detail), str(exc.detail), headers=headers)
        return problem_response(problem)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        return unexpected_response(request.method, request.url.path, exc)


def allowed_methods(app: FastAPI, path: str, fallback: str) -> str:
    """The `Allow` value for a path: every method the schema documents for it (HEAD with GET), not
    only the first matching route's as Starlette names them (GET /{id} hid DELETE /{id}); for a path
    the schema does not document, Starlette's own value."""
    methods: set[str] = set()
    for template, operations in app.openapi()["paths"].items():
        pattern = "".join(
            "[^/]+" if part.startswith("{") else re.escape(part) for part in re.split(r"(\{[^/}]+\})", template)
        )
        if re.fullmatch(pattern, path):
            methods |= {method.upper() for method in operations}
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods)) if methods else fallback


def unexpected_response(method: str, path: str, exc: Exception) -> Response:
    """A 500 problem for an exception nothing else handled (a fault of the service, never the request's):
    the details go to the log only, under an id the answer gives so an operator finds the traceback."""
    error_id = secrets.token_hex(8)
    log.error("unhandled error %s on %s %s", error_id, method, path, exc_info=exc)
    return problem_response(
        ProblemError(
            500,
            "internal-error",
            "Internal server error",
            f"unexpected {type(exc).__name__}; see the server log, error id {error_id}",
            extensions={"error_id": error_id},
        )
    )

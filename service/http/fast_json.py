"""Parse request bodies with orjson (a 4500 x 64 query body is ~5 MB; stdlib json is several
times slower). orjson rejects the NaN/Infinity literals, so such bodies fall back to the stdlib
parser, which accepts them and lets validation answer 422 naming the exact field; so do numbers past a
double's range, which the stdlib parser reads as infinity or, for an integer, up to Python's limit on its digits
(a longer one is a 422 naming `body`, where it was a bare 400). Bytes that are
not UTF-8 are a JSON decode error too (422), like any other malformed body. So is a body nested past
the parser's depth (100,000 brackets made Python's parser raise RecursionError, a generic 400): a 422
naming `body` and MAX_JSON_DEPTH, on these routes as on the hot routes, which decode with `loads` too
(pydantic's own parser, where a body is read by it, stops at its own depth: service.http.problems words both
alike).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import Request
from fastapi.routing import APIRoute

# The request schemas nest a few levels deep; pydantic's JSON parser (hot routes, batch JSON) refuses
# past about 200, orjson past 1024: a body nested deeper than this fits no schema, whichever parser reads it.
MAX_JSON_DEPTH = 200
TOO_DEEP = "nested too deep"  # the decode error's message; problems.py names MAX_JSON_DEPTH for it
# Python reads integers of at most this many digits (4300 unless configured; 0: no limit): a longer one is no
# value of any field, and the body is refused naming it (was a generic 400)
MAX_INT_DIGITS = sys.get_int_max_str_digits()
TOO_MANY_DIGITS = f"an integer of more than {MAX_INT_DIGITS} digits"


def too_deep(message: str) -> bool:
    """Whether a JSON parser's error message (orjson's, pydantic's) is about nesting depth."""
    return "recursion limit" in message or "depth limit" in message or TOO_DEEP in message


def loads(body: bytes) -> Any:
    """The body's JSON value; any failure is a json.JSONDecodeError (FastAPI answers it as a 422 naming `body`, and
    so do the hot routes), never another exception (which FastAPI answers as a bare 400)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if too_deep(str(exc)):  # never hand it to the recursive stdlib parser
            raise json.JSONDecodeError(TOO_DEEP, "", exc.pos) from None
    try:  # NaN, Infinity, or a number past a double's range
        return json.loads(body)
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError(f"body is not UTF-8: {exc.reason}", "", exc.start) from exc
    except RecursionError:  # NaN or Infinity and deep nesting: orjson stopped at the literal first
        raise json.JSONDecodeError(TOO_DEEP, "", 0) from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # Python's own limit on an integer's digits (sys.set_int_max_str_digits)
        raise json.JSONDecodeError(TOO_MANY_DIGITS, "", 0) from None


def decode_error(exc: json.JSONDecodeError) -> dict[str, Any]:
    """The validation error FastAPI makes of a body that is no JSON (fastapi.routing), for the hot routes."""
    return {
        "type": "json_invalid",
        "loc": ("body", exc.pos),
        "msg": "JSON decode error",
        "input": {},
        "ctx": {"error": exc.msg},
    }


class OrjsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class OrjsonRoute(APIRoute):
    """APIRoute whose endpoint sees an OrjsonRequest."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def route_handler(request: Request):
            return await handler(OrjsonRequest(request.scope, request.receive))

        return route_handler

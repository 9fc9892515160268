"""Parse request bodies with orjson (a 4500 x 64 query body is ~5 MB; stdlib json is several
times slower). orjson rejects the NaN/Infinity literals, so such bodies fall back to the stdlib
parser, which accepts them and lets validation answer 422 naming the exact field. Bytes that are
not UTF-8 are a JSON decode error too (422), like any other malformed body. So is a body nested past
the parser's depth (100,000 brackets made Python's parser raise RecursionError, a generic 400): a 422
naming `body` and MAX_JSON_DEPTH, on these routes as on the hot routes, whose pydantic parser stops
at its own depth (service.http.problems words both alike).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import Request
from fastapi.routing import APIRoute

# The request schemas nest a few levels deep; pydantic's JSON parser (hot routes, batch JSON) refuses
# past about 200, orjson past 1024: a body nested deeper than this fits no schema, whichever parser reads it.
MAX_JSON_DEPTH = 200
TOO_DEEP = "nested too deep"  # the decode error's message; problems.py names MAX_JSON_DEPTH for it


def too_deep(message: str) -> bool:
    """Whether a JSON parser's error message (orjson's, pydantic's) is about nesting depth."""
    return "recursion limit" in message or "depth limit" in message or TOO_DEEP in message


class OrjsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                if too_deep(str(exc)):  # never hand it to the recursive stdlib parser
                    raise json.JSONDecodeError(TOO_DEEP, "", exc.pos) from None
                try:
                    self._json = json.loads(body)
                except UnicodeDecodeError as exc:  # FastAPI answers JSONDecodeError as a 422
                    raise json.JSONDecodeError(f"body is not UTF-8: {exc.reason}", "", exc.start) from exc
                except RecursionError:  # NaN or Infinity and deep nesting: orjson stopped at the literal first
                    raise json.JSONDecodeError(TOO_DEEP, "", 0) from None
        return self._json


class OrjsonRoute(APIRoute):
    """APIRoute whose endpoint sees an OrjsonRequest."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def route_handler(request: Request):
            return await handler(OrjsonRequest(request.scope, request.receive))

        return route_handler

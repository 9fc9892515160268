"""Bearer-key auth for /v1: on when GRIDPFN_API_KEYS is set, a no-op otherwise.

Keys are compared with hmac.compare_digest against every configured key (no early exit), and
neither the presented nor the configured keys are ever logged or echoed.
"""
from __future__ import annotations

import hmac

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.http.problems import ProblemError

_bearer = HTTPBearer(auto_error=False, description="GRIDPFN_API_KEYS bearer key (when keys are configured)")


def _matches(presented: str, keys: tuple[str, ...]) -> bool:
    given = presented.encode()
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key.encode())
    return found


def check_bearer(scheme: str | None, presented: str | None, keys: tuple[str, ...]) -> None:
    """401 unless keys are off or `scheme presented` is `Bearer <a configured key>`."""
    if not keys:
        return
    if not scheme or scheme.lower() != "bearer" or not presented or not _matches(presented, keys):
        raise ProblemError(401, "unauthorized", "Unauthorized",
                           "missing or invalid API key: send `Authorization: Bearer <key>`",
                           [{"location": "header", "field": "Authorization", "message": "missing or invalid",
                             "expected": "Bearer <one of the configured API keys>"}],
                           headers={"WWW-Authenticate": 'Bearer realm="gridpfn"'})


def check_authorization_header(value: str | None, keys: tuple[str, ...]) -> None:
    """check_bearer on a raw `Authorization` header value (the hot routes read headers themselves)."""
    scheme, _, presented = (value or "").strip().partition(" ")
    check_bearer(scheme, presented.strip(), keys)


async def require_api_key(request: Request,
                          credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    """FastAPI dependency of every /v1 router."""
    check_bearer(credentials and credentials.scheme, credentials and credentials.credentials,
                 request.app.state.runtime.settings.api_keys)

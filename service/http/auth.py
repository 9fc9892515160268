"""Bearer-key auth for /v1: on when GRIDPFN_API_KEYS (or GRIDPFN_ADMIN_API_KEY) is set, a no-op otherwise.

Keys are compared with hmac.compare_digest against every configured key (no early exit), and
neither the presented nor the configured keys are ever logged or echoed. A valid key names the
caller's tenant (service.engine.tenants), which every route hands to the engine explicitly: the
objects it may read, list, use, cancel or delete are that tenant's (all of them for the admin key);
with keys off the caller is `KEYS_OFF`, one shared space as before tenants.
"""

from __future__ import annotations

import functools
import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.engine.tenants import KEYS_OFF, Tenant, tenant_tag
from service.http.problems import ProblemError

_bearer = HTTPBearer(auto_error=False, description="GRIDPFN_API_KEYS bearer key (when keys are configured)")

Keyring = tuple[tuple[bytes, Tenant], ...]


@functools.lru_cache(maxsize=8)
def keyring(keys: tuple[str, ...], admin_key: str | None = None) -> Keyring:
    """Every configured key with its tenant (tags derived once, not per request)."""
    ring = [(key.encode(), Tenant(tenant_tag(key))) for key in keys]
    if admin_key:
        ring.append((admin_key.encode(), Tenant(tenant_tag(admin_key), admin=True)))
    return tuple(ring)


def _match(presented: str, ring: Keyring) -> Tenant | None:
    given = presented.encode()
    found = None
    for key, tenant in ring:
        if hmac.compare_digest(given, key) and found is None:
            found = tenant
    return found


def check_bearer(
    scheme: str | None, presented: str | None, keys: tuple[str, ...], admin_key: str | None = None
) -> Tenant:
    """The caller's tenant: `KEYS_OFF` when no key is configured, else that of `Bearer <a configured key>`
    (401 for anything else)."""
    ring = keyring(keys, admin_key)
    if not ring:
        return KEYS_OFF
    tenant = _match(presented, ring) if scheme and scheme.lower() == "bearer" and presented else None
    if tenant is None:
        raise ProblemError(
            401,
            "unauthorized",
            "Unauthorized",
            "missing or invalid API key: send `Authorization: Bearer <key>`",
            [
                {
                    "location": "header",
                    "field": "Authorization",
                    "message": "missing or invalid",
                    "expected": "Bearer <one of the configured API keys>",
                }
            ],
            headers={"WWW-Authenticate": 'Bearer realm="gridpfn"'},
        )
    return tenant


def check_authorization_header(value: str | None, keys: tuple[str, ...], admin_key: str | None = None) -> Tenant:
    """check_bearer on a raw `Authorization` header value (the hot routes read headers themselves)."""
    scheme, _, presented = (value or "").strip().partition(" ")
    return check_bearer(scheme, presented.strip(), keys, admin_key)


async def require_api_key(
    request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> Tenant:
    """FastAPI dependency of every /v1 router; routes that touch owned objects take its Tenant as a parameter."""
    settings = request.app.state.runtime.settings
    return check_bearer(
        credentials and credentials.scheme,
        credentials and credentials.credentials,
        settings.api_keys,
        settings.admin_api_key,
    )


TenantDep = Annotated[Tenant, Depends(require_api_key)]  # a route's `tenant` parameter: who is asking

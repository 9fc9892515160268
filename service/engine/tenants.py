"""Tenants: whose context set, batch job or uploaded network an object is.

With API keys configured every key is a tenant, named by a tag derived from the key (a domain-separated
sha256, truncated): the tag, never the key, is what the store holds. An object belongs to the tenant
that made it; another tenant is told it does not exist (404, the same answer as for an id that never
existed), and its owner-scoped ids mix the tag in, so no other key can compute them. The admin key
(GRIDPFN_ADMIN_API_KEY) is a tenant that also sees everyone's objects. Without keys there is one
shared space (`KEYS_OFF`, tag None): the ids and what everyone sees are exactly as before tenants.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

TAG_HEX = 32  # 128 bits: no collisions between keys, and nothing to learn about a key from its tag


@dataclass(frozen=True, slots=True)
class Tenant:
    """The caller of a request: `tag` names its objects (None: keys are off); `admin` sees every tenant's."""

    tag: str | None
    admin: bool = False

    def sees(self, owner: str | None) -> bool:
        """Whether an object made by the tenant tagged `owner` exists for this caller."""
        return self.tag is None or self.admin or owner == self.tag


KEYS_OFF = Tenant(None)


def tenant_tag(key: str) -> str:
    """The stored name of the tenant holding `key` (the key itself is never stored or logged)."""
    return hashlib.sha256(b"gridpfn-tenant-v1\0" + key.encode()).hexdigest()[:TAG_HEX]


def scoped_id(content_id: str, owner: str | None, kind: str) -> str:
    """An owner's id for content-addressed data: the content id itself when keys are off (as before
    tenants), else sha256 over the kind, the owner's tag and the content id (same data, same owner ->
    same id and shared caches; another owner -> another id that cannot be computed without the key)."""
    if owner is None:
        return content_id
    return hashlib.sha256(f"gridpfn-{kind}-owner-v1\0{owner}\0{content_id}".encode()).hexdigest()

"""Context sets: content-addressed ids, the byte format they are stored in, and the store of them.

The id is the sha256 of the network's name, the shapes and the canonical bytes (float64
little-endian, C order), so the same data uploaded twice (or sent inline) gets the same id and
shares every cache, while the same numbers on two networks are two sets. A sparse context (NaN
where a value was not measured: service.engine.sparse) also hashes where its values are missing,
every NaN written as the one canonical NaN, and its typical loads when given, so a missing value
never collides with a number and a full context keeps the id it always had. The network (a built-in
name or an uploaded network's id) is kept in the set's `source`. With API keys configured the set
belongs to the tenant that stored it (service.engine.tenants): its id mixes in the tenant's tag
(same data, same tenant -> same id; another tenant gets another id) and another tenant is told it
does not exist.
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import orjson

from service.engine.errors import NotFound, StoreUnavailable
from service.engine.sparse import Metering, missing_in
from service.engine.store import Store
from service.engine.tenants import KEYS_OFF, Tenant, scoped_id

KEY_PREFIX = "gridpfn:ctx:"
_MAGIC = b"GPFNCTX1"
_CANON = np.dtype("<f8")


def canonical(a: Any) -> np.ndarray:
    """float64 little-endian C-contiguous copy: the one byte layout that is hashed and stored (every NaN,
    a missing value, as numpy's one quiet NaN, whatever its sign or payload was)."""
    out = np.ascontiguousarray(np.asarray(a, dtype=_CANON))
    missing = np.isnan(out)
    if missing.any():
        out = np.where(missing, np.nan, out).astype(_CANON)
    return out


DEFAULT_NETWORK = "ieee33"  # the network of a set stored before sets named theirs


def context_id(
    x: np.ndarray, y: np.ndarray, network: str = DEFAULT_NETWORK, typical_loads: np.ndarray | None = None
) -> str:
    """sha256 over the network, the shapes and the canonical bytes of x then y; a sparse context's
    missing-value masks and its typical loads follow (a full one hashes as it always did)."""
    x, y = canonical(x), canonical(y)
    digest = hashlib.sha256(b"gridpfn-context-v2")
    digest.update(network.encode() + b"\0")
    digest.update(struct.pack("<4q", *x.shape, *y.shape))
    digest.update(x.tobytes())
    digest.update(y.tobytes())
    if missing_in(x, y) is not None:
        digest.update(b"missing\0" + np.packbits(np.isnan(x)).tobytes() + np.packbits(np.isnan(y)).tobytes())
    if typical_loads is not None:
        digest.update(b"typical\0" + canonical(typical_loads).tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class ContextSet:
    """A context (x (n, d), y (n, k); NaN where not measured) with its id, where it came from, its owner's
    tenant tag (None: keys off) and the typical loads (d,) that stand in for unmetered ones (None: not given,
    service.engine.sparse.typical_loads)."""

    x: np.ndarray
    y: np.ndarray
    id: str
    source: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    owner: str | None = None
    typical_loads: np.ndarray | None = None

    @classmethod
    def build(
        cls,
        x: Any,
        y: Any,
        source: dict[str, Any] | None = None,
        network: str = DEFAULT_NETWORK,
        owner: str | None = None,
        typical_loads: Any = None,
    ) -> ContextSet:
        x, y = canonical(x), canonical(y)
        typical = None if typical_loads is None else canonical(typical_loads)
        source = {**(source or {"kind": "inline"}), "network": network}
        return cls(
            x=x,
            y=y,
            id=scoped_id(context_id(x, y, network, typical), owner, "context"),
            source=source,
            created_at=time.time(),
            owner=owner,
            typical_loads=typical,
        )

    @cached_property
    def missing(self) -> str | None:
        """'x', 'y' or 'x and y': where the context has missing values; None for a full context."""
        return missing_in(self.x, self.y)

    @cached_property
    def metering(self) -> Metering:
        """Per output bus: the context's readings of it (computed once per set, read by every answer)."""
        return Metering.of(self.y)

    @property
    def network(self) -> str:
        return str(self.source.get("network") or DEFAULT_NETWORK)

    @property
    def rows(self) -> int:
        return int(self.x.shape[0])

    def to_bytes(self) -> bytes:
        meta = {"x": list(self.x.shape), "y": list(self.y.shape), "source": self.source, "created_at": self.created_at}
        if self.owner is not None:
            meta["owner"] = self.owner
        if self.typical_loads is not None:
            meta["typical_loads"] = self.typical_loads.tolist()
        packed = orjson.dumps(meta)
        return _MAGIC + struct.pack("<I", len(packed)) + packed + self.x.tobytes() + self.y.tobytes()

    @classmethod
    def from_bytes(cls, cid: str, blob: bytes) -> ContextSet:
        if blob[:8] != _MAGIC:
            raise ValueError(f"context set {cid}: unknown storage format")
        (meta_len,) = struct.unpack_from("<I", blob, 8)
        meta = orjson.loads(blob[12 : 12 + meta_len])
        start = 12 + meta_len
        nx = int(np.prod(meta["x"]))
        x = np.frombuffer(blob, dtype=_CANON, count=nx, offset=start).reshape(meta["x"]).copy()
        y = np.frombuffer(blob, dtype=_CANON, offset=start + nx * 8).reshape(meta["y"]).copy()
        typical = meta.get("typical_loads")
        return cls(
            x=x,
            y=y,
            id=cid,
            source=meta["source"],
            created_at=meta["created_at"],
            owner=meta.get("owner"),
            typical_loads=None if typical is None else canonical(typical),
        )


class ContextSets:
    """Context sets kept in a Store under `gridpfn:ctx:<id>` with a TTL, the recently used ones also
    in memory (`stored`)."""

    def __init__(self, store: Store, ttl_s: int, recheck_s: float = 0.0, keep: int = 32) -> None:
        self.store, self.ttl_s = store, ttl_s
        self.recheck_s, self.keep = recheck_s, keep
        self.recent: OrderedDict[str, tuple[ContextSet, float]] = OrderedDict()  # id -> (set, checked at)
        self._rechecking: set[str] = set()  # context ids whose existence one request is asking the store now

    async def put(self, ctx: ContextSet) -> None:
        await self.store.set(KEY_PREFIX + ctx.id, ctx.to_bytes(), self.ttl_s)

    async def get(self, cid: str) -> ContextSet | None:
        blob = await self.store.get(KEY_PREFIX + cid)
        return None if blob is None else ContextSet.from_bytes(cid, blob)

    async def ttl(self, cid: str) -> int | None:
        return await self.store.ttl(KEY_PREFIX + cid)

    async def delete(self, cid: str, tenant: Tenant = KEYS_OFF) -> bool:
        """True when a set `tenant` sees existed and is now deleted (another tenant's is left alone: False)."""
        if tenant.tag is not None:
            ctx = await self.get(cid)
            if ctx is None or not tenant.sees(ctx.owner):
                return False
        return await self.store.delete(KEY_PREFIX + cid)

    def forget(self, cid: str) -> None:
        """Drop the in-memory copy (the set was deleted here)."""
        self.recent.pop(cid, None)

    async def stored(self, cid: str, location: str = "body", tenant: Tenant = KEYS_OFF) -> ContextSet:
        """The stored set, when `tenant` sees it (another tenant's is NotFound, as if it never existed).

        Recently used ones come from memory, so a hot context is not re-read and
        re-decoded from the store on every request. Whether it still exists in the store (TTL) is
        asked again once its copy is older than `recheck_s` (GRIDPFN_CONTEXT_RECHECK_S), by one request
        at a time: the others keep using the copy meanwhile, so a hot context costs one store round trip
        per period, not one per request in flight when the period ends (a burst of up to a connection each)."""
        now = time.monotonic()
        try:
            ctx, checked = self.recent.get(cid, (None, now))
            if ctx is not None and now - checked >= self.recheck_s and cid not in self._rechecking:
                self._rechecking.add(cid)
                try:
                    if await self.ttl(cid) is None:
                        self.recent.pop(cid, None)  # deleted or expired in the store: gone here too
                        ctx = None
                finally:
                    self._rechecking.discard(cid)
                checked = now
            if ctx is None:
                ctx = await self.get(cid)
        except StoreUnavailable as exc:
            raise exc.about(hint="; send the context inline instead, or retry") from exc
        if ctx is None or not tenant.sees(ctx.owner):
            raise NotFound("context set", cid, "context_id", location)
        self.recent[cid] = (ctx, checked)
        self.recent.move_to_end(cid)
        while len(self.recent) > self.keep:
            self.recent.popitem(last=False)
        return ctx

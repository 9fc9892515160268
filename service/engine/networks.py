"""Networks: the built-in feeders and uploaded ones, content-addressed, kept in the store.

An upload (pandapower JSON, or a MATPOWER case as .m text or .mat bytes) is validated and
snapshotted by `gridsim.feeders`; its id is the sha256 of the snapshot's canonical form (every
modelled number, bus names and coordinates), so the same feeder uploaded twice, in either format
where they agree, gets one id. Stored under `gridpfn:net:<id>` (the description) and
`gridpfn:netsrc:<id>` (the normalised pandapower JSON, to rebuild the snapshot) with the context
sets' TTL; the built-ins are always there and never stored.

Requests name their network by that id; `Networks.resolve` gives the gridsim `Network` behind it
(an upload rebuilt once per process from its stored JSON, then kept in a small LRU), which every
width check, model pick and power flow uses.
"""

from __future__ import annotations

import functools
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from service.constants import SHA256_ID
from service.engine.errors import InvalidInput, NotFound
from service.engine.store import Store
from service.engine.tenants import Tenant, scoped_id

UPLOAD_ID = re.compile(SHA256_ID)
RESOLVED_KEEP = 16  # uploaded networks kept rebuilt in process (a rebuild runs a base-load power flow)
KEY_PREFIX = "gridpfn:net:"
SOURCE_PREFIX = "gridpfn:netsrc:"
FORMATS = ("pandapower-json", "matpower")


def detect_format(data: bytes, filename: str | None) -> str:
    """pandapower JSON or MATPOWER, from the file name's suffix or else the bytes themselves."""
    suffix = (filename or "").lower().rpartition(".")[2] if filename and "." in filename else ""
    if suffix == "json":
        return "pandapower-json"
    if suffix in ("m", "mat"):
        return "matpower"
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        return "pandapower-json"
    if data.startswith(b"MATLAB") or b"mpc" in data[:65536]:
        return "matpower"
    raise InvalidInput(
        "body",
        "neither pandapower JSON nor a MATPOWER case",
        "pandapower.to_json output, or a MATPOWER case (.m text with mpc.bus/mpc.branch/mpc.gen, or .mat)",
    )


def summary(info: dict[str, Any], ttl: int | None) -> dict[str, Any]:
    return {
        "id": info["id"],
        "title": info.get("title", ""),
        "kind": info["kind"],
        "n_buses": info["n_buses"],
        "n_loads": len(info["loads"]),
        "n_features": len(info["features"]),
        "n_outputs": len(info["outputs"]),
        "layout": info["layout"],
        "created_at": info.get("created_at"),
        "expires_in_s": ttl,
    }


def snapshot_upload(data: bytes, filename: str | None) -> tuple[dict[str, Any], str]:
    """(description, normalised pandapower JSON) of an upload; a bad network is an InvalidInput naming the problem.

    Runs in a worker thread (a power flow at base load and the layout)."""
    from gridsim.feeders import NetworkError, describe, from_matpower, from_pandapower_json

    fmt = detect_format(data, filename)
    try:
        net = from_pandapower_json(data) if fmt == "pandapower-json" else from_matpower(data)
    except NetworkError as exc:
        raise InvalidInput(exc.field, exc.problem, exc.expected) from exc
    info = {"id": net.name, "kind": "uploaded", "format": fmt, "created_at": time.time(), **describe(net)}
    return info, net.source_json


@functools.cache
def built_in(name: str) -> dict[str, Any]:
    """Description of a built-in network (its id is its name)."""
    import gridsim
    from gridsim.feeders import describe

    return {"id": name, "kind": "built-in", "format": "built-in", "created_at": None, **describe(gridsim.network(name))}


def built_in_names() -> tuple[str, ...]:
    from gridsim import KNOWN_NETWORKS

    return KNOWN_NETWORKS


def _rebuild(source_json: bytes, network_id: str) -> Any:
    from gridsim.feeders import from_pandapower_json

    return from_pandapower_json(source_json, name=network_id)


def unknown_network(name: str, field: str) -> InvalidInput:
    return InvalidInput(
        field,
        f"no network {name!r}",
        f"a built-in network ({', '.join(built_in_names())}) or the id of an uploaded one (POST /v1/networks)",
    )


class Networks:
    """Uploaded networks in a Store with a TTL (the built-ins live in gridsim), and their gridsim
    `Network`s for requests (`resolve`).

    An upload belongs to the tenant that made it (service.engine.tenants): its id is the content id
    mixed with the tenant's tag (the content id itself when keys are off), the description keeps the
    tag under `owner`, and every read, list and use by another tenant finds nothing (NotFound, None).
    The built-ins are everyone's."""

    def __init__(self, store: Store, ttl_s: int, run: Callable[..., Awaitable[Any]] | None = None) -> None:
        self.store, self.ttl_s, self.run = store, ttl_s, run
        self.resolved: OrderedDict[str, tuple[Any, str | None]] = OrderedDict()  # id -> (Network, owner)

    async def resolve(self, network_id: str, field: str = "network", location: str = "body", *, tenant: Tenant) -> Any:
        """The gridsim Network named by a request: a built-in, or an upload `tenant` sees (NotFound when
        it is not stored or is another tenant's)."""
        import gridsim

        if network_id in built_in_names():
            return gridsim.network(network_id)
        if not UPLOAD_ID.match(network_id):
            raise unknown_network(network_id, field)
        entry = self.resolved.get(network_id)
        if entry is None:  # keys on: the owner is checked before anything is rebuilt for this caller
            info = None if tenant.tag is None else await self.get(network_id, tenant=None)
            owner = None if info is None else info.get("owner")
            if tenant.tag is not None and (info is None or not tenant.sees(owner)):
                raise NotFound("network", network_id, field, location)
            source = await self.store.get(SOURCE_PREFIX + network_id)
            if source is None:
                raise NotFound("network", network_id, field, location)
            net = await self.run(_rebuild, source, network_id) if self.run else _rebuild(source, network_id)
            entry = self.resolved[network_id] = (net, owner)
            while len(self.resolved) > RESOLVED_KEEP:
                self.resolved.popitem(last=False)
        if not tenant.sees(entry[1]):
            raise NotFound("network", network_id, field, location)
        self.resolved.move_to_end(network_id)
        return entry[0]

    async def keep(self, network_id: str) -> None:
        """Restart an upload's TTL (a context set was just stored on it, and needs it as long)."""
        if network_id in built_in_names():
            return
        for prefix in (SOURCE_PREFIX, KEY_PREFIX):
            value = await self.store.get(prefix + network_id)
            if value is not None:
                await self.store.set(prefix + network_id, value, self.ttl_s)

    async def put(self, info: dict[str, Any], source_json: str, *, tenant: Tenant) -> dict[str, Any]:
        """Store an upload (`info` as snapshot_upload describes it, its id the content id) as `tenant`'s;
        returns the description clients see, under the id requests name it by (scoped to the tenant)."""
        network_id = scoped_id(info["id"], tenant.tag, "network")
        public = {**info, "id": network_id, "name": network_id} if network_id != info["id"] else info
        stored = {**public, "owner": tenant.tag} if tenant.tag is not None else public
        await self.store.set(SOURCE_PREFIX + network_id, source_json.encode(), self.ttl_s)
        await self.store.set(KEY_PREFIX + network_id, orjson.dumps(stored), self.ttl_s)
        self.resolved.pop(network_id, None)
        return public

    async def get(self, network_id: str, *, tenant: Tenant | None) -> dict[str, Any] | None:
        """An upload's description, when `tenant` sees it (None: missing or another tenant's; tenant None:
        whoever owns it, with its `owner` tag, for the service's own use)."""
        blob = await self.store.get(KEY_PREFIX + network_id)
        if blob is None:
            return None
        info: dict[str, Any] = orjson.loads(blob)
        if tenant is None:
            return info
        if not tenant.sees(info.get("owner")):
            return None
        info.pop("owner", None)
        return info

    async def ttl(self, network_id: str) -> int | None:
        return await self.store.ttl(KEY_PREFIX + network_id)

    async def ids(self) -> list[str]:
        return [key[len(KEY_PREFIX) :] for key in await self.store.keys(KEY_PREFIX)]

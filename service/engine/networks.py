"""Networks: the built-in feeders and uploaded ones, content-addressed, kept in the store.

An upload (pandapower JSON, or a MATPOWER case as .m text or .mat bytes) is validated and
snapshotted by `gridsim.feeders`; its id is the sha256 of the snapshot's canonical form (every
modelled number, bus names and coordinates), so the same feeder uploaded twice, in either format
where they agree, gets one id. Stored under `gridpfn:net:<id>` (the description) and
`gridpfn:netsrc:<id>` (the normalised pandapower JSON, to rebuild the snapshot) with the context
sets' TTL; the built-ins are always there and never stored.

Requests name their network by that id; `Networks.resolve` gives the gridsim `Network` behind it
(an upload rebuilt once per process from its stored JSON, numbered as its description is: a MATPOWER
case by its own bus numbers, `rebuild_offset`; then kept in a small LRU), which every width check,
model pick and power flow uses; a batch job keeps the upload's JSON, and that numbering in its spec.
`Networks.delete` removes an upload from the store; every server process sharing that store stops
answering from its rebuilt copy within `recheck_s` (GRIDPFN_CONTEXT_RECHECK_S, as for context sets),
the deleting process at once.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from service.constants import SHA256_ID
from service.engine.errors import InvalidInput, NotFound, StoreUnavailable
from service.engine.store import Store
from service.engine.tenants import Tenant, scoped_id

if TYPE_CHECKING:
    from gridsim.errors import NetworkError

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
    from gridsim.feeders import NetworkError, describe, from_matpower, from_pandapower_json, numbering
    from gridsim.pandapower_json import read_pandapower_json

    fmt = detect_format(data, filename)
    try:
        net = from_pandapower_json(data) if fmt == "pandapower-json" else from_matpower(data)
    except NetworkError as exc:
        raise InvalidInput(exc.field, exc.problem, exc.expected) from exc
    try:  # what is stored is what every later use rebuilds from (`_rebuild`): it must pass that reader too
        read_pandapower_json(net.source_json)
    except NetworkError as exc:
        raise InvalidInput(
            exc.field, f"the network as it would be stored (pandapower JSON) is refused: {exc.problem}", exc.expected
        ) from exc
    info = {"id": net.name, "kind": "uploaded", "format": fmt, "created_at": time.time(), **describe(net)}
    info["numbering"] = numbering(net, uploaded=True)  # says why its bus numbers are, or are not, a built-in's
    return info, net.source_json


_BUILT_IN: dict[str, dict[str, Any]] = {}  # name -> description, computed once per process


def built_in(name: str) -> dict[str, Any]:
    """Description of a built-in network (its id is its name); computed once (in a worker thread: it builds the
    network), then the same dict for every caller (`built_in_ready`)."""
    if name not in _BUILT_IN:
        import gridsim
        from gridsim.feeders import describe

        described = describe(gridsim.network(name))
        _BUILT_IN[name] = {"id": name, "kind": "built-in", "format": "built-in", "created_at": None, **described}
    return _BUILT_IN[name]


def built_in_ready(name: str) -> dict[str, Any] | None:
    """A built-in's description when already computed (the lifespan's warm-up computes them all), else None: the
    list and read routes serve it without waiting for a worker thread behind other keys' model work."""
    return _BUILT_IN.get(name)


def built_in_names() -> tuple[str, ...]:
    from gridsim import KNOWN_NETWORKS

    return KNOWN_NETWORKS


def rebuild_offset(info: dict[str, Any] | None) -> int | None:
    """What `_rebuild` adds to a stored upload's pandapower bus indices, so that every use numbers its buses as
    its description (the upload's answer, GET /v1/networks/{id}) does: a MATPOWER case's own numbers
    (gridsim.feeders.MATPOWER_OFFSET; its stored JSON, read alone, is numbered from 0); None for pandapower JSON,
    numbered by the reader as at the upload (by index, or as the built-in it is unchanged)."""
    from gridsim.feeders import MATPOWER_OFFSET

    return MATPOWER_OFFSET if info is not None and info.get("format") == "matpower" else None


def _rebuild(source_json: bytes, network_id: str, number_offset: int | None = None) -> Any:
    from gridsim.feeders import from_pandapower_json

    return from_pandapower_json(source_json, name=network_id, number_offset=number_offset)


def unusable_network(name: str, reason: NetworkError, field: str, location: str) -> InvalidInput:
    """A stored upload whose rebuild is refused (`reason`: stored by a version that read uploads more leniently, say
    a MATPOWER line with a negative resistance): no use of it can be answered, which the caller is told, not a 500."""
    return InvalidInput(
        field,
        f"network {name!r} is stored but cannot be used: rebuilding it is refused ({reason.field}: {reason.problem})",
        f"a network the service can rebuild: delete this one (DELETE /v1/networks/{name}), correct the feeder"
        + (f" ({reason.field}: {reason.expected})" if reason.expected else "")
        + " and upload it again",
        location,
    )


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
    tag under `owner`, and every read, list, use and delete by another tenant finds nothing (NotFound,
    None). So two keys uploading the same file hold two ids and two stored copies, and one deleting its
    own never touches the other's. The built-ins are everyone's."""

    def __init__(
        self,
        store: Store,
        ttl_s: int,
        run: Callable[..., Awaitable[Any]] | None = None,
        recheck_s: float = 0.0,
    ) -> None:
        self.store, self.ttl_s, self.run, self.recheck_s = store, ttl_s, run, recheck_s
        # id -> (Network, owner, when the store last said it exists (monotonic))
        self.resolved: OrderedDict[str, tuple[Any, str | None, float]] = OrderedDict()
        self._rechecking: set[str] = set()  # ids whose existence one request is asking the store now

    async def resolve(self, network_id: str, field: str = "network", location: str = "body", *, tenant: Tenant) -> Any:
        """The gridsim Network named by a request: a built-in, or an upload `tenant` sees (NotFound when
        it is not stored or is another tenant's).

        A rebuilt upload is kept in process; whether it is still stored (deleted by another server
        process, or expired) is asked again once that copy is older than `recheck_s`, by one request at a
        time, as ContextSets.stored does: a deleted upload stops being answered everywhere within that
        time, for one store round trip per period rather than one per request. An upload whose rebuild is
        refused (`unusable_network`) is an InvalidInput naming `field`, its refusal kept as a rebuilt copy is."""
        import gridsim
        from gridsim.errors import NetworkError

        if network_id in built_in_names():
            return gridsim.network(network_id)
        if not UPLOAD_ID.match(network_id):
            raise unknown_network(network_id, field)
        entry = self.resolved.get(network_id)
        if entry is not None and not await self._still_stored(network_id, entry):
            self.resolved.pop(network_id, None)
            entry = None
        if entry is None:  # keys on: the owner is checked before anything is rebuilt for this caller
            # the description also says how the upload is numbered (`rebuild_offset`): gone, the upload is
            # deleted or expired (delete removes it first)
            info = await self.get(network_id, tenant=None)
            owner = None if info is None else info.get("owner")
            if info is None or (tenant.tag is not None and not tenant.sees(owner)):
                raise NotFound("network", network_id, field, location)
            source = await self.store.get(SOURCE_PREFIX + network_id)
            if source is None:
                raise NotFound("network", network_id, field, location)
            offset = rebuild_offset(info)
            try:
                net = (
                    await self.run(_rebuild, source, network_id, offset)
                    if self.run
                    else _rebuild(source, network_id, offset)
                )
            except NetworkError as exc:  # kept as the entry, so that the next request is refused without a rebuild
                net = exc
            entry = self.resolved[network_id] = (net, owner, time.monotonic())
            while len(self.resolved) > RESOLVED_KEEP:
                self.resolved.popitem(last=False)
        if not tenant.sees(entry[1]):
            raise NotFound("network", network_id, field, location)
        self.resolved.move_to_end(network_id)
        if isinstance(entry[0], NetworkError):
            raise unusable_network(network_id, entry[0], field, location)
        return entry[0]

    async def _still_stored(self, network_id: str, entry: tuple[Any, str | None, float]) -> bool:
        """False when the store says the upload is gone; True while its copy is younger than `recheck_s`,
        while another request is asking, or when the store cannot be reached (the copy is the upload's
        exact data, so requests on it go on; the next period asks again)."""
        if time.monotonic() - entry[2] < self.recheck_s or network_id in self._rechecking:
            return True
        self._rechecking.add(network_id)
        try:
            gone = await self.store.ttl(KEY_PREFIX + network_id) is None
        except StoreUnavailable:
            gone = False
        finally:
            self._rechecking.discard(network_id)
        if not gone and network_id in self.resolved:
            self.resolved[network_id] = (entry[0], entry[1], time.monotonic())
        return not gone

    async def for_context(self, network_id: str, context_id: str, *, tenant: Tenant) -> Any:
        """The network a stored context set was made on. The set outlives its upload when the upload is
        deleted (or expires first): that is a NotFound naming `context_id` whose detail says which network
        is gone and what to do, rather than a bare unknown id the caller never sent."""
        try:
            return await self.resolve(network_id, "context_id", tenant=tenant)
        except NotFound as exc:
            exc.detail = (
                f"context set {context_id!r} was stored on network {network_id!r}, which is no longer stored "
                "(deleted or expired): upload the same feeder again (it gets the same id) or use a context set "
                "on another network"
            )
            for entry in exc.entries:
                entry["message"] = f"its network {network_id!r} is deleted or expired"
            raise

    async def delete(self, network_id: str, tenant: Tenant) -> None:
        """Delete `tenant`'s upload: its description and source in the store, and this process's rebuilt
        copy (other processes drop theirs within `recheck_s`; see resolve). A built-in is an InvalidInput
        naming `network_id`; an unknown id or another tenant's upload is NotFound, exactly as an id that
        never existed (one key never learns of another's data). Another tenant's upload of the same file
        has its own id (scoped to its owner) and stays. Context sets stored on the upload are left to
        their TTL: using one is a NotFound naming the deleted network (for_context); a batch job keeps its
        own copy of the upload's JSON in its directory and runs, and is summarised, as before."""
        if network_id in built_in_names():
            raise InvalidInput(
                "network_id",
                "a built-in network cannot be deleted",
                "the id of one of your uploaded networks (GET /v1/networks: kind 'uploaded')",
                "path",
            )
        info = await self.get(network_id, tenant=tenant) if UPLOAD_ID.match(network_id) else None
        if info is None:
            raise NotFound("network", network_id, "network_id")
        # the description first: it is what every process's recheck, the list and GET ask for
        await self.store.delete(KEY_PREFIX + network_id)
        await self.store.delete(SOURCE_PREFIX + network_id)
        self.resolved.pop(network_id, None)

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

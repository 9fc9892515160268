"""Networks: the built-in feeders and uploaded ones, content-addressed, kept in the store.

An upload (pandapower JSON, or a MATPOWER case as .m text or .mat bytes) is validated and
snapshotted by `gridsim.feeders`; its id is the sha256 of the snapshot's canonical form (every
modelled number, bus names and coordinates), so the same feeder uploaded twice, in either format
where they agree, gets one id. Stored under `gridpfn:net:<id>` (the description) and
`gridpfn:netsrc:<id>` (the normalised pandapower JSON, to rebuild the snapshot) with the context
sets' TTL; the built-ins are always there and never stored.
"""
from __future__ import annotations

import functools
import time
from typing import Any

import orjson

from service.engine.errors import InvalidInput
from service.engine.store import Store

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
    raise InvalidInput("body", "neither pandapower JSON nor a MATPOWER case",
                  "pandapower.to_json output, or a MATPOWER case (.m text with mpc.bus/mpc.branch/mpc.gen, or .mat)")


def summary(info: dict[str, Any], ttl: int | None) -> dict[str, Any]:
    return {"id": info["id"], "kind": info["kind"], "n_buses": info["n_buses"], "n_loads": len(info["loads"]),
            "n_features": len(info["features"]), "n_outputs": len(info["outputs"]), "layout": info["layout"],
            "created_at": info.get("created_at"), "expires_in_s": ttl}


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


@functools.lru_cache(maxsize=None)
def built_in(name: str) -> dict[str, Any]:
    """Description of a built-in network (its id is its name)."""
    import gridsim
    from gridsim.feeders import describe

    return {"id": name, "kind": "built-in", "format": "built-in", "created_at": None, **describe(gridsim.network(name))}


def built_in_names() -> tuple[str, ...]:
    from gridsim import KNOWN_NETWORKS

    return KNOWN_NETWORKS


class Networks:
    """Uploaded networks in a Store with a TTL (the built-ins live in gridsim)."""

    def __init__(self, store: Store, ttl_s: int) -> None:
        self.store, self.ttl_s = store, ttl_s

    async def put(self, info: dict[str, Any], source_json: str) -> None:
        await self.store.set(SOURCE_PREFIX + info["id"], source_json.encode(), self.ttl_s)
        await self.store.set(KEY_PREFIX + info["id"], orjson.dumps(info), self.ttl_s)

    async def get(self, network_id: str) -> dict[str, Any] | None:
        blob = await self.store.get(KEY_PREFIX + network_id)
        return None if blob is None else orjson.loads(blob)

    async def ttl(self, network_id: str) -> int | None:
        return await self.store.ttl(KEY_PREFIX + network_id)

    async def ids(self) -> list[str]:
        return [key[len(KEY_PREFIX):] for key in await self.store.keys(KEY_PREFIX)]

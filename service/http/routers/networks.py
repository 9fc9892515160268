"""Networks: upload a feeder (pandapower JSON or MATPOWER), list them, read one with its layout, delete an upload.

Context sets, predict, the GP, /v1/simulate and batch jobs name a network by the id these routes
give (a built-in's name or an upload's sha256); each entry says which models serve it (`models`:
physics-fit serves every network, a checkpoint the network it was trained on).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from gridsim.feeders import MAX_TITLE, normal_title
from service.engine.errors import InvalidInput, NotFound, StoreUnavailable
from service.engine.networks import built_in, built_in_names, built_in_ready, summary
from service.engine.runtime import Runtime
from service.http.auth import TenantDep, require_api_key
from service.http.deps import RuntimeDep, problems
from service.http.responses import json_response

router = APIRouter(
    prefix="/v1/networks", tags=["networks"], dependencies=[Depends(require_api_key)], responses=problems(401, 503)
)
IdPath = Path(pattern=r"^[a-z0-9_]{1,64}$", description="a built-in name (e.g. ieee33) or the sha256 id of an upload")

UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "description": "the feeder: pandapower JSON (`pandapower.to_json(net)`), a MATPOWER case (.m text or .mat), "
        "or either as the multipart field `file` (its suffix .json/.m/.mat names the format)",
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/plain": {"schema": {"type": "string"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            },
        },
    }
}


class _NetworkHead(BaseModel):
    """What names a network, in the list and in its own description."""

    model_config = ConfigDict(extra="allow")

    id: str
    title: str = Field("", description="the net's own name (pandapower net.name) or the upload's `name`")
    kind: str


class NetworkSummary(_NetworkHead):
    n_buses: int
    n_loads: int
    n_features: int
    n_outputs: int
    layout: str
    models: list[str]
    created_at: float | None = None
    expires_in_s: int | None = None


class NetworkList(BaseModel):
    networks: list[NetworkSummary]


class NetworkInfo(_NetworkHead):
    """Buses (number, name, kV, picture x/y), loads, lines (closed, or open ties), transformers, names."""

    slack_bus: int
    n_buses: int
    buses: list[dict[str, Any]]
    loads: list[dict[str, Any]]
    lines: list[dict[str, Any]]
    transformers: list[dict[str, Any]]
    features: list[str]
    outputs: list[str]
    layout: str
    models: list[str]
    expires_in_s: int | None = None


def _store_down(exc: StoreUnavailable) -> StoreUnavailable:
    return exc.about(what="network")


async def _upload(request: Request) -> tuple[bytes, str | None, str | None]:
    """(data, filename, title): a multipart `file` (and optional `name` field), or the raw body (`?name=`)."""
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await request.form()
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InvalidInput("file", "no file in the multipart body", "the feeder as the multipart field 'file'")
        name = form.get("name")
        if name is not None and not isinstance(name, str):
            raise InvalidInput("name", "not a text field", f"a title of at most {MAX_TITLE} characters")
        return await upload.read(), upload.filename, _title(name)
    return await request.body(), None, _title(request.query_params.get("name"))


def _title(name: str | None) -> str | None:
    if name is None:
        return None
    title = normal_title(name)
    if len(title) > MAX_TITLE or not title.isprintable():
        raise InvalidInput("name", "too long or not printable text", f"a title of at most {MAX_TITLE} characters")
    return title


@router.post(
    "",
    status_code=201,
    response_model=NetworkInfo,
    summary="Upload a feeder (pandapower JSON or MATPOWER)",
    responses=problems(400, 413, 422),
    openapi_extra=UPLOAD_BODY,
)
async def create(rt: RuntimeDep, tenant: TenantDep, request: Request) -> Response:
    data, filename, title = await _upload(request)
    if not data.strip():
        raise InvalidInput("body", "empty upload", "pandapower JSON or a MATPOWER case")
    info, source = await rt.uploads.snapshot(data, filename)  # in the upload sandbox (service.engine.upload_sandbox)
    if title is not None:
        info = {**info, "title": title}
    try:
        info = await rt.networks.put(info, source, tenant=tenant)  # its id: the content's, scoped to the tenant
    except StoreUnavailable as exc:
        raise _store_down(exc) from exc
    response = json_response(
        {**info, "models": rt.registry.models_for(info["id"]), "expires_in_s": rt.settings.context_ttl_s}, status=201
    )
    response.headers["Location"] = f"/v1/networks/{info['id']}"
    return response


async def _built_in(rt: Runtime, name: str) -> dict[str, Any]:
    """A built-in's description: as computed at start-up, never queued behind model work (a worker thread only
    when the warm-up did not compute it)."""
    return built_in_ready(name) or await rt.executor.run(built_in, name)


@router.get("", response_model=NetworkList, summary="Built-in and uploaded networks")
async def list_networks(rt: RuntimeDep, tenant: TenantDep) -> Response:
    store = rt.networks
    found = [summary(await _built_in(rt, name), None) for name in built_in_names()]
    try:
        for network_id in await store.ids():
            info = await store.get(network_id, tenant=tenant)
            if info is not None:  # expired between the scan and the read, or another tenant's
                found.append(summary(info, await store.ttl(network_id)))
    except StoreUnavailable as exc:
        raise _store_down(exc) from exc
    return json_response({"networks": [{**entry, "models": rt.registry.models_for(entry["id"])} for entry in found]})


@router.get(
    "/{network_id}",
    response_model=NetworkInfo,
    summary="A network: buses, loads, lines, names, layout",
    responses=problems(404, 422),
)
async def read(rt: RuntimeDep, tenant: TenantDep, network_id: str = IdPath) -> Response:
    models = rt.registry.models_for(network_id)
    if network_id in built_in_names():
        return json_response({**await _built_in(rt, network_id), "models": models, "expires_in_s": None})
    store = rt.networks
    try:
        info = await store.get(network_id, tenant=tenant)
        ttl = None if info is None else await store.ttl(network_id)
    except StoreUnavailable as exc:
        raise _store_down(exc) from exc
    if info is None:
        raise NotFound("network", network_id, "network_id")
    return json_response({**info, "models": models, "expires_in_s": ttl})


@router.delete(
    "/{network_id}",
    status_code=204,
    summary="Delete one of your uploaded networks",
    responses={**problems(404, 422), 204: {"description": "deleted; a built-in network is a 422 naming network_id"}},
)
async def delete(rt: RuntimeDep, tenant: TenantDep, network_id: str = IdPath) -> Response:
    """Deletes the caller's upload at once in this process; every other server process sharing the store
    stops answering from its rebuilt copy within GRIDPFN_CONTEXT_RECHECK_S. Another key's upload of the
    same file has its own id and stays. Context sets stored on it stay until their TTL, and using one is a
    404 naming the deleted network; batch jobs keep their own copy of it and are not affected."""
    try:
        await rt.networks.delete(network_id, tenant)
    except StoreUnavailable as exc:
        raise _store_down(exc) from exc
    return Response(status_code=204)

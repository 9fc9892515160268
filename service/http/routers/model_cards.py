"""The registry's model cards, per model and network.

A checkpoint serves the network it was trained on, so a name may have a version per network; a
width-free model (physics-fit) serves every network. The list says, per model, which networks
and versions (`versions`: network -> served version, "*" for any network; `available`: network ->
every version a request may pin with `version`, newest first); one model's entry adds each
network's card, or, with `?network=`, is that network's card; `?version=` gives an older version's
card (read from the registry, not loaded: operators look before they pin).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from service.engine.errors import InvalidInput, NotFound
from service.http.auth import TenantDep, require_api_key
from service.http.deps import RuntimeDep, problems
from service.http.fast_json import OrjsonRoute
from service.http.schemas import NETWORK_PATTERN, VERSION_PATTERN

router = APIRouter(
    prefix="/v1/models",
    tags=["models"],
    route_class=OrjsonRoute,
    dependencies=[Depends(require_api_key)],
    responses=problems(401),
)


def _card(loaded: Any) -> dict[str, Any]:
    return dict(loaded.card, name=loaded.name, version=loaded.version, device=loaded.device)


def model_entry(registry: Any, name: str) -> dict[str, Any]:
    """One model: the card of its default network's checkpoint (or its general card), the networks it
    serves and the version on each."""
    if name in registry.width_free:
        return {
            **registry.width_free_cards[name],
            "versions": {"*": registry.width_free_cards[name]["version"]},
            "available": registry.available_versions(name),
        }
    versions = registry.versions(name)
    return {
        **_card(registry.models[name]),
        "networks": list(versions),
        "versions": versions,
        "available": registry.available_versions(name),
    }


def _version_card(registry: Any, name: str, network: str | None, version: str) -> dict[str, Any]:
    """The card of `version` on `network` (else on the one network that has it, the default network first);
    404 naming `version` with the versions there are."""
    available = registry.available_versions(name)
    if name in registry.width_free:
        nets = ["*"]  # one version for every network
    elif network is not None:
        nets = [network]
    else:
        nets = sorted(available, key=lambda net: net != _default_network(registry, name))
    for net in nets:
        if version in available.get(net, []):
            if name in registry.width_free:
                return dict(registry.width_free_cards[name], served=True)
            served = registry.checkpoints[(name, net)]
            if served.version == version:
                return dict(_card(served), served=True)
            candidate = registry.available[(name, net)][version]
            return dict(candidate.card, name=name, version=version, served=False)
    missing = NotFound("model version", f"{name} {version}", "version", "query")
    where = f" for network {network!r}" if network is not None else ""
    missing.detail = f"model {name!r} has no version {version!r}{where}; versions: " + "; ".join(
        f"{net}: {', '.join(v)}" for net, v in available.items()
    )
    raise missing


def _default_network(registry: Any, name: str) -> str:
    loaded = registry.models.get(name)
    return str(loaded.card.get("network") or "ieee33") if loaded is not None else "*"


@router.get("", summary="Every served model with the networks it serves, and checkpoints refused with the reason")
async def list_models(rt: RuntimeDep) -> dict:
    return {
        "models": [model_entry(rt.registry, name) for name in rt.registry.names()],
        "refused": dict(rt.registry.errors),
    }


@router.get(
    "/{name}",
    summary="One model: its networks and each network's card (or one network's card)",
    responses=problems(404, 422),
)
async def get_model(
    rt: RuntimeDep,
    tenant: TenantDep,
    name: str,
    network: str | None = Query(
        None, pattern=NETWORK_PATTERN, description="a network's name or id: that network's card"
    ),
    version: str | None = Query(
        None,
        pattern=VERSION_PATTERN,
        description="a version from `available`: its card (`served` says whether it is the one served by default)",
    ),
) -> dict:
    """A network the model does not serve has no card: 404 naming what the model serves."""
    rt.models.known(name, field="name")
    if version is not None:
        if network is not None:
            network = (await rt.networks.resolve(network, "network", "query", tenant=tenant)).name
        return _version_card(rt.registry, name, network, version)
    if network is not None:
        net = await rt.networks.resolve(network, "network", "query", tenant=tenant)
        try:
            return _card(rt.models.get(name, net, field="name"))
        except InvalidInput as exc:
            missing = NotFound("model card", f"{name} on {network}", "network", "query")
            missing.detail = exc.entries[0]["message"]
            raise missing from None
    entry = model_entry(rt.registry, name)
    if name not in rt.registry.width_free:
        entry["cards"] = {net: _card(rt.registry.checkpoints[(name, net)]) for net in entry["versions"]}
    return entry

"""The registry's model cards."""
from __future__ import annotations

from fastapi import APIRouter, Depends

from service.engine.runtime import Runtime
from service.http.auth import require_api_key
from service.http.deps import get_runtime, problems
from service.http.fast_json import OrjsonRoute

router = APIRouter(prefix="/v1/models", tags=["models"], route_class=OrjsonRoute, dependencies=[Depends(require_api_key)],
                   responses=problems(401))


@router.get("", summary="Cards of every loaded model, and checkpoints refused with the reason")
async def list_models(rt: Runtime = Depends(get_runtime)) -> dict:
    cards = [dict(m.card, name=m.name, version=m.version, device=m.device) for m in rt.registry.models.values()]
    return {"models": cards, "refused": dict(rt.registry.errors)}


@router.get("/{name}", summary="One model's card", responses=problems(404))
async def get_model(name: str, rt: Runtime = Depends(get_runtime)) -> dict:
    loaded = rt.models.get(name, field="name")
    return dict(loaded.card, name=loaded.name, version=loaded.version, device=loaded.device)

"""Tenants in the engine: tags that never hold the key, owner-scoped ids, and stores that hide another
tenant's context sets and networks (real MemoryStore; the HTTP isolation is tests/security/test_isolation.py)."""

from __future__ import annotations

import asyncio
import secrets

import numpy as np
import pytest

from service.engine.context_sets import ContextSet, ContextSets, context_id
from service.engine.errors import InvalidInput, NotFound
from service.engine.networks import Networks
from service.engine.store import MemoryStore
from service.engine.tenants import KEYS_OFF, Tenant, scoped_id, tenant_tag
from service.http.auth import check_authorization_header


def test_tags_name_keys_without_holding_them():
    a, b = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    assert tenant_tag(a) == tenant_tag(a) != tenant_tag(b)
    assert a not in tenant_tag(a) and tenant_tag(a) not in a


def test_auth_answers_the_tenant_of_each_key():
    keys, admin = (secrets.token_hex(8), secrets.token_hex(8)), secrets.token_hex(8)
    first = check_authorization_header(f"Bearer {keys[0]}", keys, admin)
    second = check_authorization_header(f"Bearer {keys[1]}", keys, admin)
    boss = check_authorization_header(f"Bearer {admin}", keys, admin)
    assert first == Tenant(tenant_tag(keys[0])) and second == Tenant(tenant_tag(keys[1]))
    assert boss.admin and not first.admin and boss.tag not in (first.tag, second.tag)
    assert check_authorization_header(None, (), None) is KEYS_OFF


def test_visibility():
    a, b = Tenant("a" * 32), Tenant("b" * 32)
    admin = Tenant("c" * 32, admin=True)
    assert a.sees(a.tag) and not a.sees(b.tag) and not a.sees(None)
    assert admin.sees(a.tag) and admin.sees(None) and KEYS_OFF.sees(a.tag) and KEYS_OFF.sees(None)


def test_ids_are_content_ids_without_keys_and_per_owner_with_them():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 64)), rng.normal(size=(5, 32))
    plain = ContextSet.build(x, y)
    assert plain.id == context_id(x, y) and plain.owner is None  # keys off: as before tenants
    a, b = ContextSet.build(x, y, owner="a" * 32), ContextSet.build(x, y, owner="b" * 32)
    assert len({plain.id, a.id, b.id}) == 3 and a.id == ContextSet.build(x, y, owner="a" * 32).id
    assert ContextSet.from_bytes(a.id, a.to_bytes()).owner == a.owner
    assert scoped_id(plain.id, None, "network") == plain.id != scoped_id(plain.id, "a" * 32, "network")


def test_context_sets_hide_another_tenants_set():
    async def scenario():
        a, b, admin = Tenant("a" * 32), Tenant("b" * 32), Tenant("c" * 32, admin=True)
        contexts = ContextSets(MemoryStore(), ttl_s=3600)
        ctx = ContextSet.build(np.ones((4, 64)), np.ones((4, 32)), owner=a.tag)
        await contexts.put(ctx)
        assert (await contexts.stored(ctx.id, tenant=a)).id == ctx.id  # now also in the in-memory copy
        with pytest.raises(NotFound):
            await contexts.stored(ctx.id, tenant=b)
        assert not await contexts.delete(ctx.id, tenant=b)
        assert (await contexts.stored(ctx.id, tenant=admin)).id == ctx.id
        assert (await contexts.get(ctx.id)) is not None  # b's delete left it in the store
        assert await contexts.delete(ctx.id, tenant=a)

    asyncio.run(scenario())


def test_networks_hide_another_tenants_upload():
    async def scenario():
        a, b, admin = Tenant("a" * 32), Tenant("b" * 32), Tenant("c" * 32, admin=True)
        networks = Networks(MemoryStore(), ttl_s=3600)
        content_id = secrets.token_hex(32)
        info = {"id": content_id, "name": content_id, "kind": "uploaded"}
        mine = await networks.put(info, "{}", tenant=a)
        assert mine["id"] == scoped_id(content_id, a.tag, "network") != content_id and "owner" not in mine
        assert (await networks.get(mine["id"], tenant=a))["id"] == mine["id"]
        assert await networks.get(mine["id"], tenant=b) is None
        assert (await networks.get(mine["id"], tenant=admin)) is not None
        assert (await networks.get(mine["id"], tenant=None))["owner"] == a.tag
        with pytest.raises(NotFound):
            await networks.resolve(mine["id"], tenant=b)
        shared = await networks.put(info, "{}", tenant=KEYS_OFF)
        assert shared["id"] == content_id  # keys off: the content id, as before tenants

    asyncio.run(scenario())


def test_networks_delete_only_the_callers_upload():
    """The same content stored by two tenants is two ids and two copies: each delete takes its own only,
    another tenant's delete finds nothing, a built-in is refused naming network_id."""

    async def scenario():
        a, b = Tenant("a" * 32), Tenant("b" * 32)
        store = MemoryStore()
        networks = Networks(store, ttl_s=3600)
        content_id = secrets.token_hex(32)
        info = {"id": content_id, "name": content_id, "kind": "uploaded"}
        mine, theirs = await networks.put(info, "{}", tenant=a), await networks.put(info, "{}", tenant=b)
        assert mine["id"] != theirs["id"]
        with pytest.raises(NotFound):
            await networks.delete(theirs["id"], a)
        await networks.delete(mine["id"], a)
        assert await networks.get(mine["id"], tenant=a) is None and await store.keys("gridpfn:netsrc:") == [
            f"gridpfn:netsrc:{theirs['id']}"
        ]
        assert (await networks.get(theirs["id"], tenant=b))["id"] == theirs["id"]
        with pytest.raises(NotFound):
            await networks.delete(mine["id"], a)  # once only
        with pytest.raises(InvalidInput) as built_in:
            await networks.delete("ieee33", a)
        assert built_in.value.entries[0]["field"] == "network_id"

    asyncio.run(scenario())

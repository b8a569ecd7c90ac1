"""Providers, the addresses they own (plans and payTo token accounts), and their API keys
(only each key's SHA-256 is stored)."""

from __future__ import annotations

import hmac
import secrets
import uuid
from typing import Any

import sqlalchemy as sa

from svcpay.facilitator.db import api_keys, provider_resources, providers
from svcpay.facilitator.store._base import Part, hash_key, new_id, now

API_KEY_PREFIX = "svc_"


def key_id(key: str) -> str:
    """The id part of an API key (`svc_<id>_<secret>`), which may be shown."""
    return key.removeprefix(API_KEY_PREFIX).split("_", 1)[0]


class Providers(Part):
    async def create(self, name: str) -> str:
        pid = new_id("prov")
        async with self.engine.begin() as conn:
            await conn.execute(providers.insert().values(id=pid, name=name, created_at=now()))
        return pid

    async def get(self, provider_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            got = (
                await conn.execute(sa.select(providers).where(providers.c.id == provider_id))
            ).one_or_none()
        return dict(got._mapping) if got else None

    async def all(self) -> list[dict[str, Any]]:
        """Every provider with its resources and API keys (id, label, created, revoked; never
        the key), oldest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(sa.select(providers).order_by(providers.c.created_at))
            out = [{**dict(r._mapping), "resources": [], "keys": []} for r in rows]
            by_id = {p["id"]: p for p in out}
            for r in await conn.execute(sa.select(provider_resources)):
                by_id[r.provider_id]["resources"].append({"kind": r.kind, "address": r.address})
            keys = sa.select(api_keys.c.id, api_keys.c.provider_id, api_keys.c.label,
                             api_keys.c.created_at, api_keys.c.revoked_at)  # fmt: skip
            for r in await conn.execute(keys.order_by(api_keys.c.created_at)):
                key = {"id": r.id, "label": r.label, "createdAt": r.created_at,
                       "revokedAt": r.revoked_at}  # fmt: skip
                by_id[r.provider_id]["keys"].append(key)
        return out

    async def add_resource(self, provider_id: str, kind: str, address: str) -> None:
        """Registers a plan or a payTo token account as `provider_id`'s (for usage reporting
        and analytics). An address belongs to one provider."""
        async with self.engine.begin() as conn:
            await conn.execute(
                self._insert(provider_resources)
                .values(address=address, kind=kind, provider_id=provider_id)
                .on_conflict_do_nothing()
            )

    async def resource_owner(self, address: str) -> str | None:
        async with self.engine.connect() as conn:
            got = await conn.scalar(
                sa.select(provider_resources.c.provider_id).where(
                    provider_resources.c.address == address
                )
            )
        return str(got) if got else None

    async def plans(self) -> list[str]:
        """Every registered plan (the billing crank's work)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(provider_resources.c.address).where(provider_resources.c.kind == "plan")
            )
            return [r.address for r in rows]

    async def resources(self, provider_id: str) -> list[tuple[str, str]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(provider_resources.c.kind, provider_resources.c.address).where(
                    provider_resources.c.provider_id == provider_id
                )
            )
            return [(r.kind, r.address) for r in rows]


class ApiKeys(Part):
    async def create(self, provider_id: str, label: str = "") -> tuple[str, str]:
        """A new key for `provider_id`: returns (key id, the key). Only its SHA-256 is
        stored; the key itself is shown once."""
        kid = uuid.uuid4().hex[:16]
        key = f"{API_KEY_PREFIX}{kid}_{secrets.token_urlsafe(32)}"
        async with self.engine.begin() as conn:
            await conn.execute(
                api_keys.insert().values(
                    id=kid,
                    provider_id=provider_id,
                    key_hash=hash_key(key),
                    label=label,
                    created_at=now(),
                )
            )
        return kid, key

    async def authenticate(self, key: str) -> str | None:
        """The provider a presented API key belongs to, or None (unknown, revoked, wrong)."""
        if not key.startswith(API_KEY_PREFIX) or len(key) > 200:
            return None
        kid = key_id(key)
        async with self.engine.connect() as conn:
            got = (
                await conn.execute(
                    sa.select(api_keys.c.key_hash, api_keys.c.provider_id).where(
                        (api_keys.c.id == kid) & api_keys.c.revoked_at.is_(None)
                    )
                )
            ).one_or_none()
        if got is None or not hmac.compare_digest(got.key_hash, hash_key(key)):
            return None
        return str(got.provider_id)

    async def revoke(self, key_id: str, *, provider_id: str | None = None) -> bool:
        """Revokes a live key; with `provider_id`, only if it is that provider's."""
        match = (api_keys.c.id == key_id) & api_keys.c.revoked_at.is_(None)
        if provider_id is not None:
            match &= api_keys.c.provider_id == provider_id
        async with self.engine.begin() as conn:
            res = await conn.execute(api_keys.update().where(match).values(revoked_at=now()))
        return bool(res.rowcount)

    async def live_owner(self, key_id: str) -> str | None:
        """The provider whose key `key_id` is, while it is not revoked (a dashboard session
        lasts as long as the key it was opened with)."""
        async with self.engine.connect() as conn:
            got = await conn.scalar(
                sa.select(api_keys.c.provider_id).where(
                    (api_keys.c.id == key_id) & api_keys.c.revoked_at.is_(None)
                )
            )
        return str(got) if got is not None else None

    async def of_provider(self, provider_id: str) -> list[dict[str, Any]]:
        """`provider_id`'s keys (id, label, created_at, revoked_at; never the key), newest
        first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                sa.select(
                    api_keys.c.id, api_keys.c.label, api_keys.c.created_at, api_keys.c.revoked_at
                )
                .where(api_keys.c.provider_id == provider_id)
                .order_by(api_keys.c.created_at.desc(), api_keys.c.id)
            )
            return [dict(r._mapping) for r in rows]

    async def revoke_all(self, provider_id: str) -> int:
        """Revokes every live API key of `provider_id`; returns how many."""
        async with self.engine.begin() as conn:
            res = await conn.execute(
                api_keys.update()
                .where((api_keys.c.provider_id == provider_id) & api_keys.c.revoked_at.is_(None))
                .values(revoked_at=now())
            )
        return int(res.rowcount)

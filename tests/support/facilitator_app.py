"""The facilitator's real ASGI app for API tests: its own SQLite database, the local
validator for RPC, no background loops, and one provider with a valid API key."""

from __future__ import annotations

import asyncio
import atexit
import functools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from solders.keypair import Keypair
from starlette.applications import Starlette

from svcpay.facilitator import db
from svcpay.facilitator.app import create_app
from svcpay.facilitator.config import FacilitatorConfig
from svcpay.facilitator.service import Facilitator
from svcpay.facilitator.store import Store
from svcpay.protocol.headers import NETWORK_MAINNET


@dataclass
class ProviderApp:
    app: Starlette
    service: Facilitator
    provider_id: str
    api_key: str

    @property
    def auth(self) -> dict[str, str]:
        """The provider's `Authorization` header."""
        return {"Authorization": f"Bearer {self.api_key}"}


@functools.cache
def _migrated() -> Path:
    """An empty database at the current schema, made once per process (each app gets a
    copy: migrating takes longer than most of the tests that need one)."""
    directory = Path(tempfile.mkdtemp(prefix="svcpay-facilitator-template-"))
    atexit.register(shutil.rmtree, directory, True)
    path = directory / "facilitator.db"
    db.migrate(f"sqlite:///{path}")
    return path


async def _seed(database_url: str) -> tuple[str, str]:
    """A provider and an API key, written through a store of their own (closed after)."""
    store = Store.open(database_url, migrate=False)
    try:
        provider_id = await store.providers.create("api-tests")
        _, key = await store.api_keys.create(provider_id, "api-tests")
    finally:
        await store.close()
    return provider_id, key


async def provider_app(
    rpc_url: str, directory: Path, *, keypair: Keypair | None = None
) -> ProviderApp:
    """The app over a fresh database in `directory`; its lifespan (or `service.aclose()`)
    releases the RPC client and the database."""
    path = directory / "facilitator.db"
    shutil.copyfile(_migrated(), path)
    database_url = f"sqlite:///{path}"
    provider_id, key = await _seed(database_url)
    config = FacilitatorConfig(
        keypair=keypair or Keypair(),
        rpc_url=rpc_url,
        database_url=database_url,
        network=NETWORK_MAINNET,
    )
    service = Facilitator(config, Store.open(database_url, migrate=False))
    return ProviderApp(create_app(service, background=False), service, provider_id, key)


def provider_app_sync(
    rpc_url: str, directory: Path, *, keypair: Keypair | None = None
) -> ProviderApp:
    """`provider_app` for synchronous callers (nothing async is bound to this loop: the app's
    own engine and RPC client connect on first use, in the loop that serves it)."""
    return asyncio.run(provider_app(rpc_url, directory, keypair=keypair))

"""How svcpay talks to the RPC provider: `connect` makes solana-py's AsyncClient on
`RpcTransport` (svcpay.rpc.transport: 429s, 5xxs and timeouts are waited out and failed
over within a budget, a request rate per endpoint, reads failing over and sends going to
every URL, one log line per state change).

What lives here imports only solana-py and httpx2: any part of svcpay (the facilitator, the
gate, the clients, the CLI) may import it.

Layer 1 (docs/adr/0041), beside `svcpay.protocol`: neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx2
from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Commitment, Confirmed

from svcpay.rpc.transport import RpcSettings, RpcTransport, shown

__all__ = ["RpcSettings", "RpcTransport", "connect", "shown", "transport_of"]


def connect(
    rpc: str | Sequence[str] | RpcSettings,
    commitment: Commitment = Confirmed,
    *,
    rate: float | None = None,
) -> AsyncClient:
    """An AsyncClient for one or more RPC URLs (a comma-separated string, a sequence, or
    RpcSettings) whose every request goes through `RpcTransport`; `rate` caps requests a
    second to each URL."""
    settings = rpc if isinstance(rpc, RpcSettings) else RpcSettings.parse(rpc, rate)
    client = AsyncClient(settings.urls[0], commitment=commitment, timeout=settings.timeout_secs)
    provider = client._provider
    # solana-py posts every JSON-RPC call through `provider.session` (an httpx2 client); its
    # own is replaced before it opened any connection.
    if not isinstance(getattr(provider, "session", None), httpx2.AsyncClient):
        raise RuntimeError("this solana-py keeps no httpx2 session: svcpay.rpc needs >= 0.41")
    provider.session = httpx2.AsyncClient(
        transport=RpcTransport(settings), timeout=httpx2.Timeout(settings.timeout_secs)
    )
    provider._max_transport_retries = 0  # the transport retries, within its budget
    return client


def transport_of(client: AsyncClient) -> RpcTransport | None:
    """The RpcTransport under `client`, if `connect` made it."""
    transport = getattr(getattr(client._provider, "session", None), "_transport", None)
    return transport if isinstance(transport, RpcTransport) else None

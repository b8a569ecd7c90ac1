"""Token balances read over JSON-RPC, for the browser tests (their chain is the served
demo's validator, another process's)."""

from __future__ import annotations

import httpx
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import get_associated_token_address


def rpc(url: str, method: str, *params: object) -> object:
    reply = httpx.post(
        url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}, timeout=30
    )
    body = reply.json()
    assert "error" not in body, body
    return body["result"]


def token_account_balance(url: str, account: Pubkey | str) -> int:
    found = rpc(url, "getTokenAccountBalance", str(account), {"commitment": "confirmed"})
    assert isinstance(found, dict)
    return int(found["value"]["amount"])


def wallet_balance(url: str, owner: Pubkey, mint: Pubkey) -> int:
    """`owner`'s associated SPL Token account's balance of `mint`."""
    return token_account_balance(url, get_associated_token_address(owner, mint, TOKEN_PROGRAM_ID))

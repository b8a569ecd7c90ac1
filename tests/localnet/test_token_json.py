"""Token accounts and mints as agave's `jsonParsed` shows them, getTokenAccountsByOwner and
getTokenAccountBalance, for SPL Token and Token-2022 (whose associated accounts carry the
ImmutableOwner extension). Run on both validators: agave's answers are the reference."""

from __future__ import annotations

from typing import Any

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID
from spl.token.instructions import approve
from spl.token.models import ApproveParams

from tests.support.chain import Chain, RpcError

T22 = TOKEN_2022_PROGRAM_ID
CONFIRMED = {"commitment": "confirmed"}
PARSED = {"encoding": "jsonParsed", "commitment": "confirmed"}
BIG = 123_456_789_012_345_678  # more digits than a float holds


def parsed(chain: Chain, address: Pubkey) -> Any:
    return chain.rpc("getAccountInfo", str(address), PARSED)["value"]["data"]


def amount(raw: int, decimals: int, ui: str) -> dict[str, Any]:
    return {
        "amount": str(raw),
        "decimals": decimals,
        "uiAmount": raw / 10**decimals,
        "uiAmountString": ui,
    }


def test_spl_token_accounts_and_mints_are_parsed(chain: Chain) -> None:
    owner = chain.funded_keypair()
    mint = chain.create_mint(decimals=6)
    ata = chain.token_account(owner.pubkey(), mint, BIG)
    delegate = Keypair().pubkey()
    grant = ApproveParams(
        program_id=TOKEN_PROGRAM_ID, source=ata, delegate=delegate, owner=owner.pubkey(), amount=5
    )
    chain.send_ok([approve(grant)], [owner])
    assert parsed(chain, ata) == {
        "program": "spl-token",
        "parsed": {
            "type": "account",
            "info": {
                "mint": str(mint),
                "owner": str(owner.pubkey()),
                "tokenAmount": amount(BIG, 6, "123456789012.345678"),
                "delegate": str(delegate),
                "state": "initialized",
                "isNative": False,
                "delegatedAmount": amount(5, 6, "0.000005"),
            },
        },
        "space": 165,
    }
    assert parsed(chain, mint) == {
        "program": "spl-token",
        "parsed": {
            "type": "mint",
            "info": {
                "mintAuthority": str(chain.payer.pubkey()),
                "supply": str(BIG),
                "decimals": 6,
                "isInitialized": True,
                "freezeAuthority": None,
            },
        },
        "space": 82,
    }
    balance = chain.rpc("getTokenAccountBalance", str(ata), CONFIRMED)["value"]
    assert balance == amount(BIG, 6, "123456789012.345678")
    # what is not a token program's account stays base64, as agave leaves it
    wallet = chain.rpc("getAccountInfo", str(owner.pubkey()), PARSED)["value"]
    assert wallet["data"] == ["", "base64"]


def test_token_2022_accounts_show_their_extensions(chain: Chain) -> None:
    owner = Keypair().pubkey()
    mint = chain.create_mint(0, program_id=T22, freeze_authority=chain.payer.pubkey())
    ata = chain.token_account(owner, mint, 42, program_id=T22)
    assert parsed(chain, ata) == {
        "program": "spl-token-2022",
        "parsed": {
            "type": "account",
            "info": {
                "mint": str(mint),
                "owner": str(owner),
                "tokenAmount": amount(42, 0, "42"),
                "state": "initialized",
                "isNative": False,
                "extensions": [{"extension": "immutableOwner"}],
            },
        },
        "space": 170,
    }
    assert parsed(chain, mint)["parsed"]["info"]["freezeAuthority"] == str(chain.payer.pubkey())
    balance = chain.rpc("getTokenAccountBalance", str(ata), CONFIRMED)["value"]
    assert balance == amount(42, 0, "42")


def test_token_accounts_by_owner(chain: Chain) -> None:
    owner = Keypair().pubkey()
    mints = [chain.create_mint(decimals=2) for _ in range(2)]
    atas = [chain.token_account(owner, m, 150) for m in mints]
    other_2022 = chain.token_account(owner, chain.create_mint(3, program_id=T22), 7, program_id=T22)
    chain.token_account(Keypair().pubkey(), mints[0], 1)  # someone else's

    def by(which: dict[str, str], config: dict[str, Any]) -> list[Any]:
        return chain.rpc("getTokenAccountsByOwner", str(owner), which, config)["value"]

    found = by({"programId": str(TOKEN_PROGRAM_ID)}, PARSED)
    assert sorted(a["pubkey"] for a in found) == sorted(str(a) for a in atas)
    info = {a["pubkey"]: a["account"]["data"]["parsed"]["info"] for a in found}
    assert info[str(atas[1])]["tokenAmount"] == amount(150, 2, "1.5")
    only = by({"mint": str(mints[0])}, {"encoding": "base64", "commitment": "confirmed"})
    assert [a["pubkey"] for a in only] == [str(atas[0])]
    assert only[0]["account"]["data"][1] == "base64"
    assert [a["pubkey"] for a in by({"programId": str(TOKEN_2022_PROGRAM_ID)}, PARSED)] == [
        str(other_2022)
    ]
    for which, message in (
        ({"mint": str(Keypair().pubkey())}, "could not find mint"),
        ({"programId": str(Keypair().pubkey())}, "unrecognized Token program id"),
    ):
        with pytest.raises(RpcError) as refused:
            by(which, PARSED)
        assert refused.value.code == -32602 and message in str(refused.value)


def test_a_balance_of_what_is_not_a_token_account_is_refused(chain: Chain) -> None:
    mint = chain.create_mint()
    for address, message in (
        (mint, "not a Token account"),
        (Keypair().pubkey(), "could not find account"),
    ):
        with pytest.raises(RpcError) as refused:
            chain.rpc("getTokenAccountBalance", str(address), CONFIRMED)
        assert refused.value.code == -32602 and message in str(refused.value)

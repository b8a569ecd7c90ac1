"""Token accounts and mints as agave's `jsonParsed` shows them, getTokenAccountsByOwner and
getTokenAccountBalance, for SPL Token and Token-2022: the extensions of mints made with
tests.support.token2022 and of their accounts, and the UI amounts of an interest-bearing mint's
accounts. Run on both validators: agave's answers are the reference (byte-built extensions
no tool here creates: test_token_extensions.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID
from spl.token.instructions import approve, mint_to
from spl.token.models import ApproveParams, MintToParams

from svcpay.protocol import token2022 as t22
from tests.support.chain import Chain, RpcError
from tests.support.clock import Clock
from tests.support.token2022 import HOOK, pyusd_like, t22_mint

T22 = TOKEN_2022_PROGRAM_ID
CONFIRMED = {"commitment": "confirmed"}
PARSED = {"encoding": "jsonParsed", "commitment": "confirmed"}
JSON_V0 = {"encoding": "json", "maxSupportedTransactionVersion": 0}
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


def extensions(chain: Chain, address: Pubkey) -> list[Any]:
    return list(parsed(chain, address)["parsed"]["info"]["extensions"])


def test_a_pyusd_like_mint_and_its_account_show_every_extension(chain: Chain) -> None:
    payer = str(chain.payer.pubkey())
    epochs = chain.rpc("getEpochInfo", CONFIRMED)["epoch"]
    mint = pyusd_like(chain)
    fee = {"epoch": epochs, "maximumFee": 0, "transferFeeBasisPoints": 0}
    shown = parsed(chain, mint)
    assert shown["program"] == "spl-token-2022"
    assert shown["parsed"]["info"]["extensions"] == [
        {
            "extension": "transferFeeConfig",
            "state": {
                "transferFeeConfigAuthority": payer,
                "withdrawWithheldAuthority": payer,
                "withheldAmount": 0,
                "olderTransferFee": fee,
                "newerTransferFee": fee,
            },
        },
        {"extension": "permanentDelegate", "state": {"delegate": payer}},
        {"extension": "transferHook", "state": {"authority": payer, "programId": str(HOOK)}},
    ]
    ata = chain.token_account(Keypair().pubkey(), mint, 5, program_id=T22)
    assert extensions(chain, ata) == [
        {"extension": "immutableOwner"},
        {"extension": "transferFeeAmount", "state": {"withheldAmount": 0}},
        {"extension": "transferHookAccount", "state": {"transferring": False}},
    ]


def test_mint_extensions_without_state_and_a_frozen_account(chain: Chain) -> None:
    payer = chain.payer.pubkey()
    mint = t22_mint(
        chain,
        close_authority=payer,
        default_frozen=True,
        freeze_authority=payer,
        non_transferable=True,
        pausable=True,
    )
    assert extensions(chain, mint) == [
        {"extension": "mintCloseAuthority", "state": {"closeAuthority": str(payer)}},
        {"extension": "defaultAccountState", "state": {"accountState": "frozen"}},
        {"extension": "nonTransferable"},
        {"extension": "pausableConfig", "state": {"authority": str(payer), "paused": False}},
    ]
    ata = chain.token_account(Keypair().pubkey(), mint, program_id=T22)
    info = parsed(chain, ata)["parsed"]["info"]
    assert info["state"] == "frozen"
    assert info["extensions"] == [
        {"extension": "immutableOwner"},
        {"extension": "nonTransferableAccount"},
        {"extension": "pausableAccount"},
    ]


def test_memo_transfer_and_cpi_guard_on_an_account(chain: Chain) -> None:
    owner = chain.funded_keypair()
    mint = chain.create_mint(2, program_id=T22)
    ata = chain.token_account(owner.pubkey(), mint, program_id=T22)
    kinds = [t22.ExtensionType.MEMO_TRANSFER, t22.ExtensionType.CPI_GUARD]
    grow = t22.reallocate(ata, chain.payer.pubkey(), owner.pubkey(), kinds)
    enable = [
        t22.enable_required_memo_transfers(ata, owner.pubkey()),
        t22.enable_cpi_guard(ata, owner.pubkey()),
    ]
    chain.send_ok([grow, *enable], [chain.payer, owner])
    assert extensions(chain, ata) == [
        {"extension": "immutableOwner"},
        {"extension": "memoTransfer", "state": {"requireIncomingTransferMemos": True}},
        {"extension": "cpiGuard", "state": {"lockCpi": True}},
    ]
    off = [
        t22.disable_required_memo_transfers(ata, owner.pubkey()),
        t22.disable_cpi_guard(ata, owner.pubkey()),
    ]
    chain.send_ok(off, [chain.payer, owner])
    assert extensions(chain, ata)[1:] == [
        {"extension": "memoTransfer", "state": {"requireIncomingTransferMemos": False}},
        {"extension": "cpiGuard", "state": {"lockCpi": False}},
    ]


SECONDS_PER_YEAR = 60.0 * 60.0 * 24.0 * 365.24


def interest_ui(amount: int, decimals: int, rate: int, elapsed: int) -> str:
    """InterestBearingConfig::amount_to_ui_amount of a config never updated (the rate before
    the last update applied over no time), `elapsed` seconds after its initialization."""
    scale = 1.0 * math.exp(float(rate * elapsed) / SECONDS_PER_YEAR / 10_000.0) / 10.0**decimals
    return f"{float(amount) * scale:.{decimals}f}".rstrip("0").rstrip(".")


def test_an_interest_bearing_mints_accounts_show_the_accrued_amount(
    chain: Chain, clock: Clock
) -> None:
    rate, raw = 32_767, 10**15  # a rate that shows within a second on 10^9 tokens
    mint = t22_mint(chain, decimals=6, interest_rate=rate)
    (config,) = extensions(chain, mint)
    state, start = config["state"], config["state"]["initializationTimestamp"]
    assert config["extension"] == "interestBearingConfig"
    assert state == {
        "rateAuthority": str(chain.payer.pubkey()),
        "initializationTimestamp": start,
        "preUpdateAverageRate": rate,
        "lastUpdateTimestamp": start,
        "currentRate": rate,
    }
    owner = Keypair().pubkey()
    ata = chain.token_account(owner, mint, program_id=T22)
    grant = MintToParams(
        program_id=T22, mint=mint, dest=ata, mint_authority=chain.payer.pubkey(), amount=raw
    )
    minted = chain.send_ok([mint_to(grant)], [chain.payer])
    tx = chain.rpc("getTransaction", minted.signature, {**CONFIRMED, **JSON_V0})
    # a transaction's token balances are never scaled: agave's ledger keeps the decimals only
    (after_mint,) = tx["meta"]["postTokenBalances"]
    assert after_mint["uiTokenAmount"] == amount(raw, 6, "1000000000")
    clock.advance(2)

    def amounts() -> list[Any]:
        """The UI amount as each answer shows it, and those of the times they were answered."""
        before = clock.now()
        balance = chain.rpc("getTokenAccountBalance", str(ata), CONFIRMED)["value"]
        by_owner = chain.rpc("getTokenAccountsByOwner", str(owner), {"mint": str(mint)}, PARSED)
        (keyed,) = by_owner["value"]
        answers = [
            parsed(chain, ata)["parsed"]["info"]["tokenAmount"],
            balance,
            keyed["account"]["data"]["parsed"]["info"]["tokenAmount"],
        ]
        after = clock.now()
        return [answers, {interest_ui(raw, 6, rate, t - start) for t in range(before, after + 1)}]

    answers, times = amounts()
    for shown in answers:
        ui = shown["uiAmountString"]
        assert ui in times and float(ui) > 10**9  # two seconds' interest at least
        assert shown == {
            "amount": str(raw),
            "decimals": 6,
            "uiAmount": float(ui),
            "uiAmountString": ui,
        }

"""Token-2022 extensions no tool here creates (metadata, groups, confidential transfers, scaled
UI amounts, ...), malformed ones, and the UI amounts agave scales: built byte by byte per the
spl-token-2022 interface's layouts and loaded at genesis (`--account`) on the validator under
test. The expected JSON is written from agave 4.2.2's account decoder (parse_token.rs,
parse_token_extension.rs and the client types' serde names): on solana-test-validator it is
agave answering, on the drop-in token_json.py. Run on both."""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from solders.account import Account
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.constants import TOKEN_2022_PROGRAM_ID, TOKEN_PROGRAM_ID

from svcpay.localnet.accounts import account_json, write_account_file
from svcpay.localnet.process import localnet
from svcpay.localnet.token_extensions import rust_float
from svcpay.localnet.token_json import MintInfo, ui_amount
from tests.support.chain import TICKS_PER_SLOT, Chain, RpcError

PARSED = {"encoding": "jsonParsed", "commitment": "confirmed"}
MINT, ACCOUNT = 1, 2


def key(name: str) -> Pubkey:
    return Keypair.from_seed(hashlib.sha256(name.encode()).digest()).pubkey()


AUTH, OWNER, DELEGATE, GROUP = key("authority"), key("owner"), key("delegate"), key("group")
M_META, M_CONF, M_SCALED, M_NOW = key("meta"), key("conf"), key("scaled"), key("now")
M_ODD, M_UNKNOWN, M_CUT, M_PAD = key("odd"), key("unknown"), key("cut"), key("pad")
A_SCALED, A_NOW, A_ODD, A_BAD = key("a-scaled"), key("a-now"), key("a-odd"), key("a-bad")
MULTISIG, MULTISIG_0 = key("multisig"), key("multisig-0")


def coption(k: Pubkey | None) -> bytes:
    return struct.pack("<I", 0) + bytes(32) if k is None else struct.pack("<I", 1) + bytes(k)


def mint_base(decimals: int, supply: int = 0, freeze: Pubkey | None = None) -> bytes:
    return coption(AUTH) + struct.pack("<QB?", supply, decimals, True) + coption(freeze)


def account_base(mint: Pubkey, amount: int, *, delegated: int = 0) -> bytes:
    delegate = coption(DELEGATE if delegated else None)
    tail = struct.pack("<BI8sQ", 1, 0, bytes(8), delegated) + coption(AUTH if delegated else None)
    return bytes(mint) + bytes(OWNER) + struct.pack("<Q", amount) + delegate + tail


def with_tlv(base: bytes, account_type: int, entries: list[tuple[int, bytes]]) -> bytes:
    tlv = b"".join(struct.pack("<HH", kind, len(value)) + value for kind, value in entries)
    return base + bytes(165 - len(base)) + bytes([account_type]) + tlv


def borsh_str(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<I", len(raw)) + raw


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def fee(epoch: int, maximum: int, bps: int) -> bytes:
    return struct.pack("<QQH", epoch, maximum, bps)


def scaled(multiplier: float, at: int, new: float) -> bytes:
    return bytes(AUTH) + struct.pack("<dqd", multiplier, at, new)


METADATA = (
    bytes(AUTH)
    + bytes(M_META)
    + b"".join(borsh_str(s) for s in ("Svc Pay", "SVC", "https://svcpay.example/t.json"))
    + struct.pack("<I", 2)
    + b"".join(borsh_str(s) for s in ("k", "v", "tier", "gold"))
)
CT_ACCOUNT = (
    b"\1"
    + bytes([5] * 32)
    + bytes([6] * 64)
    + bytes([7] * 64)
    + bytes([8] * 64)
    + bytes([9] * 36)
    + b"\1\0"
    + struct.pack("<4Q", 1, 2, 3, 4)
)
DATA: dict[Pubkey, bytes] = {
    M_META: with_tlv(
        mint_base(2),
        MINT,
        [
            (18, bytes(AUTH) + bytes(M_META)),
            (19, METADATA),
            (20, bytes(32) + bytes(M_META)),
            (21, bytes(AUTH) + bytes(M_META) + struct.pack("<QQ", 3, 10)),
            (22, bytes(AUTH) + bytes(32)),
            (23, bytes(M_META) + bytes(GROUP) + struct.pack("<Q", 1)),
        ],
    ),
    M_CONF: with_tlv(
        mint_base(9, 5, freeze=AUTH),
        MINT,
        [
            (
                1,
                bytes(32)
                + bytes(AUTH)
                + struct.pack("<Q", 77)
                + fee(1, 1000, 25)
                + fee(2, 2000, 50),
            ),
            (4, bytes(AUTH) + b"\1" + bytes(32)),
            (16, bytes(32) + bytes(32) + b"\0" + bytes(range(64))),
            (24, bytes([1] * 64) + bytes([2] * 36) + bytes([3] * 32) + bytes([4] * 64)),
            (28, bytes(AUTH)),
            (26, bytes(AUTH) + b"\1"),
            (3, bytes(31)),  # one byte short: unparseable
            (2, bytes(8)),  # an account's extension on a mint: unparseable
            (7, b""),  # named whatever it is on
            (6, b"\7"),  # no such state: the default
            (19, bytes(AUTH) + bytes(M_CONF) + borsh_str(b"\xff") + bytes(12)),  # not UTF-8
        ],
    ),
    M_SCALED: with_tlv(mint_base(2, 12345), MINT, [(25, scaled(1.5, 4102444800, 0.1))]),
    M_NOW: with_tlv(mint_base(2), MINT, [(25, scaled(1.5, 1, 0.1))]),
    M_ODD: with_tlv(  # interest over a span past i64: no UI amount
        mint_base(2), MINT, [(10, bytes(32) + struct.pack("<qhqh", -(2**63), 0, 2**63 - 1, 0))]
    ),
    M_UNKNOWN: with_tlv(mint_base(2), MINT, [(9, b""), (29, b"\1")]),
    M_CUT: with_tlv(mint_base(2), MINT, [(9, b""), (3, bytes(10))])[:-1],
    M_PAD: mint_base(2) + b"\1" + bytes(82) + bytes([MINT]) + struct.pack("<HH", 9, 0),
    A_SCALED: with_tlv(
        account_base(M_SCALED, 12345, delegated=101),
        ACCOUNT,
        [(5, CT_ACCOUNT), (17, bytes([10] * 64)), (7, b"")],
    ),
    A_NOW: account_base(M_NOW, 12345),
    A_ODD: account_base(M_ODD, 5),
    A_BAD: account_base(M_NOW, 1)[:72] + struct.pack("<I", 2) + account_base(M_NOW, 1)[76:],
    MULTISIG: bytes([1, 2, 1]) + bytes(AUTH) + bytes(OWNER) + bytes(32 * 9),
    MULTISIG_0: bytes(355),
}


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    """A validator of the kind under test with DATA's accounts (Token-2022's, the multisigs
    SPL Token's) from genesis."""
    folder: Path = tmp_path_factory.mktemp("token-extensions")
    files = []
    for i, (address, data) in enumerate(DATA.items()):
        owner = TOKEN_PROGRAM_ID if address in (MULTISIG, MULTISIG_0) else TOKEN_2022_PROGRAM_ID
        doc = account_json(address, Account(10**9, data, owner))
        files.append((str(address), write_account_file(folder / f"{i}.json", doc)))
    with localnet(program=None, accounts=files, ticks_per_slot=TICKS_PER_SLOT) as node:
        yield Chain(node.url, node.can_time_travel)


def data(chain: Chain, address: Pubkey) -> Any:
    return chain.rpc("getAccountInfo", str(address), PARSED)["value"]["data"]


def info(chain: Chain, address: Pubkey) -> Any:
    shown = data(chain, address)
    assert shown["space"] == len(DATA[address])
    return shown["parsed"]["info"]


def test_metadata_and_group_extensions(chain: Chain) -> None:
    auth, meta = str(AUTH), str(M_META)
    assert info(chain, M_META)["extensions"] == [
        {"extension": "metadataPointer", "state": {"authority": auth, "metadataAddress": meta}},
        {
            "extension": "tokenMetadata",
            "state": {
                "updateAuthority": auth,
                "mint": meta,
                "name": "Svc Pay",
                "symbol": "SVC",
                "uri": "https://svcpay.example/t.json",
                "additionalMetadata": [["k", "v"], ["tier", "gold"]],
            },
        },
        {"extension": "groupPointer", "state": {"authority": None, "groupAddress": meta}},
        {
            "extension": "tokenGroup",
            "state": {"updateAuthority": auth, "mint": meta, "size": 3, "maxSize": 10},
        },
        {"extension": "groupMemberPointer", "state": {"authority": auth, "memberAddress": None}},
        {
            "extension": "tokenGroupMember",
            "state": {"mint": meta, "group": str(GROUP), "memberNumber": 1},
        },
    ]


def test_confidential_fee_pause_burn_and_unparseable_extensions(chain: Chain) -> None:
    auth, unparseable = str(AUTH), {"extension": "unparseableExtension"}
    shown = info(chain, M_CONF)
    assert (shown["supply"], shown["decimals"], shown["freezeAuthority"]) == ("5", 9, auth)
    assert shown["extensions"] == [
        {
            "extension": "transferFeeConfig",
            "state": {
                "transferFeeConfigAuthority": None,
                "withdrawWithheldAuthority": auth,
                "withheldAmount": 77,
                "olderTransferFee": {"epoch": 1, "maximumFee": 1000, "transferFeeBasisPoints": 25},
                "newerTransferFee": {"epoch": 2, "maximumFee": 2000, "transferFeeBasisPoints": 50},
            },
        },
        {
            "extension": "confidentialTransferMint",
            "state": {
                "authority": auth,
                "autoApproveNewAccounts": True,
                "auditorElgamalPubkey": None,
            },
        },
        {
            "extension": "confidentialTransferFeeConfig",
            "state": {
                "authority": None,
                "withdrawWithheldAuthorityElgamalPubkey": b64(bytes(32)),
                "harvestToMintEnabled": False,
                "withheldAmount": b64(bytes(range(64))),
            },
        },
        {
            "extension": "confidentialMintBurn",
            "state": {
                "confidentialSupply": b64(bytes([1] * 64)),
                "decryptableSupply": b64(bytes([2] * 36)),
                "supplyElgamalPubkey": b64(bytes([3] * 32)),
                "pendingBurn": b64(bytes([4] * 64)),
            },
        },
        {"extension": "permissionedBurnConfig", "state": {"authority": auth}},
        {"extension": "pausableConfig", "state": {"authority": auth, "paused": True}},
        unparseable,
        unparseable,
        {"extension": "immutableOwner"},
        {"extension": "defaultAccountState", "state": {"accountState": "uninitialized"}},
        unparseable,
    ]


def ui(amount: int, text: str) -> dict[str, Any]:
    return {"amount": str(amount), "decimals": 2, "uiAmount": float(text), "uiAmountString": text}


def test_a_scaled_mints_account_with_confidential_extensions(chain: Chain) -> None:
    assert info(chain, M_SCALED)["extensions"] == [
        {
            "extension": "scaledUiAmountConfig",
            "state": {
                "authority": str(AUTH),
                "multiplier": "1.5",
                "newMultiplierEffectiveTimestamp": 4102444800,
                "newMultiplier": "0.1",
            },
        }
    ]
    assert info(chain, A_SCALED) == {
        "mint": str(M_SCALED),
        "owner": str(OWNER),
        "tokenAmount": ui(12345, "185.17"),  # 12345 x 1.5, truncated, over 10^2
        "delegate": str(DELEGATE),
        "state": "initialized",
        "isNative": False,
        "delegatedAmount": ui(101, "1.51"),
        "closeAuthority": str(AUTH),
        "extensions": [
            {
                "extension": "confidentialTransferAccount",
                "state": {
                    "approved": True,
                    "elgamalPubkey": b64(bytes([5] * 32)),
                    "pendingBalanceLo": b64(bytes([6] * 64)),
                    "pendingBalanceHi": b64(bytes([7] * 64)),
                    "availableBalance": b64(bytes([8] * 64)),
                    "decryptableAvailableBalance": b64(bytes([9] * 36)),
                    "allowConfidentialCredits": True,
                    "allowNonConfidentialCredits": False,
                    "pendingBalanceCreditCounter": 1,
                    "maximumPendingBalanceCreditCounter": 2,
                    "expectedPendingBalanceCreditCounter": 3,
                    "actualPendingBalanceCreditCounter": 4,
                },
            },
            {
                "extension": "confidentialTransferFeeAmount",
                "state": {"withheldAmount": b64(bytes([10] * 64))},
            },
            {"extension": "immutableOwner"},
        ],
    }


def test_scaled_and_unscalable_amounts_in_every_answer(chain: Chain) -> None:
    now, odd = (
        ui(12345, "12.34"),
        {"amount": "5", "decimals": 2, "uiAmount": None, "uiAmountString": ""},
    )
    for address, amount in ((A_SCALED, ui(12345, "185.17")), (A_NOW, now), (A_ODD, odd)):
        assert info(chain, address)["tokenAmount"] == amount
        balance = chain.rpc("getTokenAccountBalance", str(address), {"commitment": "confirmed"})
        assert balance["value"] == amount
    by_owner = chain.rpc("getTokenAccountsByOwner", str(OWNER), {"mint": str(M_NOW)}, PARSED)
    (keyed,) = by_owner["value"]  # A_BAD, of the same mint and owner, is not parsed
    assert keyed["account"]["data"]["parsed"]["info"]["tokenAmount"] == now
    assert "extensions" not in keyed["account"]["data"]["parsed"]["info"]


def test_what_agave_cannot_list_or_unpack(chain: Chain) -> None:
    for mint in (M_UNKNOWN, M_CUT):  # an unknown type or a cut entry: no list at all
        shown = info(chain, mint)
        assert shown["decimals"] == 2 and "extensions" not in shown
    for address in (M_PAD, A_BAD, MULTISIG_0):  # not unpacked: base64
        assert data(chain, address) == [b64(DATA[address]), "base64"]
    with pytest.raises(RpcError) as refused:
        chain.rpc("getTokenAccountBalance", str(A_BAD), {"commitment": "confirmed"})
    assert refused.value.code == -32602 and "not a Token account" in str(refused.value)
    sliced = {**PARSED, "dataSlice": {"offset": 0, "length": 4}}  # ignored for those too
    assert chain.rpc("getAccountInfo", str(A_BAD), sliced)["value"]["data"][0] == b64(DATA[A_BAD])
    # and lists of a token program's accounts under jsonParsed leave them out
    mine = {**PARSED, "filters": [{"memcmp": {"offset": 32, "bytes": str(OWNER)}}]}
    rows = chain.rpc("getProgramAccounts", str(TOKEN_2022_PROGRAM_ID), mine)
    assert sorted(r["pubkey"] for r in rows) == sorted(str(a) for a in (A_SCALED, A_NOW, A_ODD))
    assert data(chain, MULTISIG)["parsed"] == {
        "type": "multisig",
        "info": {
            "numRequiredSigners": 1,
            "numValidSigners": 2,
            "isInitialized": True,
            "signers": [str(AUTH), str(OWNER)],
        },
    }


# -- without a validator: what agave's Rust does that Python does otherwise ----------------
def test_floats_read_as_rust_displays_them() -> None:
    cases = {1.0: "1", 0.1: "0.1", 1e21: "1000000000000000000000", 1.5e-7: "0.00000015"}
    cases |= {math.inf: "inf", -math.inf: "-inf", math.nan: "NaN", -0.0: "-0"}
    assert {x: rust_float(x) for x in cases} == cases


def test_ui_amounts_past_what_a_float_holds() -> None:
    huge = scaled(1e308, 0, 1e308)  # scaled to infinity: "inf", and no number
    inf = ui_amount(10**18, MintInfo(2, scaled=huge, unix_timestamp=5))
    assert (inf["uiAmountString"], inf["uiAmount"]) == ("inf", None)
    plain = ui_amount(123, MintInfo(20))  # 10^20 overflows agave's usize: no uiAmount
    assert (plain["uiAmountString"], plain["uiAmount"]) == ("0.00000000000000000123", None)

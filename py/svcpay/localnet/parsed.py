"""The drop-in's JSON for instructions, memos and token amounts, as Agave's RPC writes them.

Mirrors Agave's `transaction-status` crate: `jsonParsed` instructions of the System, SPL Token
(and Token-2022's base instructions), Associated Token Account and Memo programs; every other
instruction (and any these parsers refuse, as Agave's do) is "partially decoded": program id,
account addresses, base58 data. Also the `memo` of getSignaturesForAddress and the token
amounts of `pre/postTokenBalances`. Pure Python: no solders, so both environments import it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import base58

SYSTEM = "11111111111111111111111111111111"
TOKEN = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
TOKEN_2022 = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb"
TOKEN_PROGRAMS = (TOKEN, TOKEN_2022)
ASSOCIATED_TOKEN = "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL"
MEMO_PROGRAMS = (
    "Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo",
    "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr",
)

TOKEN_ACCOUNT_SIZE = 165
MINT_SIZE = 82


class NotParsable(ValueError):
    """Agave's parser would refuse this instruction: it is shown partially decoded."""


Json = dict[str, Any]
Parser = Callable[[list[str], bytes], Json]


# -- amounts ------------------------------------------------------------------------------
def amount_string(amount: int, decimals: int) -> str:
    """`amount` base units as a decimal string without trailing zeros ("1.5", "10", "0")."""
    if decimals == 0:
        return str(amount)
    digits = str(amount).rjust(decimals + 1, "0")
    text = f"{digits[:-decimals]}.{digits[-decimals:]}"
    return text.rstrip("0").rstrip(".")


def ui_token_amount(amount: int, decimals: int) -> Json:
    """A UiTokenAmount as parsed instructions carry it (uiAmount is a float, even 0.0)."""
    ui = float(amount) / float(10**decimals) if decimals <= 19 else None
    return {
        "uiAmount": ui,
        "decimals": decimals,
        "amount": str(amount),
        "uiAmountString": amount_string(amount, decimals),
    }


def token_balance(index: int, program: str, data: bytes, decimals: int) -> Json:
    """One entry of pre/postTokenBalances for the token account `data` at `index`. The ledger
    stores uiAmount as a float where 0.0 means none, so a zero balance reads back as null."""
    amount = int.from_bytes(data[64:72], "little")
    ui = ui_token_amount(amount, decimals)
    if not ui["uiAmount"]:
        ui["uiAmount"] = None
    return {
        "accountIndex": index,
        "mint": base58.b58encode(data[0:32]).decode(),
        "uiTokenAmount": ui,
        "owner": base58.b58encode(data[32:64]).decode(),
        "programId": program,
    }


def is_token_account(owner: str, data: bytes) -> bool:
    """An initialized SPL token account (Token-2022 ones may carry extensions after 165)."""
    if owner not in TOKEN_PROGRAMS or len(data) < TOKEN_ACCOUNT_SIZE or data[108] == 0:
        return False
    return len(data) == TOKEN_ACCOUNT_SIZE or (owner == TOKEN_2022 and data[165] == 2)


def mint_decimals(owner: str, data: bytes) -> int | None:
    """The decimals of an initialized mint, or None."""
    if owner not in TOKEN_PROGRAMS or len(data) < MINT_SIZE or data[45] != 1:
        return None
    return data[44]


# -- memos --------------------------------------------------------------------------------
def memo(instructions: list[tuple[str, bytes]]) -> str | None:
    """getSignaturesForAddress's `memo`: each top-level memo instruction's data as
    "[length] text", joined by "; "; None without one."""
    memos = []
    for program_id, data in instructions:
        if program_id in MEMO_PROGRAMS:
            try:
                text = data.decode()
            except UnicodeDecodeError:
                text = "(unparsable)"
            memos.append(f"[{len(data)}] {text}")
    return "; ".join(memos) if memos else None


# -- instructions -------------------------------------------------------------------------
def instruction(
    program_id: str, accounts: list[str], data: bytes, stack_height: int | None
) -> Json:
    """One instruction as jsonParsed shows it: parsed where Agave parses it, otherwise
    partially decoded."""
    entry = _PROGRAMS.get(program_id)
    if entry is not None:
        name, parse = entry
        try:
            parsed: Any = parse(accounts, data)
        except (NotParsable, struct.error, IndexError, UnicodeDecodeError):
            pass
        else:
            return {
                "program": name,
                "programId": program_id,
                "parsed": parsed,
                "stackHeight": stack_height,
            }
    return {
        "programId": program_id,
        "accounts": accounts,
        "data": base58.b58encode(data).decode(),
        "stackHeight": stack_height,
    }


def _need(accounts: list[str], n: int) -> None:
    if len(accounts) < n:
        raise NotParsable(f"expected {n} accounts")


def _key(data: bytes, at: int) -> str:
    if len(data) < at + 32:
        raise NotParsable("short public key")
    return str(base58.b58encode(data[at : at + 32]).decode())


def _u64(data: bytes, at: int) -> int:
    return int(struct.unpack_from("<Q", data, at)[0])


def _typed(kind: str, info: Json) -> Json:
    return {"info": info, "type": kind}


def _system(accounts: list[str], data: bytes) -> Json:
    if not accounts:
        raise NotParsable("no accounts")
    (tag,) = struct.unpack_from("<I", data, 0)
    if tag == 0:  # CreateAccount { lamports, space, owner }
        _need(accounts, 2)
        return _typed(
            "createAccount",
            {
                "source": accounts[0],
                "newAccount": accounts[1],
                "lamports": _u64(data, 4),
                "space": _u64(data, 12),
                "owner": _key(data, 20),
            },
        )
    if tag == 1:  # Assign { owner }
        _need(accounts, 1)
        return _typed("assign", {"account": accounts[0], "owner": _key(data, 4)})
    if tag == 2:  # Transfer { lamports }
        _need(accounts, 2)
        return _typed(
            "transfer",
            {"source": accounts[0], "destination": accounts[1], "lamports": _u64(data, 4)},
        )
    if tag == 8:  # Allocate { space }
        _need(accounts, 1)
        return _typed("allocate", {"account": accounts[0], "space": _u64(data, 4)})
    raise NotParsable(f"system instruction {tag} is not parsed here")


def _signers(
    info: Json, last_nonsigner: int, accounts: list[str], single: str, multisig: str
) -> Json:
    """Agave's parse_signers: one authority, or a multisig and its signers."""
    if len(accounts) > last_nonsigner + 1:
        info[multisig] = accounts[last_nonsigner]
        info["signers"] = accounts[last_nonsigner + 1 :]
    else:
        info[single] = accounts[last_nonsigner]
    return info


_AUTHORITY_TYPES = (
    "mintTokens", "freezeAccount", "accountOwner", "closeAccount", "transferFeeConfig",
    "withheldWithdraw", "closeMint", "interestRate", "permanentDelegate",
    "confidentialTransferMint", "transferHookProgramId", "confidentialTransferFeeConfig",
    "metadataPointer", "groupPointer", "groupMemberPointer", "scaledUiAmount", "pause",
)  # fmt: skip
_ACCOUNT_AUTHORITIES = ("accountOwner", "closeAccount")


def _optional_key(data: bytes, at: int) -> str | None:
    """A COption<Pubkey> as the token program packs it: a tag byte, then the key if 1."""
    if len(data) <= at or data[at] not in (0, 1):
        raise NotParsable("bad optional key")
    return _key(data, at + 1) if data[at] == 1 else None


def _mint_init(kind: str, accounts: list[str], data: bytes, rent: bool) -> Json:
    _need(accounts, 2 if rent else 1)
    info: Json = {"mint": accounts[0], "decimals": data[1], "mintAuthority": _key(data, 2)}
    if rent:
        info["rentSysvar"] = accounts[1]
    if (freeze := _optional_key(data, 34)) is not None:
        info["freezeAuthority"] = freeze
    return _typed(kind, info)


def _token(accounts: list[str], data: bytes) -> Json:  # one branch per opcode
    if not accounts or not data:
        raise NotParsable("no accounts or data")
    tag = data[0]
    a = accounts
    if tag == 0:
        return _mint_init("initializeMint", a, data, rent=True)
    if tag == 20:
        return _mint_init("initializeMint2", a, data, rent=False)
    if tag == 1:
        _need(a, 4)
        return _typed(
            "initializeAccount",
            {"account": a[0], "mint": a[1], "owner": a[2], "rentSysvar": a[3]},
        )
    if tag == 16:
        _need(a, 3)
        return _typed(
            "initializeAccount2",
            {"account": a[0], "mint": a[1], "owner": _key(data, 1), "rentSysvar": a[2]},
        )
    if tag == 18:
        _need(a, 2)
        return _typed("initializeAccount3", {"account": a[0], "mint": a[1], "owner": _key(data, 1)})
    if tag in (2, 19):
        _need(a, 3 if tag == 2 else 2)
        first_signer = 2 if tag == 2 else 1
        info: Json = {"multisig": a[0]}
        if tag == 2:
            info["rentSysvar"] = a[1]
        info.update({"signers": a[first_signer:], "m": data[1]})
        return _typed("initializeMultisig" if tag == 2 else "initializeMultisig2", info)
    if tag in (3, 4, 7, 8):
        _need(a, 3)
        amount = str(_u64(data, 1))
        if tag == 3:
            info = {"source": a[0], "destination": a[1], "amount": amount}
            return _typed("transfer", _signers(info, 2, a, "authority", "multisigAuthority"))
        if tag == 4:
            info = {"source": a[0], "delegate": a[1], "amount": amount}
            return _typed("approve", _signers(info, 2, a, "owner", "multisigOwner"))
        if tag == 7:
            info = {"mint": a[0], "account": a[1], "amount": amount}
            return _typed("mintTo", _signers(info, 2, a, "mintAuthority", "multisigMintAuthority"))
        info = {"account": a[0], "mint": a[1], "amount": amount}
        return _typed("burn", _signers(info, 2, a, "authority", "multisigAuthority"))
    if tag == 5:
        _need(a, 2)
        return _typed("revoke", _signers({"source": a[0]}, 1, a, "owner", "multisigOwner"))
    if tag == 6:
        _need(a, 2)
        if data[1] >= len(_AUTHORITY_TYPES):
            raise NotParsable("unknown authority type")
        kind = _AUTHORITY_TYPES[data[1]]
        info = {
            "account" if kind in _ACCOUNT_AUTHORITIES else "mint": a[0],
            "authorityType": kind,
            "newAuthority": _optional_key(data, 2),
        }
        return _typed("setAuthority", _signers(info, 1, a, "authority", "multisigAuthority"))
    if tag == 9:
        _need(a, 3)
        info = {"account": a[0], "destination": a[1]}
        return _typed("closeAccount", _signers(info, 2, a, "owner", "multisigOwner"))
    if tag in (10, 11):
        _need(a, 3)
        info = {"account": a[0], "mint": a[1]}
        kind = "freezeAccount" if tag == 10 else "thawAccount"
        return _typed(kind, _signers(info, 2, a, "freezeAuthority", "multisigFreezeAuthority"))
    if tag in (12, 13, 14, 15):
        amount_ui = ui_token_amount(_u64(data, 1), data[9])
        if tag == 12:
            _need(a, 4)
            info = {"source": a[0], "mint": a[1], "destination": a[2], "tokenAmount": amount_ui}
            return _typed("transferChecked", _signers(info, 3, a, "authority", "multisigAuthority"))
        if tag == 13:
            _need(a, 4)
            info = {"source": a[0], "mint": a[1], "delegate": a[2], "tokenAmount": amount_ui}
            return _typed("approveChecked", _signers(info, 3, a, "owner", "multisigOwner"))
        _need(a, 3)
        if tag == 14:
            info = {"mint": a[0], "account": a[1], "tokenAmount": amount_ui}
            return _typed(
                "mintToChecked", _signers(info, 2, a, "mintAuthority", "multisigMintAuthority")
            )
        info = {"account": a[0], "mint": a[1], "tokenAmount": amount_ui}
        return _typed("burnChecked", _signers(info, 2, a, "authority", "multisigAuthority"))
    if tag == 17:
        return _typed("syncNative", {"account": a[0]})
    if tag == 21 and len(data) == 1:  # with extension types: not parsed here
        return _typed("getAccountDataSize", {"mint": a[0]})
    if tag == 22:
        return _typed("initializeImmutableOwner", {"account": a[0]})
    if tag == 23:
        return _typed("amountToUiAmount", {"mint": a[0], "amount": str(_u64(data, 1))})
    if tag == 24:
        return _typed("uiAmountToAmount", {"mint": a[0], "uiAmount": data[1:].decode()})
    raise NotParsable(f"token instruction {tag} is not parsed here")


def _associated_token(accounts: list[str], data: bytes) -> Json:
    if not accounts:
        raise NotParsable("no accounts")
    kind = 0 if not data else data[0] if len(data) == 1 else -1
    if kind in (0, 1):
        _need(accounts, 6)
        names = ("source", "account", "wallet", "mint", "systemProgram", "tokenProgram")
        info = dict(zip(names, accounts, strict=False))
        return _typed("create" if kind == 0 else "createIdempotent", info)
    if kind == 2:
        _need(accounts, 7)
        nested = (
            "nestedSource", "nestedMint", "destination", "nestedOwner", "ownerMint", "wallet",
            "tokenProgram",
        )  # fmt: skip
        return _typed("recoverNested", dict(zip(nested, accounts, strict=False)))
    raise NotParsable("unknown associated token instruction")


def _memo(accounts: list[str], data: bytes) -> Any:
    return data.decode()


_PROGRAMS: dict[str, tuple[str, Parser]] = {
    SYSTEM: ("system", _system),
    TOKEN: ("spl-token", _token),
    TOKEN_2022: ("spl-token", _token),
    ASSOCIATED_TOKEN: ("spl-associated-token-account", _associated_token),
    **{memo_id: ("spl-memo", _memo) for memo_id in MEMO_PROGRAMS},
}

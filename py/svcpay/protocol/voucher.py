"""Session vouchers (docs/adr/0024): what a payer signs per request, and how a redeem proves
it on chain. Pure: no I/O.

A voucher says "the provider may take `cumulative` base units from session `channel`, in
all". The signed message is MPP's Solana session voucher, 50 bytes: `0x56 0x01 | channel
(32) | cumulative u64 LE | expiry i64 LE`, so the wire (`SignedVoucher.to_json_dict()`, MPP's
`{voucher: {channelId, cumulativeAmount, expiresAt}, signer, signature, signatureType}`)
names the same bytes the program checks. `ed25519_instruction` builds the precompile
instruction a redeem transaction carries, every offset pointing into its own data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

VOUCHER_LEN = 50
VOUCHER_TAG = b"\x56\x01"
ED25519_PROGRAM = Pubkey.from_string("Ed25519SigVerify111111111111111111111111111")
_THIS_INSTRUCTION = 0xFFFF
_OFFSETS = struct.Struct("<7H")
U64_MAX = 2**64 - 1


class VoucherError(ValueError):
    """A voucher is malformed or its signature does not verify; the message says which."""


def voucher_message(channel: Pubkey, cumulative: int, expiry: int = 0) -> bytes:
    """The 50 bytes a session's key signs."""
    if not 0 <= cumulative <= U64_MAX:
        raise VoucherError("cumulativeAmount must be a u64")
    if not -(2**63) <= expiry < 2**63:
        raise VoucherError("expiresAt must be an i64")
    return VOUCHER_TAG + bytes(channel) + struct.pack("<Qq", cumulative, expiry)


@dataclass(frozen=True)
class SignedVoucher:
    channel: Pubkey  # the session's address
    cumulative: int  # base units, in all
    expiry: int  # unix seconds; 0 for none
    signer: Pubkey
    signature: Signature

    @classmethod
    def sign(cls, key: Keypair, channel: Pubkey, cumulative: int, expiry: int = 0) -> SignedVoucher:
        message = voucher_message(channel, cumulative, expiry)
        return cls(channel, cumulative, expiry, key.pubkey(), key.sign_message(message))

    @property
    def message(self) -> bytes:
        return voucher_message(self.channel, self.cumulative, self.expiry)

    def verifies(self) -> bool:
        """Whether `signature` is `signer`'s over the message."""
        return self.signature.verify(self.signer, self.message)

    def to_json_dict(self) -> dict[str, Any]:
        """MPP's voucher credential."""
        voucher: dict[str, Any] = {
            "channelId": str(self.channel),
            "cumulativeAmount": str(self.cumulative),
        }
        if self.expiry:
            voucher["expiresAt"] = self.expiry
        return {
            "voucher": voucher,
            "signer": str(self.signer),
            "signature": str(self.signature),
            "signatureType": "ed25519",
        }

    @classmethod
    def from_json_dict(cls, data: Any) -> SignedVoucher:
        """Parses MPP's voucher credential (the signature is not checked: `verifies`)."""
        try:
            v = data["voucher"]
            if data.get("signatureType", "ed25519") != "ed25519":
                raise VoucherError("signatureType must be ed25519")
            cumulative = v["cumulativeAmount"]
            if not (isinstance(cumulative, str) and cumulative.isascii() and cumulative.isdigit()):
                raise VoucherError("cumulativeAmount must be a decimal string of base units")
            expiry = v.get("expiresAt", 0)
            if not isinstance(expiry, int) or isinstance(expiry, bool):
                raise VoucherError("expiresAt must be unix seconds")
            try:  # solders' parser (Rust): the hot path reads one per request
                signature = Signature.from_string(str(data["signature"]))
            except ValueError as e:
                raise VoucherError("signature must be 64 bytes, base58") from e
            signed = cls(
                Pubkey.from_string(str(v["channelId"])),
                int(cumulative),
                expiry,
                Pubkey.from_string(str(data["signer"])),
                signature,
            )
            voucher_message(signed.channel, signed.cumulative, signed.expiry)  # ranges
            return signed
        except VoucherError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise VoucherError(f"not a voucher: {type(e).__name__}: {e}") from e


def ed25519_instruction(vouchers: list[SignedVoucher]) -> Instruction:
    """The Ed25519 precompile instruction verifying `vouchers` (one entry each), with every
    offset pointing into its own data, as the program requires."""
    if not 0 < len(vouchers) <= 255:
        raise VoucherError("between 1 and 255 vouchers per precompile instruction")
    header = 2 + _OFFSETS.size * len(vouchers)
    offsets, payload = b"", b""
    for v in vouchers:
        key_at = header + len(payload)
        sig_at = key_at + 32
        msg_at = sig_at + 64
        message = v.message
        offsets += _OFFSETS.pack(
            sig_at, _THIS_INSTRUCTION, key_at, _THIS_INSTRUCTION, msg_at, len(message),
            _THIS_INSTRUCTION,
        )  # fmt: skip
        payload += bytes(v.signer) + bytes(v.signature) + message
    if header + len(payload) > 0xFFFF:
        raise VoucherError("too many vouchers for one instruction")
    return Instruction(ED25519_PROGRAM, bytes([len(vouchers), 0]) + offsets + payload, [])

"""Session vouchers: MPP's 50-byte message, signed and verified, its JSON credential, and
the precompile instruction a redeem carries (every offset into its own data)."""

from __future__ import annotations

import struct

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from svcpay.protocol.voucher import (
    ED25519_PROGRAM,
    SignedVoucher,
    VoucherError,
    ed25519_instruction,
    voucher_message,
)


def test_the_message_is_mpps_fifty_bytes() -> None:
    channel = Pubkey.new_unique()
    m = voucher_message(channel, 1_000, 1_700_000_000)
    assert len(m) == 50 and m[:2] == b"\x56\x01" and m[2:34] == bytes(channel)
    assert struct.unpack("<Qq", m[34:]) == (1_000, 1_700_000_000)
    with pytest.raises(VoucherError):
        voucher_message(channel, 2**64)
    with pytest.raises(VoucherError):
        voucher_message(channel, -1)


def test_a_signed_voucher_verifies_and_survives_its_json() -> None:
    key, channel = Keypair(), Pubkey.new_unique()
    v = SignedVoucher.sign(key, channel, 42, 99)
    assert v.verifies()
    wire = v.to_json_dict()
    assert wire["voucher"] == {"channelId": str(channel), "cumulativeAmount": "42", "expiresAt": 99}
    assert wire["signatureType"] == "ed25519"
    back = SignedVoucher.from_json_dict(wire)
    assert back == v and back.verifies()
    forged = SignedVoucher.from_json_dict(
        {**wire, "voucher": {**wire["voucher"], "cumulativeAmount": "43"}}
    )
    assert not forged.verifies()  # the amount is what was signed


@pytest.mark.parametrize(
    "broken",
    [
        {},
        {"voucher": {"channelId": "x", "cumulativeAmount": "1"}, "signer": "x", "signature": "x"},
        {"voucher": {"channelId": "11111111111111111111111111111111", "cumulativeAmount": 1},
         "signer": "11111111111111111111111111111111", "signature": "1"},
        {"voucher": {"channelId": "11111111111111111111111111111111", "cumulativeAmount": "-1"},
         "signer": "11111111111111111111111111111111", "signature": "1"},
        {"voucher": {"channelId": "11111111111111111111111111111111",
                     "cumulativeAmount": str(2**64)},
         "signer": "11111111111111111111111111111111", "signature": "1" * 88},
    ],
)  # fmt: skip
def test_malformed_vouchers_are_refused_with_a_reason(broken: dict[str, object]) -> None:
    with pytest.raises(VoucherError):
        SignedVoucher.from_json_dict(broken)


def test_the_precompile_instruction_points_into_its_own_data() -> None:
    vouchers = [SignedVoucher.sign(Keypair(), Pubkey.new_unique(), n) for n in (1, 2, 3)]
    ix = ed25519_instruction(vouchers)
    data = bytes(ix.data)
    assert ix.program_id == ED25519_PROGRAM and not ix.accounts and data[0] == 3
    for i, v in enumerate(vouchers):
        sig_at, sig_ix, key_at, key_ix, msg_at, msg_len, msg_ix = struct.unpack_from(
            "<7H", data, 2 + 14 * i
        )
        assert sig_ix == key_ix == msg_ix == 0xFFFF
        assert data[key_at : key_at + 32] == bytes(v.signer)
        assert data[sig_at : sig_at + 64] == bytes(v.signature)
        assert data[msg_at : msg_at + msg_len] == v.message

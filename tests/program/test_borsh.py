"""svcpay.program.borsh, the generated client's runtime: Borsh as Anchor writes it (byte
vectors from the Borsh specification), strict where Anchor's deserializer is, and Anchor's
helpers (account fetches, custom error codes) against the validator."""

from __future__ import annotations

import pytest
from construct import ConstructError, Container
from solana.rpc.commitment import Confirmed
from solana.rpc.core import RPCException
from solana.rpc.models import TxOpts
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from svcpay.program import borsh
from svcpay.program.client import BillingClient
from svcpay.program.generated import errors as generated_errors
from svcpay.program.generated.accounts.plan import Plan
from svcpay.program.generated.errors import custom
from svcpay.program.generated.types import party, subscription_status
from svcpay.program.generated.types.update_plan_args import UpdatePlanArgs
from tests.support.billing import USDC, Billing, create_plan_ix
from tests.support.chain import Chain

KEY = Pubkey.from_string("SysvarC1ock11111111111111111111111111111111")


@pytest.mark.parametrize(
    ("codec", "value", "encoded"),
    [
        (borsh.U8, 255, "ff"),
        (borsh.U16, 0x0102, "0201"),
        (borsh.U32, 1, "01000000"),
        (borsh.U64, 2**64 - 1, "ff" * 8),
        (borsh.I64, -2, "fe" + "ff" * 7),
        (borsh.U128, 2**64, "00" * 8 + "01" + "00" * 7),
        (borsh.I128, -1, "ff" * 16),
        (borsh.I8, -128, "80"),
        (borsh.F64, 1.5, "000000000000f83f"),
        (borsh.Bool, True, "01"),
        (borsh.Bool, False, "00"),
        (borsh.String, "hé", "03000000" + "68c3a9"),
        (borsh.Bytes, b"\x01\x02", "02000000" + "0102"),
        (borsh.Vec(borsh.U16), [1, 2], "02000000" + "0100" + "0200"),
        (borsh.Option(borsh.U32), None, "00"),
        (borsh.Option(borsh.U32), 7, "01" + "07000000"),
        (borsh.COption(borsh.U64), None, "00000000" + "00" * 8),  # fixed size, as SPL's
        (borsh.COption(borsh.U64), 3, "01000000" + "0300000000000000"),
        (borsh.U8[3], [1, 2, 3], "010203"),
        (borsh.BorshPubkey, KEY, bytes(KEY).hex()),
    ],
)
def test_each_codec_writes_and_reads_borsh(codec: object, value: object, encoded: str) -> None:
    built = codec.build(value)  # type: ignore[attr-defined]
    assert built.hex() == encoded
    assert codec.parse(built) == value  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("codec", "data"),
    [
        (borsh.Bool, b"\x02"),  # a bool is 0 or 1
        (borsh.Option(borsh.U8), b"\x02\x00"),  # so is an option's tag
        (borsh.COption(borsh.U8), b"\x02\x00\x00\x00\x00"),
        (borsh.COption(borsh.U8), b"\x00\x00\x00\x00"),  # None still holds the value's byte
        (subscription_status.layout, b"\x05"),  # five variants: 0..4
        (borsh.U64, b"\x00" * 7),  # short
        (borsh.String, b"\x02\x00\x00\x00\xff\xfe"),  # not UTF-8
    ],
)
def test_what_anchor_would_refuse_does_not_parse(codec: object, data: bytes) -> None:
    with pytest.raises((ConstructError, UnicodeDecodeError)):
        codec.parse(data)  # type: ignore[attr-defined]


def test_a_struct_is_its_fields_in_order_and_parses_to_exactly_them() -> None:
    layout = borsh.CStruct("a" / borsh.U8, "b" / borsh.Option(borsh.BorshPubkey))
    data = layout.build({"a": 1, "b": KEY})
    assert data == b"\x01\x01" + bytes(KEY)
    parsed = layout.parse(data)
    assert isinstance(parsed, Container) and dict(parsed) == {"a": 1, "b": KEY}
    with pytest.raises(KeyError):
        layout.build({"a": 1})  # every field, even an option's None, is given


def test_an_enum_is_its_variant_index_then_the_variants_fields() -> None:
    layout = borsh.EnumForCodegen(
        "Unit" / borsh.CStruct(), "Pair" / borsh.CStruct("x" / borsh.U8, "y" / borsh.U16)
    )
    assert layout.build({"Unit": {}}) == b"\x00"
    assert layout.build({"Pair": {"x": 1, "y": 2}}) == b"\x01\x01\x02\x00"
    assert layout.parse(b"\x01\x01\x02\x00") == {"Pair": {"x": 1, "y": 2}}
    for bad in ({"Other": {}}, {"Unit": {}, "Pair": {"x": 1, "y": 2}}, {}):
        with pytest.raises(ConstructError):
            layout.build(bad)
    with pytest.raises(TypeError):
        borsh.EnumForCodegen(borsh.CStruct())  # unnamed variant


def test_generated_types_round_trip_through_the_runtime() -> None:
    args = UpdatePlanArgs(billing_authority=KEY, grace_secs=None)
    data = UpdatePlanArgs.layout.build(args.to_encodable())
    assert data == b"\x01" + bytes(KEY) + b"\x00"
    assert UpdatePlanArgs.from_decoded(UpdatePlanArgs.layout.parse(data)) == args
    for variant in (subscription_status.Paused(), party.Provider()):
        module = subscription_status if isinstance(variant, subscription_status.Paused) else party
        encoded = module.layout.build(variant.to_encodable())
        assert encoded == bytes([variant.discriminator])
        assert module.from_decoded(module.layout.parse(encoded)) == variant


def test_an_account_of_another_type_is_refused() -> None:
    with pytest.raises(borsh.AccountInvalidDiscriminator):
        Plan.decode(b"\x00" * 8 + b"\x00" * 200)


@pytest.mark.anyio
async def test_fetch_multiple_reads_accounts_in_order(
    client: BillingClient, billing: Billing
) -> None:
    plans = [billing.plan(), billing.plan(amount=2 * USDC)]
    addresses = [plans[0].address, Keypair().pubkey(), plans[1].address]
    fetched = await Plan.fetch_multiple(client.rpc, addresses, commitment=Confirmed)
    assert [p.amount if p else None for p in fetched] == [10 * USDC, None, 2 * USDC]
    many = await borsh.get_multiple_accounts(client.rpc, [plans[0].address] * 230, batch_size=2)
    assert len(many) == 230 and all(a and a.pubkey == plans[0].address for a in many)


@pytest.mark.anyio
async def test_a_preflight_failure_maps_to_the_programs_error(
    client: BillingClient, chain: Chain, billing: Billing
) -> None:
    plan = billing.plan()
    authority = chain.funded_keypair()
    ix = create_plan_ix(authority.pubkey(), 1, plan.mint, plan.destination, KEY, amount=0)
    blockhash = (await client.rpc.get_latest_blockhash(Confirmed)).value.blockhash
    tx = VersionedTransaction(
        MessageV0.try_compile(authority.pubkey(), [ix], [], blockhash), [authority]
    )
    with pytest.raises(RPCException) as failed:
        await client.rpc.send_transaction(tx, TxOpts(preflight_commitment=Confirmed))
    assert isinstance(generated_errors.from_tx_error(failed.value), custom.ZeroAmount)
    code_and_logs = borsh.extract_code_and_logs(failed.value.args[0], plan.address)
    assert code_and_logs is None  # another program's error is not ours

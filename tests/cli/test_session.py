"""`svcpay session open|show|top-up|close`: a payer escrows a deposit, tops it up, and gets
the rest back at close (the provider at once; the payer after asking and the window)."""

from __future__ import annotations

from pathlib import Path

from solders.pubkey import Pubkey

from svcpay.program import sessions
from svcpay.program.generated.accounts.session import Session
from svcpay.protocol.voucher import SignedVoucher
from tests.cli.conftest import Cli, keyfile
from tests.support.billing import USDC
from tests.support.chain import Chain


def test_open_top_up_show_and_close(cli: Cli, chain: Chain, tmp_path: Path) -> None:
    payer, provider = chain.funded_keypair(), chain.funded_keypair()
    mint = chain.create_mint()
    payer_token = chain.token_account(payer.pubkey(), mint, 50 * USDC)
    recipient = chain.token_account(provider.pubkey(), mint)
    payer_key, provider_key = keyfile(tmp_path, payer), keyfile(tmp_path, provider)

    opened = cli.ok(
        "session", "open", "--mint", str(mint), "--pay-to", str(recipient), "--deposit", "10",
        "--price", "1000u", "--dispute", "1h", "--keypair", payer_key,
    )  # fmt: skip
    address = opened["session"]
    assert opened["status"] == "Open" and opened["deposit"] == str(10 * USDC)
    assert opened["provider"] == str(provider.pubkey()) and opened["price"] == "1000"
    assert chain.token_state(payer_token)["amount"] == 40 * USDC

    topped = cli.ok("session", "top-up", address, "5", "--keypair", payer_key)
    assert topped["deposit"] == str(15 * USDC)
    refused = cli("session", "top-up", address, "5", "--keypair", provider_key)
    assert refused.code == 1 and "only the session's payer" in refused.err
    assert cli.ok("session", "show", address)["deposit"] == str(15 * USDC)

    asked = cli.ok("session", "close", address, "--keypair", payer_key)  # within the window
    assert asked["status"] == "Closing" and asked["closableAt"] > 0

    # The provider redeems 3 USDC on a voucher, then closes: 12 USDC go back.
    session = Pubkey.from_string(address)
    data = chain.account(session)
    assert data is not None
    voucher = SignedVoucher.sign(payer, session, 3 * USDC)
    chain.send_ok(sessions.redeem(Session.decode(data.data), session, voucher), [provider])
    closed = cli.ok("session", "close", address, "--keypair", provider_key)
    assert closed["status"] == "Closed" and closed["refunded"] == str(12 * USDC)
    assert closed["tombstone"] is True and closed["unpaid"] == "0"
    shown = cli.ok("session", "show", address)
    assert shown == {"session": address, "status": "Closed", "tombstone": True}
    assert chain.token_state(payer_token)["amount"] == 47 * USDC
    assert chain.token_state(recipient)["amount"] == 3 * USDC
    missing = cli("session", "show", str(Pubkey.new_unique()))
    assert missing.code == 3 and "no session at" in missing.err

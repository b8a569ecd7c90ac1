"""The command line on Token-2022 mints (docs/adr/0030): `token create-mint --token-2022`
with a transfer fee and a transfer hook; `token mint|account|balance` on such a mint; `plan
create` warning about what the mint's extensions do to payments and refusing, before
sending, what the program refuses; `subscribe` paying from the Token-2022 account. Real
Token-2022 and the workspace's test hook on the session's validator."""

from __future__ import annotations

from pathlib import Path

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address

from svcpay.localnet import test_hook
from svcpay.program import pda
from svcpay.protocol import token2022 as t22
from svcpay.protocol.programs import TOKEN_2022_PROGRAM, TOKEN_PROGRAM
from tests.cli.conftest import Cli, keyfile
from tests.support.chain import Chain

HOOK = str(test_hook.HOOK_PROGRAM)


def fee_and_hook_mint(cli: Cli, key: str) -> str:
    made = cli.ok("token", "create-mint", "--token-2022", "--transfer-fee-bps", "150",
                  "--max-fee", "0.01", "--transfer-hook", HOOK, "-k", key)  # fmt: skip
    return str(made["mint"])


def test_create_mint_token_2022_with_a_transfer_fee_and_a_hook(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    me = chain.funded_keypair()
    key = keyfile(tmp_path, me)

    made = cli.ok("token", "create-mint", "--token-2022", "--transfer-fee-bps", "150",
                  "--max-fee", "0.01", "--transfer-hook", HOOK, "-k", key)  # fmt: skip

    assert made["tokenProgram"] == str(TOKEN_2022_PROGRAM) and made["decimals"] == 6
    extensions = made["extensions"]
    assert set(extensions) == {"transferFeeConfig", "transferHook"}
    fee = extensions["transferFeeConfig"]
    assert (fee["basisPoints"], fee["maximumFee"]) == (150, 10_000)
    assert fee["authority"] == str(me.pubkey())
    assert extensions["transferHook"] == {"program": HOOK, "authority": str(me.pubkey())}
    account = chain.account(Pubkey.from_string(made["mint"]))
    assert account is not None and account.owner == TOKEN_2022_PROGRAM
    info = t22.mint_info(account.owner, account.data)
    assert info.hook_program == test_hook.HOOK_PROGRAM and info.fee_for(1_000_000, 0) == 10_000

    human = cli("token", "create-mint", "--token-2022", "--decimals", "2",
                "--transfer-fee-bps", "0", "--max-fee", "250u", "-k", key)  # fmt: skip
    assert human.code == 0
    assert "token program   Token-2022 (TokenzQd" in human.out
    assert "transfer fee    0 bps, at most 2.50 a transfer" in human.out

    plain = cli.ok("token", "create-mint", "--token-2022", "-k", key)
    assert (plain["tokenProgram"], plain["extensions"]) == (str(TOKEN_2022_PROGRAM), {})
    spl = cli.ok("token", "create-mint", "-k", key)
    assert (spl["tokenProgram"], spl["extensions"]) == (str(TOKEN_PROGRAM), {})


def test_mint_account_and_balance_on_a_token_2022_mint(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    me = chain.funded_keypair()
    key = keyfile(tmp_path, me)
    friend = Keypair().pubkey()
    mint = fee_and_hook_mint(cli, key)
    mint_key = Pubkey.from_string(mint)
    mine = get_associated_token_address(me.pubkey(), mint_key, TOKEN_2022_PROGRAM)

    assert cli.ok("token", "balance", mint, "-k", key)["exists"] is False
    minted = cli.ok("token", "mint", mint, "12.5", "-k", key)
    assert (minted["account"], minted["tokenProgram"]) == (str(mine), str(TOKEN_2022_PROGRAM))
    assert (minted["amount"], minted["balance"]) == (12_500_000, 12_500_000)
    held = chain.account(mine)
    assert held is not None and held.owner == TOKEN_2022_PROGRAM
    assert len(held.data) > 165  # the fee mint's accounts carry TransferFeeAmount
    assert cli("token", "balance", mint, "-k", key).out.strip() == "12.50"

    created = cli.ok("token", "account", mint, "--owner", str(friend), "-k", key)
    theirs = get_associated_token_address(friend, mint_key, TOKEN_2022_PROGRAM)
    assert (created["created"], created["account"]) == (True, str(theirs))
    assert cli.ok("token", "account", mint, "--owner", str(friend), "-k", key)["created"] is False
    cli.ok("token", "mint", mint, "1500000u", "--to", created["account"], "-k", key)
    shown = cli.ok("token", "balance", mint, "--owner", str(friend), "-k", key)
    assert (shown["amount"], shown["account"], shown["amountDecimal"]) == (
        1_500_000,
        str(theirs),
        "1.50",
    )
    assert cli.ok("token", "balance", mint, "--account", str(theirs))["amount"] == 1_500_000

    # A Token-2022 token account (extended data) where a mint goes: named, one line.
    swapped = cli("token", "mint", str(mine), "1", "-k", key)
    assert swapped.code == 3 and "is a token account, not an SPL Token mint" in swapped.err
    # A Token-2022 account of another mint as --to.
    other = cli.ok("token", "create-mint", "--token-2022", "-k", key)["mint"]
    wrong = cli("token", "mint", other, "1", "--to", str(mine), "-k", key)
    assert wrong.code == 2 and f"holds mint {mint}, not {other}" in wrong.err


def test_plan_create_warns_what_a_fee_and_a_hook_do_to_payments(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    provider = chain.funded_keypair()
    key = keyfile(tmp_path, provider)
    mint = fee_and_hook_mint(cli, key)
    destination = cli.ok("token", "account", mint, "-k", key)["account"]
    create = ["plan", "create", "--mint", mint, "--destination", destination, "--amount",
              "0.30", "--period", "30d", "-k", key]  # fmt: skip

    human = cli(*create, "--plan-id", "1")

    assert human.code == 0, human.err
    warnings = human.err.strip().splitlines()
    assert len(warnings) == 2 and all(w.startswith("svcpay: warning: ") for w in warnings)
    assert (
        "transfer fee: the provider receives the price less the fee, 150 bps up to 0.01 "
        "(on this price, 0.30: 0.0045 withheld, 0.2955 received)" in warnings[0]
    )
    assert f"transfers call program {HOOK}, which can refuse a renewal" in warnings[1]
    assert "token program      Token-2022" in human.out
    plan = chain.account(pda.plan_address(provider.pubkey(), 1))
    assert plan is not None

    answer = cli(*create, "--plan-id", "2", "--json")
    assert answer.code == 0 and answer.err == ""  # with --json the warnings are in the answer
    data = answer.json
    assert data["tokenProgram"] == str(TOKEN_2022_PROGRAM) and data["amount"] == 300_000
    assert [w["extension"] for w in data["warnings"]] == ["transferFeeConfig", "transferHook"]
    assert data["warnings"][1]["message"] == warnings[1].removeprefix("svcpay: warning: ")


def test_plan_create_refuses_a_hook_program_the_cluster_does_not_run(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    """A mint whose transfer hook names an absent program (or an account that is no
    program) fails every transfer: `plan create` says so and creates nothing."""
    provider = chain.funded_keypair()
    key = keyfile(tmp_path, provider)
    for hook in (Keypair().pubkey(), chain.funded_keypair().pubkey()):
        mint = cli.ok("token", "create-mint", "--token-2022", "--transfer-hook", str(hook),
                      "-k", key)["mint"]  # fmt: skip
        destination = cli.ok("token", "account", mint, "-k", key)["account"]
        refused = cli("plan", "create", "--mint", mint, "--destination", destination,
                      "--amount", "1", "--period", "30d", "--plan-id", "7", "-k", key)  # fmt: skip
        assert refused.code == 1, refused.err
        assert f"the mint's transfer hook names program {hook}" in refused.err
        assert "no subscriber could pay" in refused.err and "Traceback" not in refused.err
        assert chain.account(pda.plan_address(provider.pubkey(), 7)) is None


def test_plan_create_warns_about_a_permanent_delegate_pausing_and_interest(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    provider = chain.funded_keypair()
    key = keyfile(tmp_path, provider)
    mint = test_hook.create_mint(chain, authority=provider, permanent_delegate=provider.pubkey(),
                                 pausable=True, interest_rate=500)  # fmt: skip
    destination = cli.ok("token", "account", str(mint), "-k", key)["account"]

    data = cli.ok("plan", "create", "--plan-id", "1", "--mint", str(mint), "--destination",
                  destination, "--amount", "1", "--period", "1d", "-k", key)  # fmt: skip

    said = {w["extension"]: w["message"] for w in data["warnings"]}
    assert set(said) == {"permanentDelegate", "pausable", "interestBearingConfig"}
    assert f"{provider.pubkey()} can move any holder's tokens" in said["permanentDelegate"]
    assert "renewals go past due while it is paused (MintPaused)" in said["pausable"]
    assert "prices are raw base units" in said["interestBearingConfig"]


@pytest.mark.parametrize(
    ("extensions", "memo_destination", "said"),
    [
        (
            {"non_transferable": True},
            False,
            "MintNonTransferable: the mint is non-transferable: its tokens cannot pay a plan",
        ),
        (
            {},
            True,
            "DestinationRequiresMemo: the destination requires a memo on incoming transfers",
        ),
        (
            {"default_frozen": True},
            False,
            "is frozen, and the program refuses a frozen destination",
        ),
    ],
    ids=["non-transferable", "memo-required-destination", "frozen-destination"],
)
def test_plan_create_refuses_before_sending_what_the_program_refuses(
    cli: Cli,
    chain: Chain,
    tmp_path: Path,
    extensions: dict[str, object],
    memo_destination: bool,
    said: str,
) -> None:
    provider = chain.funded_keypair()
    key = keyfile(tmp_path, provider)
    if extensions.get("default_frozen"):
        extensions = {**extensions, "freeze_authority": provider.pubkey()}
    mint = test_hook.create_mint(chain, authority=provider, **extensions)
    destination = chain.token_account(provider.pubkey(), mint, program_id=TOKEN_2022_PROGRAM)
    if memo_destination:
        grow = t22.reallocate(
            destination, chain.payer.pubkey(), provider.pubkey(), [t22.ExtensionType.MEMO_TRANSFER]
        )
        memo = t22.enable_required_memo_transfers(destination, provider.pubkey())
        chain.send_ok([grow, memo], [chain.payer, provider])
    before = chain.balance(provider.pubkey())

    create = ["plan", "create", "--plan-id", "1", "--mint", str(mint), "--destination",
              str(destination), "--amount", "1", "--period", "1d", "-k", key]  # fmt: skip
    refused = cli(*create)

    assert refused.code == 1 and said in refused.err, refused.err
    assert chain.account(pda.plan_address(provider.pubkey(), 1)) is None
    assert chain.balance(provider.pubkey()) == before  # nothing was sent
    if extensions.get("non_transferable"):
        assert cli(*create, "--json").json["error"] == "MintNonTransferable"


def test_subscribe_pays_from_the_token_2022_account_through_the_hook(
    cli: Cli, chain: Chain, tmp_path: Path
) -> None:
    provider, subscriber = chain.funded_keypair(), chain.funded_keypair()
    key, sub_key = keyfile(tmp_path, provider), keyfile(tmp_path, subscriber)
    mint = test_hook.pyusd_like(chain, authority=provider)
    destination = cli.ok("token", "account", str(mint), "-k", key)["account"]
    plan = cli.ok("plan", "create", "--plan-id", "1", "--mint", str(mint), "--destination",
                  destination, "--amount", "2", "--period", "30d", "-k", key)  # fmt: skip
    assert {w["extension"] for w in plan["warnings"]} == {
        "transferFeeConfig",
        "transferHook",
        "permanentDelegate",
    }
    cli.ok("token", "mint", str(mint), "5", "--to", str(subscriber.pubkey()), "-k", key)

    subscribed = cli.ok("subscribe", plan["plan"], "-k", sub_key)

    paying = get_associated_token_address(subscriber.pubkey(), mint, TOKEN_2022_PROGRAM)
    assert subscribed["tokenAccount"] == str(paying)
    assert cli.ok("token", "balance", str(mint), "--account", destination)["amount"] == 2_000_000
    assert cli.ok("token", "balance", str(mint), "-k", sub_key)["amount"] == 3_000_000
    assert test_hook.transfers(chain, mint) == 1  # the payment went through the hook


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--transfer-fee-bps", "50", "--max-fee", "1"],
         "--transfer-fee-bps and --max-fee need --token-2022"),
        (["--transfer-hook", HOOK], "--transfer-hook needs --token-2022"),
        (["--token-2022", "--transfer-fee-bps", "10001", "--max-fee", "1"],
         "basis points must lie between 0 and 10000"),
        (["--token-2022", "--transfer-fee-bps", "-1", "--max-fee", "1"],
         "basis points must lie between 0 and 10000"),
        (["--token-2022", "--transfer-fee-bps", "50"],
         "give --transfer-fee-bps and --max-fee together"),
        (["--token-2022", "--max-fee", "1"], "give --transfer-fee-bps and --max-fee together"),
        (["--token-2022", "--transfer-fee-bps", "5", "--max-fee", "lots"], "not an amount"),
        (["--token-2022", "--transfer-hook", "nope"], "not a base58 Solana address"),
    ],
)  # fmt: skip
def test_create_mint_usage_errors(offline_cli: Cli, argv: list[str], said: str) -> None:
    result = offline_cli("token", "create-mint", *argv)
    assert result.code == 2 and said in result.err, result.err
    as_json = offline_cli("token", "create-mint", *argv, "--json")
    assert as_json.code == 2 and as_json.json["error"] == "UsageError"

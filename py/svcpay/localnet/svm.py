"""An in-process Solana runtime: LiteSVM (through solders) with the real svc_billing binary.

Every transaction runs the built `target/deploy/svc_billing.so` in the Agave runtime that
LiteSVM embeds; tokens move through the real SPL Token program. Used by the tests and the
demo; nothing here mocks the chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solders.account import Account
from solders.clock import Clock
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from solders.transaction import VersionedTransaction
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import (
    InitializeMintParams,
    MintToParams,
    create_associated_token_account,
    get_associated_token_address,
    initialize_mint,
    mint_to,
)

from svcpay.program import errors
from svcpay.program.events import Event, decode_logs
from svcpay.program.generated.program_id import PROGRAM_ID

ROOT = Path(__file__).resolve().parents[3]
PROGRAM_SO = ROOT / "target" / "deploy" / "svc_billing.so"
MINT_SIZE = 82


class ProgramBinaryMissing(RuntimeError):
    """The program has not been built (scripts/build-program)."""


class TransactionFailed(RuntimeError):
    """A transaction expected to succeed failed; carries its result."""

    def __init__(self, result: TxResult) -> None:
        super().__init__(f"transaction failed: {result.error}\n" + "\n".join(result.logs))
        self.result = result


def _get(obj: Any, name: str) -> Any:
    """solders exposes some metadata fields as methods and others as attributes."""
    value = getattr(obj, name)
    return value() if callable(value) else value


@dataclass
class TxResult:
    """Outcome of one transaction: logs, compute units, decoded events or the error."""

    ok: bool
    logs: list[str]
    compute_units: int
    error: str | None = None
    events: list[Event] = field(default_factory=list)

    @property
    def program_error(self) -> errors.ProgramError | None:
        return errors.from_logs_or_error(self.error) if self.error else None

    def event(self, name: str) -> Event:
        """The single event called `name` (ValueError unless exactly one was emitted)."""
        found = [e for e in self.events if e.name == name]
        if len(found) != 1:
            raise ValueError(f"expected one {name} event, got {[e.name for e in self.events]}")
        return found[0]


class LocalChain:
    """LiteSVM with svc_billing loaded at its program id, plus SPL Token helpers."""

    def __init__(self, program: Path = PROGRAM_SO) -> None:
        if not program.exists():
            raise ProgramBinaryMissing(
                f"{program} is missing: run scripts/build-program (scripts/test does it first)"
            )
        self.svm = LiteSVM()
        self.svm.add_program(PROGRAM_ID, program.read_bytes())
        self.payer = self.funded_keypair()

    # -- accounts and time ------------------------------------------------------------
    def funded_keypair(self, lamports: int = 10 * 10**9) -> Keypair:
        kp = Keypair()
        self.svm.airdrop(kp.pubkey(), lamports)
        return kp

    def account(self, address: Pubkey) -> Account | None:
        return self.svm.get_account(address)

    def clock(self) -> Clock:
        return self.svm.get_clock()

    def set_unix_timestamp(self, ts: int) -> None:
        c = self.svm.get_clock()
        self.svm.set_clock(
            Clock(c.slot, c.epoch_start_timestamp, c.epoch, c.leader_schedule_epoch, ts)
        )

    # -- transactions -----------------------------------------------------------------
    def send(self, ixs: list[Instruction], signers: list[Keypair]) -> TxResult:
        """Sends one transaction; the first signer pays the fee."""
        msg = MessageV0.try_compile(signers[0].pubkey(), ixs, [], self.svm.latest_blockhash())
        raw = self.svm.send_transaction(VersionedTransaction(msg, signers))
        self.svm.expire_blockhash()
        if hasattr(raw, "err"):
            meta = _get(raw, "meta")
            logs = list(_get(meta, "logs"))
            return TxResult(
                False, logs, _get(meta, "compute_units_consumed"), str(_get(raw, "err"))
            )
        logs = list(_get(raw, "logs"))
        return TxResult(True, logs, _get(raw, "compute_units_consumed"), events=decode_logs(logs))

    def send_ok(self, ixs: list[Instruction], signers: list[Keypair]) -> TxResult:
        """Like `send`, raising TransactionFailed unless the transaction succeeded."""
        result = self.send(ixs, signers)
        if not result.ok:
            raise TransactionFailed(result)
        return result

    # -- SPL Token ----------------------------------------------------------------------
    def create_mint(self, decimals: int = 6, authority: Keypair | None = None) -> Pubkey:
        authority = authority or self.payer
        mint = Keypair()
        rent = self.svm.minimum_balance_for_rent_exemption(MINT_SIZE)
        self.send_ok(
            [
                create_account(
                    CreateAccountParams(
                        from_pubkey=self.payer.pubkey(),
                        to_pubkey=mint.pubkey(),
                        lamports=rent,
                        space=MINT_SIZE,
                        owner=TOKEN_PROGRAM_ID,
                    )
                ),
                initialize_mint(
                    InitializeMintParams(
                        decimals=decimals,
                        program_id=TOKEN_PROGRAM_ID,
                        mint=mint.pubkey(),
                        mint_authority=authority.pubkey(),
                        freeze_authority=None,
                    )
                ),
            ],
            [self.payer, mint],
        )
        return mint.pubkey()

    def token_account(self, owner: Pubkey, mint: Pubkey, amount: int = 0) -> Pubkey:
        """The owner's associated token account of `mint`, created, with `amount` minted."""
        ata = get_associated_token_address(owner, mint)
        ixs = [create_associated_token_account(self.payer.pubkey(), owner, mint)]
        if amount:
            ixs.append(
                mint_to(
                    MintToParams(
                        program_id=TOKEN_PROGRAM_ID,
                        mint=mint,
                        dest=ata,
                        mint_authority=self.payer.pubkey(),
                        amount=amount,
                    )
                )
            )
        self.send_ok(ixs, [self.payer])
        return ata

    def token_state(self, address: Pubkey) -> dict[str, Any]:
        """Balance and delegation of an SPL token account (its 165-byte layout)."""
        acct = self.account(address)
        if acct is None:
            raise KeyError(f"no token account at {address}")
        data = bytes(acct.data)
        has_delegate = int.from_bytes(data[72:76], "little") == 1
        return {
            "mint": Pubkey.from_bytes(data[0:32]),
            "owner": Pubkey.from_bytes(data[32:64]),
            "amount": int.from_bytes(data[64:72], "little"),
            "delegate": Pubkey.from_bytes(data[76:108]) if has_delegate else None,
            "delegated_amount": int.from_bytes(data[121:129], "little"),
        }

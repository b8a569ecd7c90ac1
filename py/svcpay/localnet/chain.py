"""A small synchronous chain client over JSON-RPC, for tests, the demo and benchmarks.

Sends transactions and reads back what happened (logs, compute units, decoded events, the
program error), creates SPL mints and token accounts with real instructions, and moves the
clock where the validator supports time travel. Works against any validator that speaks
Solana JSON-RPC; nothing here mocks the chain.
"""

from __future__ import annotations

import base64
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx
from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from solders.transaction import VersionedTransaction
from spl.token.constants import TOKEN_PROGRAM_ID
from spl.token.instructions import (
    create_associated_token_account,
    get_associated_token_address,
    initialize_mint,
    mint_to,
)
from spl.token.models import InitializeMintParams, MintToParams

from svcpay import stopping
from svcpay.program import errors
from svcpay.program.events import Event, decode_logs

MINT_SIZE = 82
CLOCK_SYSVAR = Pubkey.from_string("SysvarC1ock11111111111111111111111111111111")
SIMULATION_FAILED = -32002
CONFIRM_TIMEOUT = 60.0


class RpcError(RuntimeError):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"RPC error {code}: {message}")
        self.code, self.message, self.data = code, message, data


@dataclass
class TxResult:
    """Outcome of one transaction: logs, compute units, decoded events or the error."""

    ok: bool
    logs: list[str]
    compute_units: int
    error: str | None = None
    signature: str | None = None
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


class TransactionFailed(RuntimeError):
    """A transaction expected to succeed failed; carries its result."""

    def __init__(self, result: TxResult) -> None:
        super().__init__(f"transaction failed: {result.error}\n" + "\n".join(result.logs))
        self.result = result


@dataclass(frozen=True)
class AccountData:
    lamports: int
    owner: Pubkey
    data: bytes
    executable: bool


class Chain:
    """JSON-RPC client for a (local) cluster, with a funded fee payer. Every transaction is
    waited for until `confirmed`, and every read is at `confirmed` (docs/adr/0012), so what
    a test wrote is what it reads back, on a real cluster as on the drop-in."""

    def __init__(self, url: str, can_time_travel: bool = False) -> None:
        self.http = httpx.Client(timeout=30)
        self.url = url
        self.can_time_travel = can_time_travel
        self._sent: deque[bytes] = deque(maxlen=512)
        self.payer = self.funded_keypair()

    def rpc(self, method: str, *params: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        reply = self.http.post(self.url, json=body).json()
        if "error" in reply:
            err = reply["error"]
            raise RpcError(err["code"], err["message"], err.get("data"))
        return reply["result"]

    # -- accounts and time ------------------------------------------------------------
    def funded_keypair(self, lamports: int = 10 * 10**9) -> Keypair:
        return self.fund(Keypair(), lamports)

    def fund(self, keypair: Keypair, lamports: int = 10 * 10**9) -> Keypair:
        """Airdrops `lamports` to `keypair` and waits until it is confirmed."""
        self._confirm(self.rpc("requestAirdrop", str(keypair.pubkey()), lamports))
        return keypair

    def account(self, address: Pubkey) -> AccountData | None:
        config = {"encoding": "base64", "commitment": "confirmed"}
        value = self.rpc("getAccountInfo", str(address), config)["value"]
        if value is None:
            return None
        return AccountData(
            value["lamports"],
            Pubkey.from_string(value["owner"]),
            base64.b64decode(value["data"][0]),
            value["executable"],
        )

    def balance(self, address: Pubkey) -> int:
        """Lamports at `address`, at `confirmed` (what this client waits for)."""
        return int(self.rpc("getBalance", str(address), {"commitment": "confirmed"})["value"])

    def minimum_balance(self, size: int) -> int:
        return int(self.rpc("getMinimumBalanceForRentExemption", size))

    def unix_timestamp(self) -> int:
        """The cluster's Clock sysvar time, unix seconds."""
        clock = self.account(CLOCK_SYSVAR)
        assert clock is not None
        return int.from_bytes(clock.data[32:40], "little", signed=True)

    def time_travel(self, unix_timestamp: int) -> None:
        """Moves the cluster clock forward to `unix_timestamp` (drop-in validator only)."""
        if not self.can_time_travel:
            raise RuntimeError("this validator cannot travel in time; use short periods")
        self.rpc("surfnet_timeTravel", {"absoluteTimestamp": unix_timestamp * 1000})

    def advance_to(self, unix_timestamp: int) -> None:
        """Returns once the cluster clock reads at least `unix_timestamp`: by time travel
        where the validator offers it, otherwise by waiting (keep such periods short)."""
        if self.can_time_travel:
            if self.unix_timestamp() < unix_timestamp:
                self.time_travel(unix_timestamp)
            return
        while self.unix_timestamp() < unix_timestamp:
            stopping.sleep(0.25)

    # -- transactions -----------------------------------------------------------------
    def _fresh_message(self, ixs: list[Instruction], payer: Pubkey) -> MessageV0:
        """A message for `ixs` that this client has not sent before: an identical one under
        the same blockhash would be the same transaction, which a cluster drops as a
        duplicate. So a repeat waits for the next blockhash (one slot, about 400 ms)."""
        while True:
            value = self.rpc("getLatestBlockhash", {"commitment": "confirmed"})["value"]
            msg = MessageV0.try_compile(payer, ixs, [], Hash.from_string(value["blockhash"]))
            if bytes(msg) not in self._sent:
                self._sent.append(bytes(msg))
                return msg
            stopping.sleep(0.1)

    def send(self, ixs: list[Instruction], signers: list[Keypair]) -> TxResult:
        """Sends one transaction (the first signer pays) and waits until it is confirmed."""
        msg = self._fresh_message(ixs, signers[0].pubkey())
        wire = base64.b64encode(bytes(VersionedTransaction(msg, signers))).decode()
        try:
            signature = self.rpc(
                "sendTransaction", wire, {"encoding": "base64", "preflightCommitment": "confirmed"}
            )
        except RpcError as e:
            if e.code != SIMULATION_FAILED or not isinstance(e.data, dict):
                raise
            return TxResult(
                False,
                e.data.get("logs") or [],
                e.data.get("unitsConsumed") or 0,
                json.dumps(e.data["err"]),
            )
        self._confirm(signature)
        tx = self._transaction(signature)
        meta = tx["meta"]
        logs = meta["logMessages"] or []
        units = meta.get("computeUnitsConsumed") or 0
        if meta["err"] is not None:
            return TxResult(False, logs, units, json.dumps(meta["err"]), signature)
        return TxResult(True, logs, units, None, signature, decode_logs(logs))

    def send_ok(self, ixs: list[Instruction], signers: list[Keypair]) -> TxResult:
        """Like `send`, raising TransactionFailed unless the transaction succeeded."""
        result = self.send(ixs, signers)
        if not result.ok:
            raise TransactionFailed(result)
        return result

    def _transaction(self, signature: str) -> dict[str, Any]:
        """The confirmed transaction. A loaded solana-test-validator may report a signature
        confirmed a moment before getTransaction finds it: asked again until it does."""
        deadline = time.monotonic() + CONFIRM_TIMEOUT
        while True:
            tx = self.rpc(
                "getTransaction",
                signature,
                {"encoding": "base64", "commitment": "confirmed",
                 "maxSupportedTransactionVersion": 0},
            )  # fmt: skip
            if tx is not None or time.monotonic() > deadline:
                break
            stopping.sleep(0.1)
        if tx is None:
            raise TimeoutError(f"transaction {signature} confirmed but not found")
        return dict(tx)

    def _confirm(self, signature: str) -> None:
        deadline = time.monotonic() + CONFIRM_TIMEOUT
        while time.monotonic() < deadline:
            status = self.rpc("getSignatureStatuses", [signature])["value"][0]
            if status and status.get("confirmationStatus") in ("confirmed", "finalized"):
                return
            stopping.sleep(0.1)
        raise TimeoutError(f"transaction {signature} not confirmed in {CONFIRM_TIMEOUT:.0f}s")

    # -- SPL Token ----------------------------------------------------------------------
    def create_mint(
        self,
        decimals: int = 6,
        authority: Keypair | None = None,
        *,
        program_id: Pubkey = TOKEN_PROGRAM_ID,
        freeze_authority: Pubkey | None = None,
    ) -> Pubkey:
        """A mint of `program_id` (SPL Token, or Token-2022 without extensions)."""
        authority = authority or self.payer
        mint = Keypair()
        create = CreateAccountParams(
            from_pubkey=self.payer.pubkey(),
            to_pubkey=mint.pubkey(),
            lamports=self.minimum_balance(MINT_SIZE),
            space=MINT_SIZE,
            owner=program_id,
        )
        init = InitializeMintParams(
            decimals=decimals,
            program_id=program_id,
            mint=mint.pubkey(),
            mint_authority=authority.pubkey(),
            freeze_authority=freeze_authority,
        )
        self.send_ok([create_account(create), initialize_mint(init)], [self.payer, mint])
        return mint.pubkey()

    def token_account(
        self, owner: Pubkey, mint: Pubkey, amount: int = 0, *, program_id: Pubkey = TOKEN_PROGRAM_ID
    ) -> Pubkey:
        """The owner's associated token account of `mint` (a mint of `program_id`), created,
        with `amount` minted."""
        ata = get_associated_token_address(owner, mint, program_id)
        ixs = [create_associated_token_account(self.payer.pubkey(), owner, mint, program_id)]
        if amount:
            ixs.append(self._mint_to_ix(mint, ata, amount, program_id=program_id))
        self.send_ok(ixs, [self.payer])
        return ata

    def mint_to(
        self,
        mint: Pubkey,
        token_account: Pubkey,
        amount: int,
        authority: Keypair | None = None,
        *,
        program_id: Pubkey = TOKEN_PROGRAM_ID,
    ) -> None:
        """Mints `amount` to `token_account` (`authority`: the mint's, if not this client's
        payer, e.g. svcpay.localnet.accounts.LOCAL_USDC_AUTHORITY; `program_id`: the mint's
        token program)."""
        ix = self._mint_to_ix(mint, token_account, amount, authority, program_id=program_id)
        self.send_ok([ix], [self.payer] + ([authority] if authority else []))

    def _mint_to_ix(
        self,
        mint: Pubkey,
        dest: Pubkey,
        amount: int,
        authority: Keypair | None = None,
        *,
        program_id: Pubkey = TOKEN_PROGRAM_ID,
    ) -> Instruction:
        # The payer is the authority of every mint this client creates.
        params = MintToParams(
            program_id=program_id,
            mint=mint,
            dest=dest,
            mint_authority=(authority or self.payer).pubkey(),
            amount=amount,
        )
        return mint_to(params)

    def token_state(self, address: Pubkey) -> dict[str, Any]:
        """Balance and delegation of an SPL token account (its 165-byte layout)."""
        acct = self.account(address)
        if acct is None:
            raise KeyError(f"no token account at {address}")
        data = acct.data
        has_delegate = int.from_bytes(data[72:76], "little") == 1
        return {
            "mint": Pubkey.from_bytes(data[0:32]),
            "owner": Pubkey.from_bytes(data[32:64]),
            "amount": int.from_bytes(data[64:72], "little"),
            "delegate": Pubkey.from_bytes(data[76:108]) if has_delegate else None,
            "delegated_amount": int.from_bytes(data[121:129], "little"),
        }

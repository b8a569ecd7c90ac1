"""Deploying and upgrading a program through the upgradeable BPF loader, without the Solana CLI.

The same transactions `solana program deploy` sends: a buffer account is created and filled in
chunks (`Write`), then `DeployWithMaxDataLen` (a new program) or `Upgrade` (an existing one,
after `ExtendProgram` when the new binary is larger) moves it into the program's data account.

Chunk writes are resumable: the buffer is an ordinary account whose address comes from a
keypair the caller keeps, so a second run with the same buffer keypair reads what the buffer
holds and writes only the chunks that differ. Writes are sent without waiting for each other
and confirmed in batches; a round that leaves chunks missing (dropped, expired blockhash) is
followed by another that sends only those.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solana.rpc.models import TxOpts
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.signature import Signature
from solders.system_program import ID as SYSTEM_PROGRAM
from solders.system_program import CreateAccountParams, create_account
from solders.sysvar import CLOCK, RENT
from solders.transaction import VersionedTransaction

LOADER = Pubkey.from_string("BPFLoaderUpgradeab1e11111111111111111111111")
BUFFER_HEADER = 37  # enum tag (u32) + Option<authority>
PROGRAMDATA_HEADER = 45  # enum tag + deploy slot (u64) + Option<authority>
PROGRAM_SIZE = 36  # enum tag + programdata address
PACKET_SIZE = 1232  # a transaction's largest wire size
IN_FLIGHT = 64  # chunk writes sent before waiting for their confirmations
ROUNDS = 8  # write rounds before giving up (each resends only what is missing)
CONFIRM_SECONDS = 45.0

Progress = Callable[[str], None]
KeepBuffer = Callable[[Keypair], None]


class DeployError(RuntimeError):
    """A deploy or upgrade cannot go on; the message says why and what to do."""


# -- instructions (bincode UpgradeableLoaderInstruction) ---------------------------------------
def initialize_buffer(buffer: Pubkey, authority: Pubkey) -> Instruction:
    metas = [AccountMeta(buffer, False, True), AccountMeta(authority, False, False)]
    return Instruction(LOADER, struct.pack("<I", 0), metas)


def write(buffer: Pubkey, authority: Pubkey, offset: int, data: bytes) -> Instruction:
    metas = [AccountMeta(buffer, False, True), AccountMeta(authority, True, False)]
    return Instruction(LOADER, struct.pack("<IIQ", 1, offset, len(data)) + data, metas)


def deploy_with_max_data_len(
    payer: Pubkey, program: Pubkey, buffer: Pubkey, authority: Pubkey, max_data_len: int
) -> Instruction:
    metas = [
        AccountMeta(payer, True, True),
        AccountMeta(programdata_address(program), False, True),
        AccountMeta(program, False, True),
        AccountMeta(buffer, False, True),
        AccountMeta(RENT, False, False),
        AccountMeta(CLOCK, False, False),
        AccountMeta(SYSTEM_PROGRAM, False, False),
        AccountMeta(authority, True, False),
    ]
    return Instruction(LOADER, struct.pack("<IQ", 2, max_data_len), metas)


def upgrade(program: Pubkey, buffer: Pubkey, authority: Pubkey, spill: Pubkey) -> Instruction:
    metas = [
        AccountMeta(programdata_address(program), False, True),
        AccountMeta(program, False, True),
        AccountMeta(buffer, False, True),
        AccountMeta(spill, False, True),
        AccountMeta(RENT, False, False),
        AccountMeta(CLOCK, False, False),
        AccountMeta(authority, True, False),
    ]
    return Instruction(LOADER, struct.pack("<I", 3), metas)


def extend_program(program: Pubkey, payer: Pubkey, additional_bytes: int) -> Instruction:
    metas = [
        AccountMeta(programdata_address(program), False, True),
        AccountMeta(program, False, True),
        AccountMeta(SYSTEM_PROGRAM, False, False),
        AccountMeta(payer, True, True),
    ]
    return Instruction(LOADER, struct.pack("<II", 6, additional_bytes), metas)


def programdata_address(program: Pubkey) -> Pubkey:
    return Pubkey.find_program_address([bytes(program)], LOADER)[0]


# -- reading ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProgramInfo:
    """A deployed upgradeable program, as `svcpay program show` prints it."""

    program_id: Pubkey
    programdata: Pubkey
    authority: Pubkey | None  # None: immutable
    last_deploy_slot: int
    data_len: int  # room for the ELF (max data len)
    lamports: int  # rent held by the program data account
    sha256: str  # of the ELF bytes up to its own length (trailing zero padding excluded)

    def as_json(self) -> dict[str, object]:
        return {
            "programId": str(self.program_id),
            "programdata": str(self.programdata),
            "authority": str(self.authority) if self.authority else None,
            "lastDeploySlot": self.last_deploy_slot,
            "dataLen": self.data_len,
            "lamports": self.lamports,
            "sha256": self.sha256,
        }


def elf_digest(data: bytes) -> str:
    """sha256 of an ELF as deployed: program data accounts pad it with zeros to their size."""
    return hashlib.sha256(data.rstrip(b"\0")).hexdigest()


async def program_info(rpc: AsyncClient, program: Pubkey) -> ProgramInfo | None:
    """The upgradeable program at `program`, None when no account is there. DeployError when
    the account is something else (not a program, or another loader's)."""
    account = (await rpc.get_account_info(program, Confirmed)).value
    if account is None:
        return None
    data = bytes(account.data)
    if account.owner != LOADER or len(data) < PROGRAM_SIZE or data[:4] != b"\x02\0\0\0":
        raise DeployError(
            f"{program} is not a program of the upgradeable loader (owner {account.owner})"
        )
    programdata = Pubkey.from_bytes(data[4:36])
    pd = (await rpc.get_account_info(programdata, Confirmed)).value
    if pd is None:
        raise DeployError(f"program {program} has no program data account ({programdata})")
    raw = bytes(pd.data)
    slot = struct.unpack_from("<Q", raw, 4)[0]
    authority = Pubkey.from_bytes(raw[13:45]) if raw[12] == 1 else None
    elf = raw[PROGRAMDATA_HEADER:]
    return ProgramInfo(
        program, programdata, authority, slot, len(elf), pd.lamports, elf_digest(elf)
    )


# -- the buffer -----------------------------------------------------------------------------
def chunk_size(payer: Keypair, authority: Keypair) -> int:
    """The largest chunk one Write transaction carries (signed by payer and authority)."""
    signers = [payer] if payer.pubkey() == authority.pubkey() else [payer, authority]

    def size(chunk: int) -> int:
        probe = write(Pubkey.default(), authority.pubkey(), 0, bytes(chunk))
        msg = MessageV0.try_compile(payer.pubkey(), [probe], [], Hash.default())
        return len(bytes(VersionedTransaction(msg, signers)))

    chunk = PACKET_SIZE - size(0)
    while size(chunk) > PACKET_SIZE:  # the data's length prefix grows with it
        chunk -= 1
    return chunk


def _signers(*keypairs: Keypair) -> list[Keypair]:
    seen: dict[Pubkey, Keypair] = {}
    for kp in keypairs:
        seen.setdefault(kp.pubkey(), kp)
    return list(seen.values())


async def _blockhash(rpc: AsyncClient) -> Hash:
    return (await rpc.get_latest_blockhash(Confirmed)).value.blockhash


async def _send_and_confirm(
    rpc: AsyncClient, ixs: Sequence[Instruction], payer: Keypair, *others: Keypair
) -> Signature:
    """One transaction, sent with preflight and confirmed; DeployError with its logs if not."""
    msg = MessageV0.try_compile(payer.pubkey(), list(ixs), [], await _blockhash(rpc))
    tx = VersionedTransaction(msg, _signers(payer, *others))
    try:
        sig = (await rpc.send_transaction(tx, opts=TxOpts(preflight_commitment=Confirmed))).value
    except Exception as e:  # solana-py raises RPCException and subclasses with the logs
        raise DeployError(f"transaction refused: {e}") from e
    status = await _wait_confirmed(rpc, [sig])
    if status[sig] is not None:
        raise DeployError(f"transaction {sig} failed: {status[sig]}")
    return sig


async def _wait_confirmed(
    rpc: AsyncClient, sigs: Sequence[Signature], timeout: float = CONFIRM_SECONDS
) -> dict[Signature, object]:
    """Waits until each signature is confirmed; returns {signature: error or None} for those
    that were (a signature missing from the result never confirmed in `timeout`)."""
    pending = list(sigs)
    done: dict[Signature, object] = {}
    deadline = asyncio.get_running_loop().time() + timeout
    while pending and asyncio.get_running_loop().time() < deadline:
        still = []
        for start in range(0, len(pending), 256):
            batch = pending[start : start + 256]
            statuses = (await rpc.get_signature_statuses(batch)).value
            for sig, status in zip(batch, statuses, strict=True):
                confirmed = (
                    status is not None
                    and status.confirmation_status is not None
                    and (str(status.confirmation_status).endswith(("Confirmed", "Finalized")))
                )
                if confirmed and status is not None:
                    done[sig] = status.err
                else:
                    still.append(sig)
        pending = still
        if pending:
            await asyncio.sleep(0.4)
    return done


async def write_buffer(
    rpc: AsyncClient,
    payer: Keypair,
    buffer: Keypair,
    authority: Keypair,
    elf: bytes,
    progress: Progress = lambda _: None,
    keep_buffer: KeepBuffer = lambda _: None,
) -> None:
    """Creates `buffer` (unless it exists) and writes `elf` into it, resuming: chunks that
    already hold the right bytes are not sent again. `keep_buffer` is called with the
    buffer's keypair before its account is created, to save it where a later run finds it
    (the account holds the buffer's rent until a deploy or upgrade consumes it)."""
    size = BUFFER_HEADER + len(elf)
    account = (await rpc.get_account_info(buffer.pubkey(), Confirmed)).value
    if account is None:
        keep_buffer(buffer)
        create, rent = await _create_loader_account(rpc, payer, buffer.pubkey(), size)
        init = initialize_buffer(buffer.pubkey(), authority.pubkey())
        await _send_and_confirm(rpc, [create, init], payer, buffer)
        progress(f"created buffer {buffer.pubkey()} ({size:,} bytes, {rent:,} lamports)")
    else:
        data = bytes(account.data)
        if account.owner != LOADER or data[:4] != b"\x01\0\0\0":
            raise DeployError(f"{buffer.pubkey()} exists and is not a loader buffer")
        if data[4] != 1 or Pubkey.from_bytes(data[5:37]) != authority.pubkey():
            raise DeployError(f"buffer {buffer.pubkey()} has another authority than the given one")
        if len(data) != size:
            raise DeployError(
                f"buffer {buffer.pubkey()} holds {len(data) - BUFFER_HEADER:,} bytes, the "
                f"program has {len(elf):,}: use a new buffer keypair"
            )
        progress(f"resuming buffer {buffer.pubkey()}")
    step = chunk_size(payer, authority)
    offsets = list(range(0, len(elf), step))
    for round_ in range(ROUNDS):
        held = await _buffer_bytes(rpc, buffer.pubkey())
        missing = [o for o in offsets if held[o : o + step] != elf[o : o + step]]
        if not missing:
            progress(f"buffer complete: {len(offsets)} chunks of {step} bytes")
            return
        if round_:
            progress(f"round {round_ + 1}: {len(missing)} chunks still to write")
        blockhash = await _blockhash(rpc)
        signers = _signers(payer, authority)
        written = len(offsets) - len(missing)
        for start in range(0, len(missing), IN_FLIGHT):
            sigs = []
            for offset in missing[start : start + IN_FLIGHT]:
                ix = write(buffer.pubkey(), authority.pubkey(), offset, elf[offset : offset + step])
                msg = MessageV0.try_compile(payer.pubkey(), [ix], [], blockhash)
                tx = VersionedTransaction(msg, signers)
                sigs.append(
                    (await rpc.send_raw_transaction(bytes(tx), TxOpts(skip_preflight=True))).value
                )
            confirmed = await _wait_confirmed(rpc, sigs, timeout=20.0)
            written += sum(1 for err in confirmed.values() if err is None)
            progress(f"wrote {written}/{len(offsets)} chunks")
    raise DeployError(
        f"the buffer {buffer.pubkey()} is still incomplete after {ROUNDS} rounds: run the "
        "same command again with the same buffer keypair to resume"
    )


async def _create_loader_account(
    rpc: AsyncClient, payer: Keypair, address: Pubkey, size: int
) -> tuple[Instruction, int]:
    """(create_account of `size` bytes at `address`, owned by the loader, rent-exempt; rent)."""
    rent = (await rpc.get_minimum_balance_for_rent_exemption(size)).value
    params = CreateAccountParams(
        from_pubkey=payer.pubkey(), to_pubkey=address, lamports=rent, space=size, owner=LOADER
    )
    return create_account(params), rent


async def _buffer_bytes(rpc: AsyncClient, buffer: Pubkey) -> bytes:
    account = (await rpc.get_account_info(buffer, Confirmed)).value
    if account is None:
        raise DeployError(f"buffer {buffer} disappeared")
    return bytes(account.data)[BUFFER_HEADER:]


# -- deploy and upgrade --------------------------------------------------------------------
async def deploy(
    rpc: AsyncClient,
    payer: Keypair,
    program: Keypair,
    authority: Keypair,
    elf: bytes,
    buffer: Keypair,
    *,
    max_data_len: int | None = None,
    progress: Progress = lambda _: None,
    keep_buffer: KeepBuffer = lambda _: None,
) -> Signature:
    """Deploys `elf` as a new upgradeable program at `program`'s address, upgradeable by
    `authority`. `max_data_len` (default: the ELF's size) bounds later upgrades without an
    ExtendProgram."""
    if await program_info(rpc, program.pubkey()) is not None:
        raise DeployError(
            f"program {program.pubkey()} is already deployed: use `svcpay program upgrade`"
        )
    max_len = max_data_len or len(elf)
    if max_len < len(elf):
        raise DeployError(f"--max-len {max_len:,} is smaller than the program ({len(elf):,})")
    await write_buffer(rpc, payer, buffer, authority, elf, progress, keep_buffer)
    create, _ = await _create_loader_account(rpc, payer, program.pubkey(), PROGRAM_SIZE)
    ix = deploy_with_max_data_len(
        payer.pubkey(), program.pubkey(), buffer.pubkey(), authority.pubkey(), max_len
    )
    sig = await _send_and_confirm(rpc, [create, ix], payer, program, authority)
    await next_slot(rpc)
    progress(f"deployed {program.pubkey()} ({len(elf):,} bytes) in {sig}")
    return sig


async def upgrade_program(
    rpc: AsyncClient,
    payer: Keypair,
    program: Pubkey,
    authority: Keypair,
    elf: bytes,
    buffer: Keypair,
    *,
    progress: Progress = lambda _: None,
    keep_buffer: KeepBuffer = lambda _: None,
) -> Signature:
    """Replaces the code of deployed `program` with `elf` (extending its data account first
    when `elf` is larger); the buffer's rent goes back to `payer`."""
    info = await program_info(rpc, program)
    if info is None:
        raise DeployError(f"no program at {program}: deploy it first (`svcpay program deploy`)")
    if info.authority is None:
        raise DeployError(f"program {program} is immutable (it has no upgrade authority)")
    if info.authority != authority.pubkey():
        raise DeployError(
            f"program {program}'s upgrade authority is {info.authority}, not "
            f"{authority.pubkey()}: pass its keypair"
        )
    if info.sha256 == elf_digest(elf):
        raise DeployError(f"program {program} already runs this binary (sha256 {info.sha256})")
    await write_buffer(rpc, payer, buffer, authority, elf, progress, keep_buffer)
    if len(elf) > info.data_len:
        extra = len(elf) - info.data_len
        await _send_and_confirm(rpc, [extend_program(program, payer.pubkey(), extra)], payer)
        progress(f"extended the program data by {extra:,} bytes")
        # Extending redeploys the program; the loader refuses a second deploy in that slot.
        await next_slot(rpc)
    ix = upgrade(program, buffer.pubkey(), authority.pubkey(), payer.pubkey())
    sig = await _send_and_confirm(rpc, [ix], payer, authority)
    await next_slot(rpc)
    progress(f"upgraded {program} ({len(elf):,} bytes) in {sig}")
    return sig


async def next_slot(rpc: AsyncClient) -> None:
    """Returns once the cluster has moved past the current slot: a program deployed or
    upgraded in slot N can be called from slot N + 1."""
    start = (await rpc.get_slot(Confirmed)).value
    while (await rpc.get_slot(Confirmed)).value <= start:
        await asyncio.sleep(0.1)

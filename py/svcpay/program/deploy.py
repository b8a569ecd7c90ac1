"""Deploying and upgrading a program through the upgradeable BPF loader, without the Solana CLI.

The same transactions `solana program deploy` sends: a buffer account is created and filled in
chunks (`Write`), then `DeployWithMaxDataLen` (a new program) or `Upgrade` (an existing one,
after `ExtendProgram` when the new binary is larger) moves it into the program's data account.

Chunk writes are resumable: the buffer is an ordinary account whose address comes from a
keypair the caller keeps, so a second run with the same buffer keypair reads what the buffer
holds and writes only the chunks that differ. Writes go out in batches of `IN_FLIGHT`, each on
a fresh blockhash, and every transaction is landed as svcpay's others are (svcpay.rpc.landing):
rebroadcast until confirmed or expired by block height, so a dropped write costs a second,
not a timeout. A round that leaves chunks missing (expired, or a node that could not be
reached) is followed by another that sends only those.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from solana.rpc.async_api import AsyncClient
from solana.rpc.commitment import Confirmed
from solders.hash import Hash
from solders.instruction import AccountMeta, Instruction
from solders.keypair import Keypair
from solders.message import MessageV0
from solders.pubkey import Pubkey
from solders.rpc.responses import RpcBlockhash
from solders.signature import Signature
from solders.system_program import ID as SYSTEM_PROGRAM
from solders.system_program import CreateAccountParams, create_account
from solders.sysvar import CLOCK, RENT
from solders.transaction import VersionedTransaction

from svcpay.rpc.blockhash import StaleBlockhash, fresh_blockhash
from svcpay.rpc.landing import Expired, Landed, Lander, Outcome, Pending, Rejected, Unsent

LOADER = Pubkey.from_string("BPFLoaderUpgradeab1e11111111111111111111111")
BUFFER_HEADER = 37  # enum tag (u32) + Option<authority>
PROGRAMDATA_HEADER = 45  # enum tag + deploy slot (u64) + Option<authority>
PROGRAM_SIZE = 36  # enum tag + programdata address
PACKET_SIZE = 1232  # a transaction's largest wire size
IN_FLIGHT = 64  # chunk writes sent before waiting for their confirmations
ROUNDS = 8  # write rounds before giving up (each resends only what is missing)
# A flight ends when its transaction lands or its blockhash expires by block height (about
# 60-90 s on a real cluster); this only bounds a node that stops answering.
LAND_SECONDS = 180.0

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


# -- sending ---------------------------------------------------------------------------------
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


async def _signed(
    rpc: AsyncClient, ixs: Sequence[Instruction], payer: Keypair, *others: Keypair
) -> tuple[VersionedTransaction, int]:
    """A transaction of `ixs` on the latest blockhash, and that blockhash's last valid block
    height."""
    latest = await _blockhash(rpc)
    msg = MessageV0.try_compile(payer.pubkey(), list(ixs), [], latest.blockhash)
    return VersionedTransaction(msg, _signers(payer, *others)), latest.last_valid_block_height


async def _blockhash(rpc: AsyncClient) -> RpcBlockhash:
    """A blockhash with life left (svcpay.rpc.blockhash): a lagging node's spent one would
    cost a whole round of writes that can only expire."""
    try:
        return await fresh_blockhash(rpc, Confirmed)
    except StaleBlockhash as e:
        raise DeployError(str(e)) from None


def _refused(outcome: Outcome) -> str | None:
    """Why a transaction's flight failed in a way another round cannot mend (a preflight
    refusal, an error on chain), or None."""
    if isinstance(outcome, Rejected):
        data = outcome.data if isinstance(outcome.data, dict) else {}
        logs = [str(line) for line in data.get("logs") or []]
        return f"transaction refused: {outcome.message}" + (f" ({logs[-1]})" if logs else "")
    if isinstance(outcome, Landed) and outcome.err is not None:
        return f"transaction {outcome.signature} failed: {outcome.err}"
    return None


async def _send_and_confirm(
    lander: Lander, ixs: Sequence[Instruction], payer: Keypair, *others: Keypair
) -> Signature:
    """One transaction, landed (preflight first, then rebroadcast); DeployError if not."""
    tx, valid_until = await _signed(lander.rpc, ixs, payer, *others)
    outcome = await lander.land(tx, wait_secs=LAND_SECONDS, last_valid_block_height=valid_until)
    if (refused := _refused(outcome)) is not None:
        raise DeployError(refused)
    if isinstance(outcome, Landed):
        return Signature.from_string(outcome.signature)
    raise DeployError(_not_landed(outcome))


def _not_landed(outcome: Outcome) -> str:
    if isinstance(outcome, Unsent):
        return f"no RPC node took transaction {outcome.signature}: {outcome.reason}"
    if isinstance(outcome, Expired):
        return (
            f"transaction {outcome.signature} expired before it landed (its blockhash's last "
            "valid block height passed): run the same command again"
        )
    assert isinstance(outcome, Pending)
    return (
        f"transaction {outcome.signature} not confirmed in {LAND_SECONDS:.0f} s: is the RPC "
        "node answering? Run the same command again"
    )


# -- the buffer ----------------------------------------------------------------------------
async def write_buffer(
    lander: Lander,
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
    rpc = lander.rpc
    size = BUFFER_HEADER + len(elf)
    account = (await rpc.get_account_info(buffer.pubkey(), Confirmed)).value
    if account is None:
        keep_buffer(buffer)
        create, rent = await _create_loader_account(rpc, payer, buffer.pubkey(), size)
        init = initialize_buffer(buffer.pubkey(), authority.pubkey())
        await _send_and_confirm(lander, [create, init], payer, buffer)
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
        written = len(offsets) - len(missing)
        for start in range(0, len(missing), IN_FLIGHT):
            # Each batch on a blockhash of its own: a round can outlive one (151 blocks: a
            # minute on a real cluster, 15 s on a test validator's 100 ms slots).
            latest = await _blockhash(rpc)
            flights = []
            for offset in missing[start : start + IN_FLIGHT]:
                ix = write(buffer.pubkey(), authority.pubkey(), offset, elf[offset : offset + step])
                msg = MessageV0.try_compile(payer.pubkey(), [ix], [], latest.blockhash)
                tx = VersionedTransaction(msg, _signers(payer, authority))
                flights.append(
                    lander.land(
                        tx,
                        wait_secs=LAND_SECONDS,
                        last_valid_block_height=latest.last_valid_block_height,
                    )  # fmt: skip
                )
            outcomes = await asyncio.gather(*flights)
            for outcome in outcomes:
                if (refused := _refused(outcome)) is not None:
                    raise DeployError(refused)  # another round would be refused the same
            written += sum(isinstance(o, Landed) for o in outcomes)
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
    lander = Lander(rpc)
    try:
        await write_buffer(lander, payer, buffer, authority, elf, progress, keep_buffer)
        create, _ = await _create_loader_account(rpc, payer, program.pubkey(), PROGRAM_SIZE)
        ix = deploy_with_max_data_len(
            payer.pubkey(), program.pubkey(), buffer.pubkey(), authority.pubkey(), max_len
        )
        sig = await _send_and_confirm(lander, [create, ix], payer, program, authority)
    finally:
        await lander.aclose()
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
    lander = Lander(rpc)
    try:
        await write_buffer(lander, payer, buffer, authority, elf, progress, keep_buffer)
        if len(elf) > info.data_len:
            extra = len(elf) - info.data_len
            extend = extend_program(program, payer.pubkey(), extra)
            await _send_and_confirm(lander, [extend], payer)
            progress(f"extended the program data by {extra:,} bytes")
            # Extending redeploys the program; the loader refuses a second deploy in that slot.
            await next_slot(rpc)
        ix = upgrade(program, buffer.pubkey(), authority.pubkey(), payer.pubkey())
        sig = await _send_and_confirm(lander, [ix], payer, authority)
    finally:
        await lander.aclose()
    await next_slot(rpc)
    progress(f"upgraded {program} ({len(elf):,} bytes) in {sig}")
    return sig


async def next_slot(rpc: AsyncClient) -> None:
    """Returns once the cluster has moved past the current slot: a program deployed or
    upgraded in slot N can be called from slot N + 1."""
    start = (await rpc.get_slot(Confirmed)).value
    while (await rpc.get_slot(Confirmed)).value <= start:
        await asyncio.sleep(0.1)

"""The deployed binary is the one the runtime with mainnet's features can run."""

from __future__ import annotations

from svcpay.localnet.process import PROGRAM_SO


def test_the_program_is_an_sbpf_v3_elf() -> None:
    # sbpf-linker's v0 output passes arguments beyond the fifth above the caller's stack
    # frame, where mainnet (stack frame gaps) faults; v3's dynamic frames have no gaps.
    data = PROGRAM_SO.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert int.from_bytes(data[18:20], "little") in (247, 263)  # EM_BPF (sbpf-linker), EM_SBF
    assert int.from_bytes(data[48:52], "little") == 3  # e_flags: SBPF version 3


def test_the_binary_declares_a_security_contact() -> None:
    # solana-security-txt's format: NUL-separated key/value pairs between two markers, found
    # by scanning the bytes (as query-security-txt and explorers do).
    data = PROGRAM_SO.read_bytes()
    begin, end = b"=======BEGIN SECURITY.TXT V1=======\0", b"=======END SECURITY.TXT V1=======\0"
    assert data.count(begin) == 1, "no security.txt in the program binary"
    body = data[data.index(begin) + len(begin) : data.index(end)]
    fields = body.split(b"\0")[:-1]
    pairs = dict(zip(fields[::2], fields[1::2], strict=True))
    assert pairs[b"contacts"] == b"email:security@svcpay.dev"
    assert {b"name", b"project_url", b"policy"} <= pairs.keys()

"""Keypairs in the Solana CLI's file format (a JSON array of the 64 secret-key bytes).

Secrets are never printed or logged: errors and `describe` name the public key only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from solders.keypair import Keypair


class KeypairFileError(ValueError):
    """A keypair file is missing, unreadable or not in the Solana CLI format."""


def load_keypair(path: str | os.PathLike[str]) -> Keypair:
    """Reads a keypair written by `solana-keygen` (or `save_keypair`)."""
    p = Path(path).expanduser()
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError as e:
        raise KeypairFileError(f"{p}: no such keypair file") from e
    except (OSError, ValueError) as e:
        raise KeypairFileError(f"{p}: not a JSON keypair file ({type(e).__name__})") from e
    if not (
        isinstance(raw, list)
        and len(raw) == 64
        and all(isinstance(b, int) and 0 <= b < 256 for b in raw)
    ):
        raise KeypairFileError(f"{p}: expected a JSON array of 64 bytes (Solana CLI format)")
    try:
        return Keypair.from_bytes(bytes(raw))
    except ValueError as e:
        raise KeypairFileError(f"{p}: the 64 bytes are not a valid ed25519 keypair") from e


def save_keypair(keypair: Keypair, path: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Writes `keypair` in the Solana CLI format, readable by its owner only."""
    p = Path(path).expanduser()
    if p.exists() and not overwrite:
        raise KeypairFileError(f"{p} exists; refusing to overwrite a keypair")
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(list(bytes(keypair)), fh)
    return p


def describe(keypair: Keypair) -> str:
    """How to mention a keypair in output: its public key, never the secret."""
    return f"keypair {keypair.pubkey()}"

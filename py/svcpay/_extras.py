"""The optional parts of svcpay and the extra that installs what each needs.

The base package (protocol, proofs, the paying client, the gate middleware, the program
client, the drop-in validator) imports no web server, database, migration or chart library.
A part that does checks for them first and, when one is missing, fails with one line that
names the extra to install instead of an ImportError from deep inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.util import find_spec


class MissingExtra(ImportError):
    """A part of svcpay was used without the extra that installs its dependencies."""


def missing_extra(part: str, extras: Sequence[str], module: str | None = None) -> MissingExtra:
    """The error for `part` used without `extras` (`module` is the first one missing)."""
    names = " and ".join(f"'{extra}'" for extra in extras)
    noun = "extra" if len(extras) == 1 else "extras"
    return MissingExtra(
        f"{part} needs the {names} {noun}: pip install 'svcpay[{','.join(extras)}]'",
        name=module,
    )


def require(part: str, extras: Sequence[str], modules: Sequence[str]) -> None:
    """Raises MissingExtra, naming `extras`, unless every one of `modules` is importable."""
    missing = [name for name in modules if find_spec(name) is None]
    if missing:
        raise missing_extra(part, extras, missing[0])

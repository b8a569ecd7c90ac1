"""Program errors as Python exceptions, named as in the specification.

Anchor custom errors are numbered from 6000 in declaration order; `from_code` maps a code
(from a failed transaction) to the exception class of the same name.
"""

from __future__ import annotations

import re

from svcpay.program.generated.errors import custom


class ProgramError(Exception):
    """An error returned by the svc_billing program."""

    code: int = -1
    name: str = "ProgramError"

    def __init__(self, message: str = "") -> None:
        super().__init__(f"{self.name} ({self.code}): {message}" if message else self.name)
        self.message = message


def _error_class(name: str, code: int, msg: str) -> type[ProgramError]:
    return type(name, (ProgramError,), {"code": code, "name": name, "__doc__": msg})


# One class per program error, built from the generated client so none can be missed.
_BY_CODE: dict[int, type[ProgramError]] = {
    err.code: _error_class(type(err).__name__, err.code, err.msg)
    for err in custom.CUSTOM_ERROR_MAP.values()
}
_BY_NAME = {cls.name: cls for cls in _BY_CODE.values()}

InsufficientFunds = _BY_NAME["InsufficientFunds"]
SubscriptionNotActive = _BY_NAME["SubscriptionNotActive"]
AllowanceExhausted = _BY_NAME["AllowanceExhausted"]
PlanDeprecated = _BY_NAME["PlanDeprecated"]


def error_class(name: str) -> type[ProgramError]:
    """The exception class of the program error called `name`."""
    return _BY_NAME[name]


def from_code(code: int, message: str = "") -> ProgramError | None:
    """The exception for custom error `code`, or None if it is not a program error."""
    cls = _BY_CODE.get(code)
    return cls(message or (cls.__doc__ or "")) if cls else None


_CUSTOM = re.compile(r'custom program error: 0x([0-9a-fA-F]+)|Custom\((\d+)\)|"Custom": ?(\d+)')


def from_logs_or_error(err: object) -> ProgramError | None:
    """Finds the program's custom error code in a transaction error: its RPC JSON
    (`{"InstructionError": [0, {"Custom": 6002}]}`), solders' text, or a log line."""
    match = _CUSTOM.search(str(err))
    if not match:
        return None
    hex_code, *decimal = match.groups()
    code = int(hex_code, 16) if hex_code else int(next(d for d in decimal if d))
    return from_code(code)

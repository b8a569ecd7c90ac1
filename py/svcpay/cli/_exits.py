"""svcpay's exit codes, and the errors a command raises to report one line with its code
(`svcpay.cli.main` prints them; `_common` re-exports them for the commands)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the operation failed: a program, transaction, RPC or HTTP error
EXIT_USAGE = 2  # bad arguments, or a keypair file that cannot be used
EXIT_NOT_FOUND = 3  # an account (plan, subscription, mint, token account) does not exist
EXIT_PAYMENT = 4  # `pay`: the payment was declined or is still required

EXIT_CODES = """\
exit codes:
  0  ok
  1  the operation failed (program, transaction, RPC or HTTP error)
  2  usage error (bad arguments, missing or invalid keypair file)
  3  not found (the plan, subscription, mint or token account does not exist)
  4  payment declined or still required (`svcpay pay`)"""


# -- errors -----------------------------------------------------------------------------
class CliError(Exception):
    """A failure to report as one line on stderr, with the exit code it means."""

    exit_code = EXIT_FAILED
    name = "Failed"

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CliError):
    exit_code = EXIT_USAGE
    name = "UsageError"


class NotFound(CliError):
    exit_code = EXIT_NOT_FOUND
    name = "NotFound"


class PaymentDeclined(CliError):
    exit_code = EXIT_PAYMENT
    name = "PaymentDeclined"

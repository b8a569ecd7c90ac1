from __future__ import annotations

from svcpay.program import errors
from tests.support.chain import TxResult


def assert_program_error(result: TxResult, name: str) -> None:
    """The transaction failed with the svc_billing error `name` (recognised by its code)."""
    assert not result.ok, f"expected {name}, but the transaction succeeded"
    err = result.program_error
    assert err is not None, f"expected {name}, got a non-program error: {result.error}"
    assert isinstance(err, errors.error_class(name)), f"expected {name}, got {err}"
    assert f"Error Code: {name}." in "\n".join(result.logs)

"""The request `svcpay pay` sends, as the user gave it (its headers and body from the
command line), and its failures as one-line CLI errors."""

from __future__ import annotations

import argparse
import json
import os
import sys

import httpx

from svcpay.cli._common import CliError, PaymentDeclined, UsageError, format_units
from svcpay.cli._errors import program_error_line
from svcpay.client import InsufficientFunds, PaymentAuth, PaymentError, SpendingLimitExceeded
from svcpay.program.errors import ProgramError


def header_arg(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"not a header: {text!r} (write 'Name: value')")
    return name.strip(), value.strip()


def body_of(data: str | None) -> bytes | None:
    if data is None:
        return None
    if data == "@-":
        return sys.stdin.buffer.read()
    if data.startswith("@"):
        try:
            with open(os.path.expanduser(data[1:]), "rb") as fh:
                return fh.read()
        except OSError as e:
            raise UsageError(f"cannot read --data file {data[1:]}: {e.strerror}") from None
    return data.encode()


def headers_of(pairs: list[tuple[str, str]], content: bytes | None) -> dict[str, str]:
    headers = dict(pairs)
    if content is not None and not any(k.lower() == "content-type" for k in headers):
        try:
            json.loads(content)
            headers["Content-Type"] = "application/json"
        except ValueError:
            headers["Content-Type"] = "text/plain; charset=utf-8"
    return headers


def unreachable(e: httpx.TransportError, what: str) -> CliError:
    try:
        where = f"{e.request.url.scheme}://{e.request.url.netloc.decode()}"
    except RuntimeError:
        where = "the server"
    reason = str(e) or type(e).__name__
    return CliError(f"cannot reach {what} at {where} ({reason}): check the URL and that it runs")


class Request:
    """The request being paid for, as the user gave it."""

    def __init__(
        self,
        args: argparse.Namespace,
        method: str,
        content: bytes | None,
        headers: dict[str, str],
        http: httpx.AsyncClient,
    ) -> None:
        self.args, self.method, self.content, self.headers, self.http = (
            args,
            method,
            content,
            headers,
            http,
        )

    async def send(self, auth: PaymentAuth, facilitator: httpx.URL | None = None) -> httpx.Response:
        """The request again, with `auth` paying; its failures as one-line CLI errors."""
        args = self.args
        try:
            return await self.http.request(
                self.method, args.target, content=self.content, headers=self.headers, auth=auth
            )
        except SpendingLimitExceeded:
            raise  # the caller says which --max-amount it was
        except InsufficientFunds as e:
            raise PaymentDeclined(
                f"InsufficientFunds: {e}: top up the token balance of {auth.owner.pubkey()}"
            ) from None
        except PaymentError as e:
            raise PaymentDeclined(f"{type(e).__name__}: {e}") from None
        except ProgramError as e:
            raise PaymentDeclined(program_error_line(e)) from None
        except httpx.TransportError as e:
            host = e.request.url.host if has_request(e) else None
            to_facilitator = facilitator is not None and host == facilitator.host
            raise unreachable(e, "the facilitator" if to_facilitator else args.target) from None


def over_limit(e: SpendingLimitExceeded, limit: int, decimals: int) -> PaymentDeclined:
    return PaymentDeclined(
        f"SpendingLimitExceeded: {e}; nothing was paid: raise --max-amount "
        f"(now {format_units(limit, decimals)}) to allow it"
    )


def has_request(e: httpx.TransportError) -> bool:
    try:
        e.request  # noqa: B018
    except RuntimeError:
        return False
    return True

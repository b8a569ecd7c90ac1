"""The facilitator commands' configuration (svcpay.facilitator.config, from the environment,
with --database, --url and --keypair over it) and their database errors as one line."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from svcpay.cli._common import CliError, UsageError

if TYPE_CHECKING:
    from svcpay.facilitator.config import FacilitatorConfig

# The facilitator's modules are imported on use: the rest of the CLI works without the
# 'facilitator' extra (svcpay._extras).

# --database, as every command that opens the database takes it
DATABASE = {"metavar": "URL", "help": "database URL (default: $SVCPAY_DATABASE_URL)"}


def config(args: argparse.Namespace, *, need_keypair: bool = True) -> FacilitatorConfig:
    from svcpay.facilitator.config import ConfigError, FacilitatorConfig

    env = dict(os.environ)
    if getattr(args, "database", None):
        env["SVCPAY_DATABASE_URL"] = args.database
        env.pop("SVCPAY_DATABASE_URL_FILE", None)
    env["SVCPAY_RPC_URL"] = args.url  # its default is $SVCPAY_RPC_URL
    given = getattr(args, "keypair_source", "option") == "option"
    if given or not (
        env.get("SVCPAY_FACILITATOR_KEYPAIR") or env.get("SVCPAY_FACILITATOR_KEYPAIR_JSON")
    ):
        env["SVCPAY_FACILITATOR_KEYPAIR"] = args.keypair
        env.pop("SVCPAY_FACILITATOR_KEYPAIR_JSON", None)
    try:
        return FacilitatorConfig.from_env(env)
    except ConfigError as e:
        if need_keypair or "keypair" not in str(e):
            raise UsageError(str(e)) from None
        from solders.keypair import Keypair

        env.pop("SVCPAY_FACILITATOR_KEYPAIR", None)
        env["SVCPAY_FACILITATOR_KEYPAIR_JSON"] = json.dumps(list(bytes(Keypair())))
        return FacilitatorConfig.from_env(env)


@contextmanager
def database_errors() -> Iterator[None]:
    from svcpay.facilitator.db import DatabaseUrlError

    try:
        yield
    except DatabaseUrlError as e:
        raise UsageError(f"{e} (set SVCPAY_DATABASE_URL or pass --database)") from None
    except Exception as e:
        if type(e).__module__.startswith(("sqlalchemy", "psycopg", "sqlite3", "alembic")):
            raise CliError(
                f"database error: {str(e).splitlines()[0]}: check --database (or "
                "SVCPAY_DATABASE_URL) and that the database server runs"
            ) from None
        raise

"""`svcpay facilitator ...` (run and operate the facilitator) and `svcpay analytics`.

The facilitator reads its configuration from the environment (svcpay.facilitator.config:
SVCPAY_DATABASE_URL, SVCPAY_FACILITATOR_KEYPAIR, SVCPAY_RPC_URL, ...); `--url` and
`--keypair` given here override SVCPAY_RPC_URL and SVCPAY_FACILITATOR_KEYPAIR, and
`--database` overrides SVCPAY_DATABASE_URL.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from svcpay import stopping
from svcpay.cli._common import (
    CliError,
    NotFound,
    Subparsers,
    UsageError,
    billing_client,
    check_token_account,
    command,
    emit,
    pubkey_arg,
    run,
    subcommands,
    table,
)

if TYPE_CHECKING:
    from svcpay.facilitator.config import FacilitatorConfig
    from svcpay.rpc.cluster import Cluster

NAME = "facilitator"
NO_CHECK = "do not check --plan and --pay-to against the cluster at --url"


# The facilitator's modules are imported on use: the rest of the CLI works without the
# 'facilitator' extra, and these commands say which extra they need (svcpay._extras).


def positive_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: give requests a second above 0")
    return value


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


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything starts, so a port in use is one line."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UsageError(f"--host {host}: {e.strerror}: give an address of this machine") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise CliError(
                f"port {port} on {host} is already in use (another facilitator?): stop it, "
                "or pass --port N (0 picks a free port)"
            ) from None
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}: check --host") from None
    sock.listen(2048)
    return sock


def port_arg(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {text!r} (0 to 65535; 0 picks a free one)")
    return port


def serve(args: argparse.Namespace) -> int:
    from svcpay._extras import require
    from svcpay.facilitator.app import create_app
    from svcpay.facilitator.db import redacted
    from svcpay.facilitator.service import Facilitator

    require("svcpay facilitator serve", ["facilitator"], ["uvicorn"])
    import uvicorn

    # One line per event on stderr, timestamped; an outage is one line when it starts and one
    # when it ends, and the tracebacks behind it show at --log-level debug.
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("svcpay").setLevel(args.log_level.upper())
    cfg = config(args)
    if args.crank_interval is not None:
        cfg = replace(cfg, crank_interval_secs=args.crank_interval)
    if args.rpc_rate is not None:
        cfg = replace(cfg, rpc_rate=args.rpc_rate)
    with database_errors():
        service = Facilitator(cfg)
    app = create_app(service)
    sock = listen(args.host, args.port)
    service.on_network(on_the_nodes_cluster(cfg).network)
    server = uvicorn.Server(
        uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level)
    )

    def ready(port: int) -> None:
        print(
            f"svcpay facilitator ready http://{args.host}:{port} "
            f"key {service.public_key} database {redacted(cfg.database_url)}",
            flush=True,
        )

    # Ctrl-C and SIGTERM are a normal way to stop a server: exit 0 (svcpay.stopping).
    return 0 if stopping.serve(server, ready, [sock]) else 1


def on_the_nodes_cluster(cfg: FacilitatorConfig) -> FacilitatorConfig:
    """`cfg` on the RPC node's cluster (docs/adr/0038): SVCPAY_NETWORK, when set, must name
    it (else a one-line refusal); unset, it becomes the node's. A node that cannot be read
    now leaves a set network unchecked (with a warning), and refuses an unset one."""
    from svcpay.rpc import RpcSettings, connect
    from svcpay.rpc.cluster import WrongCluster, canonical, cluster_of

    async def read() -> Cluster:
        rpc = connect(RpcSettings.parse(cfg.rpc_url, cfg.rpc_rate))
        try:
            return await cluster_of(rpc)
        finally:
            await rpc.close()

    try:
        cluster = asyncio.run(read())
    except WrongCluster as e:
        raise UsageError(str(e)) from None
    except Exception as e:
        if not cfg.network_from_node:
            logging.getLogger("svcpay.facilitator").warning(
                "cannot read the RPC node's cluster now (%s): serving %s unchecked",
                str(e).splitlines()[0] if str(e) else type(e).__name__, cfg.network,
            )  # fmt: skip
            return cfg
        raise UsageError(
            f"cannot tell which cluster the RPC node is on ({type(e).__name__}: {e}): "
            "start it, check --url, or set SVCPAY_NETWORK"
        ) from None
    if cfg.network_from_node:
        return replace(cfg, network=cluster.network)
    try:
        cluster.require(cfg.network, "SVCPAY_NETWORK", "the RPC node at --url")
    except WrongCluster as e:
        raise UsageError(f"{e}: {cluster.hint(cfg.network)}") from None
    return replace(cfg, network=canonical(cfg.network) or cfg.network)  # "devnet": ours


def migrate_cmd(args: argparse.Namespace) -> int:
    from svcpay.facilitator.db import current_revision, migrate, redacted

    cfg = config(args, need_keypair=False)
    with database_errors():
        before = current_revision(cfg.database_url)
        migrate(cfg.database_url)
        after = current_revision(cfg.database_url)
    emit(
        args,
        {"database": redacted(cfg.database_url), "from": before, "to": after},
        [f"{redacted(cfg.database_url)}: schema {before or 'empty'} -> {after}"],
    )
    return 0


def check_resources(args: argparse.Namespace) -> None:
    """--plan names a svc_billing plan and --pay-to a token account, on the cluster at --url
    (skipped with --no-check, e.g. to set up before deploying)."""
    if args.no_check or not (args.plan or args.pay_to):
        return

    async def go() -> None:
        from svcpay.cli.plan import fetch_plan

        async with billing_client(args) as billing:
            for plan in args.plan:
                await fetch_plan(billing, plan)
            for pay_to in args.pay_to:
                await check_token_account(billing.rpc, pay_to, what="--pay-to")

    run(go())


def provider_create(args: argparse.Namespace) -> int:
    from svcpay.facilitator.store import Store

    cfg = config(args, need_keypair=False)
    check_resources(args)

    async def go() -> dict[str, Any]:
        store = Store.open(cfg.database_url)
        try:
            pid = await store.providers.create(args.name)
            key_id, key = await store.api_keys.create(pid, args.label)
            for plan in args.plan:
                await store.providers.add_resource(pid, "plan", str(plan))
            for pay_to in args.pay_to:
                await store.providers.add_resource(pid, "payTo", str(pay_to))
            return {"provider": pid, "name": args.name, "keyId": key_id, "apiKey": key}
        finally:
            await store.close()

    with database_errors():
        data = run(go())
    emit(
        args,
        data,
        [
            *table([("provider", data["provider"]), ("name", args.name)]),
            f"API key (shown once; store it as a secret): {data['apiKey']}",
        ],
    )
    return 0


def provider_add(args: argparse.Namespace) -> int:
    from svcpay.facilitator.store import Store

    cfg = config(args, need_keypair=False)
    if not args.plan and not args.pay_to:
        raise UsageError("name at least one --plan or --pay-to")
    check_resources(args)

    async def go() -> list[tuple[str, str]]:
        store = Store.open(cfg.database_url)
        try:
            if await store.providers.get(args.provider) is None:
                raise CliError(f"no provider {args.provider}", exit_code=3)
            for plan in args.plan:
                await store.providers.add_resource(args.provider, "plan", str(plan))
            for pay_to in args.pay_to:
                await store.providers.add_resource(args.provider, "payTo", str(pay_to))
            return await store.providers.resources(args.provider)
        finally:
            await store.close()

    with database_errors():
        resources = run(go())
    emit(
        args,
        {"provider": args.provider, "resources": [{"kind": k, "address": a} for k, a in resources]},
        [f"{kind:6} {address}" for kind, address in resources],
    )
    return 0


def provider_list(args: argparse.Namespace) -> int:
    from svcpay.facilitator.store import Store

    cfg = config(args, need_keypair=False)

    async def go() -> list[dict[str, Any]]:
        store = Store.open(cfg.database_url)
        try:
            return await store.providers.all()
        finally:
            await store.close()

    with database_errors():
        found = run(go())
    lines: list[str] = []
    for p in found:
        live = sum(k["revokedAt"] is None for k in p["keys"])
        lines.append(f"{p['id']}  {p['name']}  {live} live key{'s' * (live != 1)} "
                     f"of {len(p['keys'])}")  # fmt: skip
        lines += [f"  {r['kind']:6} {r['address']}" for r in p["resources"]]
    emit(args, {"providers": found}, lines or ["no providers (`svcpay facilitator provider "
                                               "create NAME`)"])  # fmt: skip
    return 0


def provider_revoke(args: argparse.Namespace) -> int:
    from svcpay.facilitator.store import Store

    cfg = config(args, need_keypair=False)

    async def go() -> int:
        store = Store.open(cfg.database_url)
        try:
            if args.key:
                return int(await store.api_keys.revoke(args.key))
            if await store.providers.get(args.provider) is None:
                raise NotFound(
                    f"no provider {args.provider}: see `svcpay facilitator provider list`"
                )
            return await store.api_keys.revoke_all(args.provider)
        finally:
            await store.close()

    if bool(args.provider) == bool(args.key):
        raise UsageError("name a PROVIDER (all its keys) or one --key KEY_ID")
    with database_errors():
        revoked = run(go())
    if args.key and not revoked:
        raise NotFound(f"no live API key {args.key}: see `svcpay facilitator provider list`")
    emit(
        args,
        {"provider": args.provider, "key": args.key, "revoked": revoked},
        [f"revoked {revoked} API key{'s' * (revoked != 1)}: requests with "
         f"{'them' if revoked != 1 else 'it'} now get 401"],
    )  # fmt: skip
    return 0


def crank_cmd(args: argparse.Namespace) -> int:
    from svcpay.facilitator import crank
    from svcpay.facilitator.service import Facilitator

    cfg = config(args)

    async def go() -> dict[str, Any]:
        service = Facilitator(cfg)
        try:
            began = time.monotonic()

            def progress(done: crank.CrankSummary) -> None:
                handled = done.renewed + done.renewal_failed + done.ended + done.skipped
                print(
                    f"\rbilling run: {handled}/{done.due} due subscriptions handled, "
                    f"{done.transactions} transactions",
                    end="",
                    file=sys.stderr,
                    flush=True,
                )

            summary = await service.crank_once(progress=progress)
            if summary.transactions:
                print(file=sys.stderr)
            return {**summary.to_json_dict(), "seconds": round(time.monotonic() - began, 2)}
        finally:
            await service.aclose()

    with database_errors():
        data = run(go())
    emit(args, data, table([(k, v) for k, v in data.items() if k != "errors"]))
    return 0


def analytics_cmd(args: argparse.Namespace) -> int:
    from svcpay.facilitator import analytics
    from svcpay.facilitator.store import Store

    cfg = config(args, need_keypair=False)
    chart = Path(args.chart).expanduser() if args.chart else None
    if chart is not None and not chart.parent.is_dir():
        raise UsageError(
            f"cannot write the chart to {chart}: the directory {chart.parent} does not "
            "exist; create it or give --chart a path in an existing directory"
        )
    params = {k: v for k, v in (("from", args.start), ("to", args.end)) if v}
    try:
        start, end = analytics.parse_range(params, int(time.time()))
    except ValueError as e:
        raise UsageError(str(e)) from None

    async def go() -> dict[str, Any]:
        store = Store.open(cfg.database_url)
        try:
            return await analytics.report(store, provider_id=args.provider, start=start, end=end)
        finally:
            await store.close()

    with database_errors():
        data = run(go())
    if chart is not None:
        png = analytics.chart_png(data, title=f"svcpay: {data['from']} to {data['to']}")
        try:
            chart.write_bytes(png)
        except OSError as e:
            raise UsageError(
                f"cannot write the chart to {chart}: {e.strerror}; give --chart a writable path"
            ) from None
    lines = analytics_lines(data, args.provider)
    if args.chart:
        lines.append(f"chart: {args.chart}")
    emit(args, {**data, "chart": args.chart}, lines)
    return 0


def analytics_lines(data: dict[str, Any], provider: str | None) -> list[str]:
    """The report as rows of text: totals, each mode, plan and provider, then the days with
    activity (amounts in base units, as the API gives them)."""
    totals = data["totals"]

    def paid(row: dict[str, Any]) -> str:
        text = f"{row['volume']} in {row['payments']} payment{'s' * (row['payments'] != 1)}"
        if row.get("fees", "0") != "0":  # a Token-2022 transfer-fee mint withheld some
            text += f" (fees {row['fees']}, net {row['net']})"
        return text

    rows: list[tuple[str, object]] = [
        ("volume", paid(totals)),
        *((f"  {mode}", paid(row)) for mode, row in totals["byMode"].items()),
        ("active subscriptions", data["subscriptions"]["active"]),
        ("new", data["subscriptions"]["new"]),
        ("churned", data["subscriptions"]["churned"]),
        ("recurring revenue (30 days)", data["recurringRevenue"]["monthly"]),
        *((f"plan {row['plan']}", paid(row)) for row in data.get("byPlan", [])),
        *(
            (f"provider {row['name'] or row['provider'] or '(none)'}", paid(row))
            for row in data.get("byProvider", [])
        ),
    ]
    header = f"{'date':10}  {'volume':>14}  {'payments':>8}  {'new':>4}  {'churned':>7}"
    return [
        f"{data['from']} to {data['to']}" + (f", provider {provider}" if provider else ""),
        *table(rows),
        "",
        header,
        *(
            f"{d['date']:10}  {d['volume']:>14}  {d['payments']:>8}  "
            f"{d['newSubscriptions']:>4}  {d['churned']:>7}"
            for d in data["days"]
            if d["payments"] or d["newSubscriptions"] or d["churned"]
        ),
    ]


DATABASE = {"metavar": "URL", "help": "database URL (default: $SVCPAY_DATABASE_URL)"}


def register(subparsers: Subparsers) -> None:
    group = command(
        subparsers,
        NAME,
        None,
        help="run and operate the facilitator",
        description="Run the facilitator service, migrate its database, manage providers "
        "and their API keys, and run a billing pass by hand.",
    )
    sub = subcommands(group, "facilitator commands")

    _register_serve(sub)

    p = command(
        sub,
        "migrate",
        migrate_cmd,
        help="create or upgrade the database schema",
        description="Brings the database's schema to the current revision (Alembic).",
    )
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]

    p = command(
        sub,
        "crank",
        crank_cmd,
        help="run one billing pass now",
        description="Collects every due subscription of the registered plans once and "
        "prints the summary.",
    )
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]

    _register_provider(sub)
    _register_analytics(subparsers)


def _register_serve(sub: Subparsers) -> None:
    """`svcpay facilitator serve` and its options."""
    p = command(
        sub,
        "serve",
        serve,
        help="run the HTTP service",
        description="Runs the facilitator's HTTP API with webhook delivery, the billing crank "
        "and the chain indexer in the background, until Ctrl-C.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_arg, default=8402, help="0 picks a free port (default 8402)")
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]
    p.add_argument(
        "--crank-interval",
        type=float,
        metavar="SECS",
        help="seconds between billing runs (default $SVCPAY_CRANK_INTERVAL_SECS or 60; 0: off)",
    )
    p.add_argument(
        "--rpc-rate",
        type=positive_rate,
        metavar="PER_SEC",
        help="requests a second to each RPC URL at most, under your provider's limit "
        "(default $SVCPAY_RPC_RATE, else none); -u may list several URLs, comma-separated: "
        "reads fail over in that order, transactions go to all",
    )
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning"])


def _register_provider(sub: Subparsers) -> None:
    """`svcpay facilitator provider` and its commands."""
    provider = command(
        sub,
        "provider",
        None,
        help="providers and their API keys",
        description="Providers are created by the operator; each gets an API key (shown "
        "once) and the plans and payTo accounts it owns.",
    )
    psub = subcommands(provider, "provider commands")
    p = command(psub, "create", provider_create, help="create a provider and its API key",
                description="Creates a provider, prints its API key once.")  # fmt: skip
    p.add_argument("name")
    p.add_argument("--label", default="", help="a note on the key")
    p.add_argument("--plan", action="append", type=pubkey_arg, default=[], help="a plan it owns")
    p.add_argument("--pay-to", action="append", type=pubkey_arg, default=[],
                   help="a token account it is paid to")  # fmt: skip
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]
    p.add_argument("--no-check", action="store_true", help=NO_CHECK)
    p = command(psub, "add", provider_add, help="register plans or payTo accounts",
                description="Registers more plans or payTo accounts to a provider.")  # fmt: skip
    p.add_argument("provider")
    p.add_argument("--plan", action="append", type=pubkey_arg, default=[])
    p.add_argument("--pay-to", action="append", type=pubkey_arg, default=[])
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]
    p.add_argument("--no-check", action="store_true", help=NO_CHECK)
    p = command(psub, "list", provider_list, help="list providers, their accounts and keys",
                description="Lists every provider with its plans, payTo accounts and API "
                "keys (ids and labels; keys themselves are never stored).")  # fmt: skip
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]
    p = command(psub, "revoke", provider_revoke, help="revoke a provider's API keys",
                description="Revokes every API key of PROVIDER, or the one --key: requests "
                "with it get 401 from then on. Its plans and history stay.")  # fmt: skip
    p.add_argument("provider", nargs="?", metavar="PROVIDER")
    p.add_argument("--key", metavar="KEY_ID", help="one key (its id, from `provider list`)")
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]


def _register_analytics(subparsers: Subparsers) -> None:
    """`svcpay analytics` (a top-level command: the facilitator's database is its source)."""
    p = command(
        subparsers,
        "analytics",
        analytics_cmd,
        help="payment volume, subscriptions and revenue (table and PNG chart)",
        description="Payment volume by day and mode, subscriptions (active, new, churned) "
        "and recurring revenue, from the facilitator's database.",
    )
    p.add_argument("--from", dest="start", metavar="DATE", help="YYYY-MM-DD or unix seconds")
    p.add_argument("--to", dest="end", metavar="DATE", help="YYYY-MM-DD or unix seconds")
    p.add_argument("--provider", help="one provider's figures (default: all)")
    p.add_argument("--chart", metavar="FILE.png", help="also write the chart here")
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]

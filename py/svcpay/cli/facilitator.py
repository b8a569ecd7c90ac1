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
import logging
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from svcpay import stopping
from svcpay.cli._common import (
    CliError,
    Subparsers,
    UsageError,
    command,
    emit,
    interval_arg,
    run,
    subcommands,
    table,
)
from svcpay.cli._mints import mint_arg
from svcpay.cli.facilitator_config import DATABASE, config, database_errors
from svcpay.cli.facilitator_providers import register_provider

if TYPE_CHECKING:
    from svcpay.facilitator.config import FacilitatorConfig
    from svcpay.rpc.cluster import Cluster

NAME = "facilitator"


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
    from svcpay.rpc import RpcSettings, connect, shown
    from svcpay.rpc.cluster import WrongCluster, canonical, cluster_of
    from svcpay.rpc_errors import rpc_unreachable

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
        why = rpc_unreachable(e)
        urls = ", ".join(shown(u) for u in RpcSettings.parse(cfg.rpc_url, cfg.rpc_rate).urls)
        reason = f"cannot reach {urls} ({why})" if why else f"{type(e).__name__}: {e}"
        raise UsageError(
            f"cannot tell which cluster the RPC node is on, {reason}: start it, check --url, "
            "or set SVCPAY_NETWORK"
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
            mint = args.mint
            if isinstance(mint, str):  # a symbol: its mint among those in the database
                first = await analytics.report(
                    store, provider_id=args.provider, start=start, end=end
                )
                seen = [row["mint"] for row in first["mints"]]
                seen += [
                    r["mint"] for r in first["recurringRevenue"]["byMint"] if r["mint"] not in seen
                ]
                mint = _mint_named(mint, seen)
            return await analytics.report(
                store,
                provider_id=args.provider,
                start=start,
                end=end,
                mint=None if mint is None else str(mint),
            )
        finally:
            await store.close()

    with database_errors():
        data = run(go())
    if chart is not None:
        png = analytics.chart_png(data, title=analytics.chart_title(data))
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


def _mint_named(symbol: str, seen: list[str | None]) -> str:
    """The mint of stablecoin `symbol` that the range's payments or live subscriptions are
    in (`seen`)."""
    from svcpay.protocol.stablecoins import STABLECOINS

    for coin in STABLECOINS:
        if coin.symbol == symbol and coin.mint in seen:
            return coin.mint
    raise UsageError(
        f"no payment or subscription in {symbol} in this range (in: "
        f"{', '.join(m or 'an unknown mint' for m in seen) or 'nothing'}); "
        "pass the mint's address instead"
    )


def analytics_lines(data: dict[str, Any], provider: str | None) -> list[str]:
    """The report as rows of text: its mint, totals, each mode, plan and provider, the other
    mints paid in, then the days with activity (amounts in base units, as the API gives
    them; amounts of different mints are never added)."""
    from svcpay.protocol.stablecoins import name_of

    totals = data["totals"]

    def coin(mint: str | None) -> str:
        if mint is None:
            return "an unknown mint"
        name = name_of(mint)
        return f"{mint} ({name})" if name else mint

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
        *(
            (f"also paid in {coin(row['mint'])}", paid(row))
            for row in data.get("mints", [])
            if row["mint"] != data.get("mint")
        ),
    ]
    header = f"{'date':10}  {'volume':>14}  {'payments':>8}  {'new':>4}  {'churned':>7}"
    return [
        f"{data['from']} to {data['to']}" + (f", provider {provider}" if provider else ""),
        *([f"in {coin(data.get('mint'))}"] if data.get("mint") or data.get("mints") else []),
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

    register_provider(sub)
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
        type=interval_arg,
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
    p.add_argument(
        "--mint",
        type=mint_arg,
        help="the mint to report: an address or a stablecoin's symbol (amounts of different "
        "mints are never added; default: the mint of most payments in the range)",
    )
    p.add_argument("--chart", metavar="FILE.png", help="also write the chart here")
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]

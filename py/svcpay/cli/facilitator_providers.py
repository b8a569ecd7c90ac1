"""`svcpay facilitator provider`: providers, the plans and payTo accounts they own, and their API
keys, in the facilitator's database (created by the operator)."""

from __future__ import annotations

import argparse
from typing import Any

from svcpay.cli._common import (
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
from svcpay.cli.facilitator_config import DATABASE, config, database_errors


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
            provider = await provider_id(store, args.provider)
            for plan in args.plan:
                await store.providers.add_resource(provider, "plan", str(plan))
            for pay_to in args.pay_to:
                await store.providers.add_resource(provider, "payTo", str(pay_to))
            return await store.providers.resources(provider)
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


async def provider_id(store: Any, ref: str) -> str:
    """The id of the provider `ref` names: its id (`prov_...`), or its name when exactly one
    provider has it. NotFound (exit 3) or UsageError (several of that name) otherwise."""
    if await store.providers.get(ref) is not None:
        return ref
    named = [p["id"] for p in await store.providers.all() if p["name"] == ref]
    if len(named) == 1:
        return str(named[0])
    if named:
        raise UsageError(
            f"{len(named)} providers are named {ref!r} ({', '.join(named)}): give the id"
        )
    raise NotFound(f"no provider {ref}: see `svcpay facilitator provider list`")


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
        lines += [
            f"  key    {k['id']}  {k['label'] or '-'}  "
            f"{'revoked' if k['revokedAt'] is not None else 'live'}"
            for k in p["keys"]
        ]
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
            return await store.api_keys.revoke_all(await provider_id(store, args.provider))
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


NO_CHECK = "do not check --plan and --pay-to against the cluster at --url"


def register_provider(sub: Subparsers) -> None:
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
    p.add_argument("provider", metavar="PROVIDER", help="its id (prov_...) or its name")
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
    p.add_argument("provider", nargs="?", metavar="PROVIDER", help="its id or its name")
    p.add_argument("--key", metavar="KEY_ID", help="one key (its id, from `provider list`)")
    p.add_argument("--database", **DATABASE)  # type: ignore[arg-type]

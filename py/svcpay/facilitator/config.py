"""The facilitator's configuration, from the environment (and files it names).

    SVCPAY_RPC_URL                   http://127.0.0.1:8899             the cluster's JSON-RPC
    SVCPAY_DATABASE_URL              sqlite:///$XDG_DATA_HOME/svcpay/facilitator.db (else
                                     ~/.local/share/svcpay/...) or postgresql://...; a
                                     relative SQLite path is made absolute at start
    SVCPAY_DATABASE_URL_FILE                                           a file holding the URL
    SVCPAY_FACILITATOR_KEYPAIR       ~/.config/solana/id.json          keypair file
    SVCPAY_FACILITATOR_KEYPAIR_JSON                                    the keypair's JSON array
    SVCPAY_NETWORK                   the RPC node's cluster            network name in proofs
    SVCPAY_PROOF_TTL_SECS            300                               proof lifetime
    SVCPAY_CRANK_INTERVAL_SECS       60                                billing runs at least
                                                                       this often (sooner
                                                                       when a renewal is
                                                                       due); 0: off
    SVCPAY_CRANK_LEASE_SECS          6                                 a crank lease, renewed
                                                                       while its pass runs
                                                                       (2 to 3600; shortened
                                                                       to a plan's period)
    SVCPAY_WEBHOOK_INTERVAL_SECS     1                                 outbox polling
    SVCPAY_WEBHOOK_RETRY_SECS        30                                a failed delivery's
                                                                       first retry (then
                                                                       doubling to 6 h)
    SVCPAY_INDEXER_INTERVAL_SECS     2                                 chain events; 0: off
    SVCPAY_PAST_DUE_RETRY_SECS       3600                              first retry of a
                                                                       failed renewal
    SVCPAY_SESSION_INTERVAL_SECS     5                                 the session redeemer's
                                                                       pass; 0: off
    SVCPAY_SESSION_REDEEM_SECS       300                               a voucher is redeemed
                                                                       at most this long after
                                                                       it was reported
    SVCPAY_SESSION_REDEEM_AT         1000000                           ...or once a session's
                                                                       unredeemed amount
                                                                       reaches this (base
                                                                       units)
    SVCPAY_INSTANCE                  host-pid                          name for leases
    SVCPAY_SETTLE_UNREGISTERED       0                                 1: settle payments to
                                                                       any payTo (pays fees
                                                                       for anyone)
    SVCPAY_PRIORITY_FEE_PERCENTILE   50                                the facilitator's own
                                                                       transactions pay this
                                                                       percentile of recent
                                                                       fees (svcpay.rpc.fees)
    SVCPAY_PRIORITY_FEE_CAP          100000                            ...at most this many
                                                                       micro-lamports a unit
    SVCPAY_SETTLE_RATE, _BURST       5, 20                             payments per second
                                                                       per payer, burst
    SVCPAY_WEBHOOK_ALLOW_LOCAL       0                                 1: webhooks may go to
                                                                       http and private or
                                                                       loopback addresses
    SVCPAY_DASHBOARD_SECRET          derived from the keypair          signs /dashboard's
                                                                       session cookies

The keypair is the facilitator's identity: it pays settlement fees, signs proofs, and signs
`deduct_allowance` for plans whose billing authority it is. It never comes from the
repository, and neither it nor the database password is ever logged.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from solders.keypair import Keypair

from svcpay.keys import KeypairFileError, load_keypair
from svcpay.protocol.headers import NETWORK_MAINNET
from svcpay.rpc import RpcSettings

# A crank lease: long enough for a heartbeat (a third of it) to land in time, short enough
# that another instance takes a dead one's work over quickly (docs/adr/0023).
MIN_LEASE_SECS = 2
MAX_LEASE_SECS = 3600


class ConfigError(ValueError):
    """The configuration is incomplete or malformed; the message says what to set."""


@dataclass(frozen=True)
class FacilitatorConfig:
    keypair: Keypair = field(repr=False)
    rpc_url: str = "http://127.0.0.1:8899"  # one URL, or several separated by commas
    rpc_rate: float | None = None  # requests a second to each RPC URL at most (svcpay.rpc)
    # The facilitator's own transactions (renewals, redeems, usage): a compute-unit price
    # at this percentile of the recent fees for the accounts they write, within the cap.
    priority_fee_percentile: float = 50.0
    priority_fee_cap: int = 100_000  # micro-lamports per compute unit
    database_url: str = field(default_factory=lambda: default_database_url(), repr=False)
    network: str = NETWORK_MAINNET
    # SVCPAY_NETWORK unset: the network is the RPC node's cluster, read at start
    # (`svcpay facilitator serve`; svcpay.rpc.cluster, docs/adr/0038).
    network_from_node: bool = False
    proof_ttl_secs: int = 300
    crank_interval_secs: float = 60.0
    crank_lease_secs: int = 6
    webhook_interval_secs: float = 1.0
    webhook_retry_secs: int = 30
    indexer_interval_secs: float = 2.0
    past_due_retry_secs: int = 3600
    session_interval_secs: float = 5.0
    session_redeem_secs: int = 300
    session_redeem_at: int = 1_000_000
    settle_unregistered: bool = False
    settle_rate_per_sec: float = 5.0
    settle_burst: int = 20
    webhook_allow_local: bool = False
    dashboard_secret: str | None = field(default=None, repr=False)
    instance: str = f"{socket.gethostname()}-{os.getpid()}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FacilitatorConfig:
        e = os.environ if env is None else env
        return cls(
            keypair=_keypair(e),
            rpc_url=_rpc_urls(e),
            rpc_rate=_number(e, "SVCPAY_RPC_RATE", 0) or None,
            priority_fee_percentile=_percentile(e),
            priority_fee_cap=int(_number(e, "SVCPAY_PRIORITY_FEE_CAP", cls.priority_fee_cap)),
            database_url=_database_url(e),
            network=e.get("SVCPAY_NETWORK") or cls.network,
            network_from_node=not e.get("SVCPAY_NETWORK"),
            proof_ttl_secs=int(_number(e, "SVCPAY_PROOF_TTL_SECS", cls.proof_ttl_secs)),
            crank_interval_secs=_number(e, "SVCPAY_CRANK_INTERVAL_SECS", cls.crank_interval_secs),
            crank_lease_secs=_lease(e),
            webhook_interval_secs=_number(
                e, "SVCPAY_WEBHOOK_INTERVAL_SECS", cls.webhook_interval_secs
            ),
            webhook_retry_secs=max(
                1, int(_number(e, "SVCPAY_WEBHOOK_RETRY_SECS", cls.webhook_retry_secs))
            ),
            indexer_interval_secs=_number(
                e, "SVCPAY_INDEXER_INTERVAL_SECS", cls.indexer_interval_secs
            ),
            past_due_retry_secs=int(
                _number(e, "SVCPAY_PAST_DUE_RETRY_SECS", cls.past_due_retry_secs)
            ),
            session_interval_secs=_number(
                e, "SVCPAY_SESSION_INTERVAL_SECS", cls.session_interval_secs
            ),
            session_redeem_secs=int(
                _number(e, "SVCPAY_SESSION_REDEEM_SECS", cls.session_redeem_secs)
            ),
            session_redeem_at=int(_number(e, "SVCPAY_SESSION_REDEEM_AT", cls.session_redeem_at)),
            instance=e.get("SVCPAY_INSTANCE", cls.instance),
            settle_unregistered=_flag(e, "SVCPAY_SETTLE_UNREGISTERED"),
            settle_rate_per_sec=_number(e, "SVCPAY_SETTLE_RATE", cls.settle_rate_per_sec)
            or cls.settle_rate_per_sec,
            settle_burst=max(1, int(_number(e, "SVCPAY_SETTLE_BURST", cls.settle_burst))),
            webhook_allow_local=_flag(e, "SVCPAY_WEBHOOK_ALLOW_LOCAL"),
            dashboard_secret=e.get("SVCPAY_DASHBOARD_SECRET") or None,
        )


def _rpc_urls(env: Mapping[str, str]) -> str:
    """SVCPAY_RPC_URL: one URL or several, comma-separated (reads fail over in that order,
    transactions go to all); ConfigError naming the bad one."""
    raw = env.get("SVCPAY_RPC_URL", FacilitatorConfig.rpc_url)
    try:
        RpcSettings.parse(raw)
    except ValueError as e:
        raise ConfigError(f"SVCPAY_RPC_URL: {e}") from None
    return raw


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise ConfigError(f"{name} must be 1 or 0, not {raw!r}")


def _percentile(env: Mapping[str, str]) -> float:
    name = "SVCPAY_PRIORITY_FEE_PERCENTILE"
    value = _number(env, name, FacilitatorConfig.priority_fee_percentile)
    if value > 100:
        raise ConfigError(f"{name} is a percentile: 0 to 100, not {value:g}")
    return value


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as e:
        raise ConfigError(f"{name} must be a number, not {raw!r}") from e
    if value < 0:
        raise ConfigError(f"{name} must not be negative")
    return value


def _lease(env: Mapping[str, str]) -> int:
    name = "SVCPAY_CRANK_LEASE_SECS"
    value = _number(env, name, FacilitatorConfig.crank_lease_secs)
    if value != int(value) or not MIN_LEASE_SECS <= value <= MAX_LEASE_SECS:
        raise ConfigError(
            f"{name} must be a whole number of seconds from {MIN_LEASE_SECS} to "
            f"{MAX_LEASE_SECS}, not {env.get(name)!r}"
        )
    return int(value)


def _database_url(env: Mapping[str, str]) -> str:
    path = env.get("SVCPAY_DATABASE_URL_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as e:
            raise ConfigError(f"SVCPAY_DATABASE_URL_FILE: cannot read {path}") from e
    return absolute_sqlite(env.get("SVCPAY_DATABASE_URL") or default_database_url(env))


def default_database_url(env: Mapping[str, str] | None = None) -> str:
    """SQLite in the XDG data directory ($XDG_DATA_HOME, else ~/.local/share): the same
    database from any working directory."""
    e = os.environ if env is None else env
    data_home = e.get("XDG_DATA_HOME") or ""
    base = Path(data_home) if Path(data_home).is_absolute() else Path.home() / ".local/share"
    return f"sqlite:///{base / 'svcpay' / 'facilitator.db'}"


_SQLITE = re.compile(r"^(sqlite(?:\+\w+)?:///)(?!/)(?!:memory:)([^?]+)(.*)$")


def absolute_sqlite(url: str) -> str:
    """`sqlite:///relative/f.db` -> `sqlite:////abs/cwd/relative/f.db` (and `~` expanded):
    two shells in two directories see one database."""
    match = _SQLITE.match(url.strip())
    if match is None:
        return url
    prefix, path, query = match.groups()
    return f"{prefix}{Path(path).expanduser().resolve()}{query}"


def _keypair(env: Mapping[str, str]) -> Keypair:
    inline = env.get("SVCPAY_FACILITATOR_KEYPAIR_JSON")
    if inline:
        try:
            raw = json.loads(inline)
            return Keypair.from_bytes(bytes(raw))
        except (ValueError, TypeError) as e:
            raise ConfigError(
                "SVCPAY_FACILITATOR_KEYPAIR_JSON must be a JSON array of 64 bytes"
            ) from e
    path = env.get("SVCPAY_FACILITATOR_KEYPAIR", "~/.config/solana/id.json")
    try:
        return load_keypair(path)
    except KeypairFileError as e:
        raise ConfigError(
            f"facilitator keypair: {e}; set SVCPAY_FACILITATOR_KEYPAIR to a keypair file "
            "(`svcpay keys create --outfile PATH`)"
        ) from e

"""The table of the lossy-RPC benchmark (scripts/bench/lossy.py): one column per setting, the
rows of issue 37, and each goal with a pass/fail word. Printed, never asserted."""

from __future__ import annotations

import argparse
import math
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from scripts.bench.lossy_load import Answers, Payment, Renewals
from svcpay.examples.resource_server import DATA_PRICE

TRACEBACK = "Traceback (most recent call last)"
WIDTH = 32
SERVICES = ("facilitator", "gate")
# The indexer's and the crank's scans, left out of the calls a payment costs (the renewals'
# own sends and polls stay in: a slight overcount).
BACKGROUND = frozenset({"getSignaturesForAddress", "getProgramAccounts", "getTransaction"})


@dataclass
class Column:
    """What one setting's run measured."""

    name: str
    payments: list[Payment]
    answers: Answers
    renewals: Renewals
    minutes: float
    idle_minutes: float
    stats: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]  # start, after idle, end
    logs: dict[str, str]
    api_failed_starts: int
    received: int
    subscription_charges: int

    def of(self, kind: str) -> list[Payment]:
        return [p for p in self.payments if p.kind == kind]

    def calls(self, role: str, since: int = 0, until: int = 2) -> Counter[str]:
        """`role`'s calls by method between two of the snapshots (0 start, 1 after the idle
        window, 2 end)."""
        calls = Counter(self.stats[until][role]["calls"])
        calls.subtract(Counter(self.stats[since][role]["calls"]))
        return +calls

    def stat(self, role: str, key: str) -> int:
        return int(self.stats[2][role][key]) - int(self.stats[0][role][key])


def own_lines(log: str) -> list[str]:
    """A service's log lines, without uvicorn's start and stop lines and the webhook
    deliveries the bench's receiver refuses on purpose (every third event's first try)."""
    return [
        line
        for line in log.splitlines()
        if not line.startswith("INFO:     ") and "svcpay.webhooks" not in line
    ]


def word(ok: bool) -> str:
    return "ok" if ok else "FAIL"


def one_time_rows(c: Column, kind: str) -> dict[str, str]:
    ps = c.of(kind)
    if not ps:
        return {}
    once = [p for p in ps if p.served and p.paid == DATA_PRICE]
    unpaid = [p for p in ps if p.served and p.paid == 0]
    unserved = [p for p in ps if not p.served and p.paid > 0]
    nothing = [p for p in ps if not p.served and p.paid == 0]
    twice = [p for p in ps if p.paid > DATA_PRICE]
    took = f" (each ~{statistics.median(p.seconds for p in nothing):.0f} s)" if nothing else ""
    rows = {
        f"{kind}: served, paid once": f"{len(once)} / {len(ps)}",
        f"{kind}: served, never paid (goal 0)": f"{len(unpaid)} {word(not unpaid)}",
        f"{kind}: paid, client told it failed (goal 0)": f"{len(unserved)} {word(not unserved)}",
        f"{kind}: failed, nothing paid": f"{len(nothing)}{took}",
        f"{kind}: paid more than once (goal 0)": f"{len(twice)} {word(not twice)}",
    }
    if kind == "svcpay":
        times = sorted(p.seconds for p in ps if p.served)
        # Nearest rank: the 99th of 100 times, the slowest of fewer than 100.
        p99 = times[math.ceil(0.99 * len(times)) - 1] if times else float("nan")
        rows["svcpay: p99 time to proof (goal < 10 s)"] = f"{p99:.1f} s {word(p99 < 10)}"
    return rows


def failures(c: Column) -> list[str]:
    """What the clients told failed payments, by reason (the first 3 kinds)."""
    why = Counter(p.error.split(":")[0] or f"HTTP {p.status}" for p in c.payments if not p.served)
    return [f"{n}x {reason}" for reason, n in why.most_common(3)]


def rpc_rows(c: Column, clean: bool) -> dict[str, str]:
    attempted = max(1, len(c.payments))
    payers = sum(c.calls("payers").values())
    fac_idle = sum(c.calls("facilitator", 0, 1).values())
    idle_rate = fac_idle / c.idle_minutes if c.idle_minutes else 0.0
    during = c.calls("facilitator", 1)
    fac_net = sum(n for method, n in during.items() if method not in BACKGROUND)
    per = (payers + fac_net) / attempted
    goal = 5 if clean else 15
    fac_all = c.calls("facilitator")
    return {
        "RPC calls / one-time payment (goal <= 5 clean, 15 lossy)": (
            f"{per:.1f} {word(per <= goal)} "
            f"({payers / attempted:.1f} payer + {fac_net / attempted:.1f} fac)"
        ),
        "facilitator RPC calls / minute": (
            f"{sum(fac_all.values()) / c.minutes:.0f} (idle {idle_rate:.0f}; "
            f"{c.stat('facilitator', 'throttled')} 429s)"
        ),
        "gate RPC calls / minute": f"{sum(c.calls('gate').values()) / c.minutes:.0f}",
        "sends dropped / 429s by the proxies": (
            f"{sum(c.stat(r, 'dropped') for r in c.stats[2])} / "
            f"{sum(c.stat(r, 'throttled') for r in c.stats[2])}"
        ),
    }


def rows_of(c: Column) -> dict[str, str]:
    rows: dict[str, str] = {}
    for kind in ("svcpay", "x402", "mpp"):
        rows |= one_time_rows(c, kind)
    rows["why failed payments failed"] = "; ".join(failures(c)) or "-"
    r = c.renewals
    worst = max(r.lateness, default=0.0)
    rows["renewals done / due"] = f"{r.done} / {r.due} {word(r.done == r.due)}"
    rows["worst renewal lateness (goal <= 15 s)"] = f"{worst:.0f} s {word(worst <= 15)}"
    a = c.answers
    five = {s: (a.fivexx(s, retry_later=False), a.fivexx(s, retry_later=True)) for s in SERVICES}
    bad = sum(n for pair in five.values() for n in pair)
    rows["5xx (goal 0): facilitator, gate"] = (
        f"{sum(five['facilitator'])}, {sum(five['gate'])} {word(not bad)}"
    )
    rows["  of them 503/504 (retry later)"] = f"{five['facilitator'][1]}, {five['gate'][1]}"
    tb = {name: log.count(TRACEBACK) for name, log in c.logs.items()}
    rows["tracebacks (goal 0): facilitator / gate"] = (
        f"{tb['facilitator']} / {tb['gate']} {word(not any(tb.values()))}"
    )
    lines = {name: len(own_lines(log)) / c.minutes for name, log in c.logs.items()}
    rows["log lines / minute: facilitator / gate"] = (
        f"{lines['facilitator']:.1f} / {lines['gate']:.1f}"
    )
    rows |= rpc_rows(c, clean=c.name == "latency")
    expected = sum(p.paid for p in c.payments) + c.subscription_charges
    rows["money: payTo received = wallets paid"] = (
        f"{'exact' if expected == c.received else f'MISMATCH {c.received - expected:+d}'}"
    )
    rows["example API starts refused"] = str(c.api_failed_starts)
    return rows


def print_table(columns: list[Column], settings: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"\nsvcpay through a lossy RPC: {args.svcpay} svcpay, {args.x402} x402, {args.mpp} MPP "
        f"one-time payments over {args.seconds:.0f} s + {args.drain:.0f} s drain; "
        f"{args.subscriptions} subscriptions every {args.period} s"
    )
    table = [rows_of(c) for c in columns]
    names = list(dict.fromkeys(k for rows in table for k in rows))
    first = max(len(n) for n in names) + 2
    header = "".join(f"{settings[c.name][0]:<{WIDTH}}" for c in columns)
    print(f"{'':<{first}}{header}")
    for name in names:
        cells = "".join(f"{rows.get(name, '-'):<{WIDTH}}" for rows in table)
        print(f"{name:<{first}}{cells}".rstrip())
    print("facilitator RPC calls / minute by method:")
    for c in columns:
        by_method = c.calls("facilitator").most_common()
        print(f"  {c.name}: " + ", ".join(f"{m} {n / c.minutes:.0f}" for m, n in by_method))
    print("RPC calls / one-time payment by method (payers; facilitator, background apart):")
    for c in columns:
        attempted = max(1, len(c.payments))
        payers = c.calls("payers").most_common()
        fac = [(m, n) for m, n in c.calls("facilitator", 1).most_common() if m not in BACKGROUND]
        print(
            f"  {c.name}: payers "
            + ", ".join(f"{m} {n / attempted:.2f}" for m, n in payers)
            + "; facilitator "
            + ", ".join(f"{m} {n / attempted:.2f}" for m, n in fac)
        )
    print("the slowest svcpay payments, each HTTP answer its client got (s since it began):")
    for c in columns:
        slow = sorted((p for p in c.of("svcpay") if p.served), key=lambda p: -p.seconds)[:3]
        proxy = c.stats[2]["facilitator"]
        for p in slow:
            steps = ", ".join(f"{at:.1f} {svc}{path} {st}" for at, svc, path, st in p.steps)
            print(f"  {c.name}: {p.seconds:.1f} s: {steps}")
            for sig, block_time in p.signatures:  # the facilitator's copies, through its proxy
                copies = proxy.get("sends", {}).get(sig, [])
                shown = ", ".join(
                    f"{at + proxy['started'] - p.began:.1f} {what}" for at, what in copies
                )
                landed = (
                    ""
                    if block_time is None
                    else f"; its block's time {block_time - p.began_at:+.0f} s"
                )
                print(f"    {sig[:8]} sent: {shown or 'not through the facilitator proxy'}{landed}")

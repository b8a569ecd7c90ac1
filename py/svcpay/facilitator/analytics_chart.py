"""The analytics report as a PNG chart (matplotlib, the 'charts' extra): daily volume by mode,
and subscriptions active, new and churned. `svcpay.facilitator.analytics` builds the report
and re-exports `chart_png`."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

from svcpay._extras import require

_COLORS = {
    "oneTime": "#4e79a7",
    "subscription": "#f28e2b",
    "metered": "#59a14f",
    "session": "#b07aa1",
}
_LABELS = {
    "oneTime": "one-time",
    "subscription": "subscription",
    "metered": "metered",
    "session": "session",
}


def chart_png(
    report: Mapping[str, Any],
    *,
    title: str,
    decimals: int = 6,
    width: int = 1000,
    height: int = 600,
) -> bytes:
    """A PNG (`width` x `height` px) of a `report`: daily volume stacked by mode in token units
    (base units / 10**decimals) above, subscriptions (active line, new and churned bars)
    below. Drawn on its own Agg canvas: pyplot's global state is never touched."""
    require("svcpay's analytics chart", ["charts"], ["matplotlib"])
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    days: list[Mapping[str, Any]] = list(report.get("days", []))
    n = len(days)
    x = list(range(n))
    scale = 10**decimals

    dpi = 100
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    fig.subplots_adjust(left=0.08, right=0.98, top=0.92, bottom=0.14, hspace=0.08)
    fig.suptitle(title, fontsize=13)

    # Up to two months as bars; longer ranges as filled steps (one patch a series, not a
    # rectangle a day: a year renders in a tenth of the time, and looks the same).
    steps = n > 62
    edges = [i - 0.5 for i in range(n + 1)]
    stacked = [0.0] * n
    for key, color in _COLORS.items():
        values = [int(d.get(key, 0)) / scale for d in days]
        above = [a + b for a, b in zip(stacked, values, strict=True)]
        if steps:
            top.stairs(above, edges, baseline=stacked, fill=True, color=color, label=_LABELS[key])
        else:
            top.bar(x, values, 0.8, bottom=stacked, color=color, label=_LABELS[key], linewidth=0)
        stacked = above
    top.set_ylabel(f"volume (tokens, {decimals} decimals)")
    top.set_ylim(bottom=0, top=max([*stacked, 0.0]) * 1.1 or 1.0)
    top.grid(axis="y", alpha=0.3)
    top.legend(loc="upper left", ncols=3, fontsize=9, frameon=False)
    if not any(stacked):
        top.text(
            0.5,
            0.5,
            "no payments in this range",
            transform=top.transAxes,
            ha="center",
            va="center",
            color="#888888",
        )

    active = [int(d.get("activeSubscriptions", 0)) for d in days]
    new = [int(d.get("newSubscriptions", 0)) for d in days]
    churned = [int(d.get("churned", 0)) for d in days]
    if steps:
        bottom.stairs(new, edges, fill=True, color="#59a14f", alpha=0.6, label="new")
        bottom.stairs(churned, edges, fill=True, color="#e15759", alpha=0.6, label="churned")
    else:
        bottom.bar([i - 0.2 for i in x], new, 0.4, color="#59a14f", label="new", linewidth=0)
        bottom.bar(
            [i + 0.2 for i in x], churned, 0.4, color="#e15759", label="churned", linewidth=0
        )
    bottom.plot(
        x,
        active,
        color="#4e79a7",
        linewidth=1.8,
        label="active",
        marker="o" if n <= 45 else None,
        markersize=3,
    )
    bottom.set_ylabel("subscriptions")
    bottom.set_xlabel("day (UTC)")
    bottom.set_ylim(bottom=0, top=max([*active, *new, *churned, 0]) * 1.15 or 1.0)
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
    bottom.grid(axis="y", alpha=0.3)
    bottom.legend(loc="upper left", ncols=3, fontsize=9, frameon=False)

    step = max(1, math.ceil(n / 12))
    ticks = x[::step]
    bottom.set_xticks(
        ticks, [str(days[i].get("date", "")) for i in ticks], fontsize=8, rotation=30, ha="right"
    )
    bottom.set_xlim(-0.6, max(n - 0.4, 0.6))

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()

"""`svcpay demo --serve`: once the walkthrough is done, the services stay up for a person
(issue 26): the example API's paywall in a browser, the facilitator's dashboard with the
demo provider's data, until Ctrl-C (or SIGTERM) stops them as the walkthrough would.

The demo's paying client is saved as a keypair file: a wallet that imports it (or the test
wallet of tests/browser) pays the paywall with the USDC it has left.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from svcpay import stopping
from svcpay.demo.children import Child, DemoFailed
from svcpay.keys import save_keypair

if TYPE_CHECKING:
    from svcpay.demo.services import Services
    from svcpay.demo.world import World

# What tests and scripts look for: the first line of the block, then one "name  value" line
# per entry of `urls`.
SERVING = "── Serving until Ctrl-C"


def urls(services: Services, validator_url: str, wallet: Path, database: str) -> dict[str, str]:
    return {
        "paywall": f"{services.api_url}/v1/data",
        "dashboard": f"{services.facilitator_url}/dashboard",
        "api key": services.api_key,
        "facilitator": services.facilitator_url,
        "database": database,
        "validator": validator_url,
        "wallet": str(wallet),
    }


def serve(
    tmp: Path, services: Services, world: World, validator_url: str, balance: str,
    children: list[Child],
) -> None:  # fmt: skip
    """Prints where each page is and waits for Ctrl-C or SIGTERM (stopping.Interrupted);
    DemoFailed if a service exits meanwhile."""
    wallet = save_keypair(world.client, tmp / "wallet.json")
    database = f"sqlite:///{tmp / 'facilitator.db'}"
    shown = urls(services, validator_url, wallet, database)
    print(f"\n{SERVING}", flush=True)
    width = max(len(k) for k in shown)
    notes = {
        "paywall": "open it in a browser: the HTML 402, payable from a Solana wallet",
        "dashboard": "log in with the API key below",
        "wallet": f"the demo's client (Solana CLI format): {balance} left, no SOL needed",
    }
    for name, value in shown.items():
        note = f"  ({notes[name]})" if name in notes else ""
        print(f"   {name.ljust(width)}  {value}{note}", flush=True)
    print("   Ctrl-C stops everything.", flush=True)
    while True:
        for child in children:
            if child.proc.poll() is not None:
                raise DemoFailed(f"the {child.name} exited while serving", child)
        stopping.sleep(0.5)

"""The walkthrough: svcpay as separate processes, and a paying client going through the
spec's three flows against them, then a session. `Walkthrough` (`context`, below the flows)
holds what the steps share (the clients, balances, webhooks); each flow is a module of its
own: `one_time` (1, 1b), `mpp` (1c), `subscriptions` (2 to 4), `sessions` (5), `report`
(6, 7), `agents` (8, an agent over MCP), and `walk_through` here runs them in order. The
chain's setup is `world`, the processes `services`, the printing `output`.

With `token_2022` (`--token-2022`) the plans, so the subscription, its renewal and metered
billing, are priced in a PYUSD-like Token-2022 mint (6 decimals, a transfer hook, a
permanent delegate, a zero transfer fee); one-time payments and the session stay in USDC:
the example API sells its plans in one token and single calls in another.

Processes: the local validator (svcpay's drop-in, which can move its clock), the facilitator
(`svcpay facilitator serve`: settlement API, billing crank, webhooks, indexer, analytics; on
SQLite) and the example resource server (`python -m svcpay.examples.resource_server`). This
process plays the paying client and the provider's webhook endpoint. Each step prints what
crossed the wire and what changed on chain.
"""

from __future__ import annotations

import sys
import tempfile
import time
import traceback
from contextlib import ExitStack
from pathlib import Path

import httpx

from svcpay import stopping
from svcpay.demo import agents, mpp, one_time, report, sessions, subscriptions
from svcpay.demo import serve as serving
from svcpay.demo.children import Child, DemoFailed
from svcpay.demo.context import Walkthrough
from svcpay.demo.options import DEFAULT_OUT
from svcpay.demo.output import say, step, usdc
from svcpay.demo.receiver import WebhookReceiver
from svcpay.demo.services import start_services
from svcpay.demo.world import set_up_chain, token_balance
from svcpay.localnet.chain import Chain
from svcpay.localnet.process import LocalnetError, ProgramBinaryMissing, localnet


# -- the walkthrough -------------------------------------------------------------------------
async def walk_through(walk: Walkthrough) -> None:
    """The flows in order, on what `walk` shares; its clients are closed at the end."""
    try:
        await walk.register_webhooks()
        await one_time.one_time(walk)
        await one_time.x402_exact(walk)
        await mpp.charge(walk)
        sub = await subscriptions.subscription(walk)
        await subscriptions.renewal(walk, sub)
        await subscriptions.metered(walk)
        await sessions.session(walk)
        await report.webhook_summary(walk)
        await report.analytics(walk)
        await agents.mcp_agent(walk)
    finally:
        await walk.aclose()


# -- running it --------------------------------------------------------------------------------
class Demo:
    """One run. `children`, `validator_url` and `tmp` stay readable afterwards (tests check
    that nothing is left behind)."""

    def __init__(self, out_dir: Path, token_2022: bool = False, serve: bool = False) -> None:
        self.out_dir = out_dir
        self.token_2022 = token_2022  # the plans in a PYUSD-like Token-2022 mint
        self.serve = serve  # keep the services up for a browser until Ctrl-C (--serve)
        self.serving = False  # a Ctrl-C while serving is how a --serve run ends: exit 0
        self.children: list[Child] = []
        self.validator_url: str | None = None
        self.tmp: Path | None = None

    def run(self, stack: ExitStack) -> None:
        began = time.monotonic()
        stopping.check()  # a Ctrl-C during the imports
        print("svcpay demo: the product as separate processes, a paying client, the spec's flows")
        if self.token_2022:
            print("(--token-2022: the plans are priced in a PYUSD-like Token-2022 mint)")
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="svcpay-demo-")))
        self.tmp = tmp
        # $SVCPAY_VALIDATOR picks it (scripts/demo --validator); the drop-in by default.
        node = stack.enter_context(localnet(deploy=True))
        self.validator_url = node.url
        version = f", version {node.version}" if node.version else ""
        say(f"local validator ({node.kind}) at {node.url}{version}")
        chain = Chain(node.url, node.can_time_travel)
        wall_start = min(int(time.time()), chain.unix_timestamp())
        world = set_up_chain(chain, self.token_2022)
        services = start_services(stack, tmp, node.url, world, self.children)
        receiver = WebhookReceiver().start()
        stack.callback(receiver.close)
        walk = Walkthrough(chain, world, services, receiver, self.out_dir, wall_start)
        stopping.run(walk_through(walk))
        step(f"Done in {time.monotonic() - began:.1f} s")
        if self.serve:
            left = usdc(token_balance(chain, world.client.pubkey(), world.mint))
            self.serving = True
            serving.serve(tmp, services, world, node.url, left, self.children)
        say("stopping the resource server, the facilitator and the validator")

    def failed(self, message: str, child: Child | None) -> None:
        print(f"\ndemo failed: {message}", file=sys.stderr)
        exited = [c for c in self.children if c.proc.poll() is not None]
        for c in [child] if child else exited or self.children:
            tail = c.stderr_tail()
            if tail:
                print(f"--- the {c.name}'s stderr (last lines):", file=sys.stderr)
                print(tail, file=sys.stderr)


def _http_failure(e: httpx.HTTPError) -> str:
    """What a request that failed below HTTP (no connection, no answer in time) was, and why."""
    try:
        where = f"{e.request.method} {e.request.url}"
    except RuntimeError:  # an error raised before its request was built
        where = "a request"
    why = "no answer in time" if isinstance(e, httpx.TimeoutException) else str(e) or "no answer"
    return f"{where} failed: {type(e).__name__} ({why})"


def run(
    out_dir: Path = DEFAULT_OUT,
    demo: Demo | None = None,
    token_2022: bool = False,
    serve: bool = False,
) -> int:
    """Runs the walkthrough (`demo`, or a new one writing to `out_dir`, with the plans in a
    PYUSD-like Token-2022 mint if `token_2022`, the services kept up until Ctrl-C if
    `serve`): 0 when every step did what it should (and, serving, on Ctrl-C), 1 (the reason
    and the failing process's stderr on stderr) when one did not, 130 when interrupted."""
    demo = demo or Demo(out_dir, token_2022, serve)
    stack = ExitStack()
    code = 1
    with stopping.handling():
        try:
            demo.run(stack)
            stopping.check()  # a stop that came as the last step ended is still a stop
            code = 0
        except KeyboardInterrupt:  # stopping.Interrupted, raised at a checkpoint
            code = 0 if getattr(demo, "serving", False) else 130  # how --serve ends
        except BaseException as e:
            # Once a stop was asked, what it broke (a service's command killed by the
            # terminal's Ctrl-C, a cancelled read) is the stop, not a failure.
            if stopping.requested():
                code = 0 if getattr(demo, "serving", False) else 130
            elif isinstance(e, DemoFailed):
                demo.failed(str(e), e.child)
            elif isinstance(e, (ProgramBinaryMissing, LocalnetError)):
                demo.failed(str(e), None)
            elif isinstance(e, httpx.HTTPError):  # a service that did not answer: no traceback
                demo.failed(_http_failure(e), None)
            elif isinstance(e, Exception):
                demo.failed(f"{type(e).__name__}: {e}\n{traceback.format_exc()}", None)
            else:
                raise
        finally:
            stack.close()  # a signal meanwhile only sets the flag: the cleanup runs to the end
    if code == 130:
        print(f"\ndemo interrupted ({stopping.signal_name()})", file=sys.stderr)
    elif code == 0:
        say("all stopped; temporary files removed")
    return code

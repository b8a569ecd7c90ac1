"""svcpay: pay-per-request and subscription payments over HTTP 402 on Solana.

Its parts are in layers (docs/adr/0041, checked by tests/test_layers.py). A module imports
from its own part or from a lower layer, never from another part of its own layer nor from
above, and no chain of imports (inside functions and under `if TYPE_CHECKING:` included)
comes back to where it started.

    0  the root's small modules: _extras, amounts, keepalive, keys, rpc_errors, stopping,
       watchdog, webhooks (none imports the rest of svcpay)
    1  protocol (wire formats, pricing terms, settlement errors), rpc (the RPC transport)
    2  schemes (one package per way to pay), program (the svc_billing program's client)
    3  gate, facilitator, client (the payer), localnet (the drop-in validator)
    4  examples, mcp
    5  demo
    6  cli
    7  __main__ (the console script)

This module imports nothing of svcpay: any part may import it.
"""

__version__ = "0.1.0"

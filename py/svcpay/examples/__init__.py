"""Examples of providers built on svcpay: `resource_server`, a FastAPI app behind the gate
(FastAPI and uvicorn come with the 'gate' extra).

Layer 4 (docs/adr/0041): built on `svcpay.gate` and what lies below it (the schemes,
the program, the protocol, the RPC transport, the root modules); `svcpay.demo` and
`svcpay.cli` (`svcpay example serve`) import it, nothing lower.
"""

from svcpay._extras import require

require("svcpay.examples", ["gate"], ["fastapi", "uvicorn"])

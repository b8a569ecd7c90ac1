"""Examples of providers built on svcpay: `resource_server`, a FastAPI app behind the gate
(FastAPI and uvicorn come with the 'gate' extra)."""

from svcpay._extras import require

require("svcpay.examples", ["gate"], ["fastapi", "uvicorn"])

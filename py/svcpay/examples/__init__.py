"""Examples of providers built on svcpay: `resource_server`, a FastAPI app behind the gate."""

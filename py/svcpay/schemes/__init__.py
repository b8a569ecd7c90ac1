"""Payment schemes, each with its server, client and facilitator sides together (as the x402
SDK arranges its mechanisms). `x402_exact`: x402's `exact` scheme on Solana, versions 1 and 2.

Layer 2 (docs/adr/0041): a scheme imports `svcpay.protocol`, the root modules
(`_extras`, `keepalive`) and another scheme (`decision`, what every scheme answers, is at the
bottom of this package), never `svcpay.program` (its own layer) nor the gate, the
facilitator or the client above, which import it.
"""

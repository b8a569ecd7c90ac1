"""x402's `exact` scheme on Solana (x402-foundation/x402 `specs/schemes/exact/scheme_exact_svm.md`),
wire versions 1 and 2: `wire` (the models, headers and network ids), `svm` (the transaction
rules both sides apply), `server` (the gate's side), `client` (paying x402 servers) and
`facilitator` (`/supported`, `/verify`, `/settle`). docs/adr/0018.

Part of `svcpay.schemes` (layer 2, docs/adr/0041): it imports the protocol,
`schemes.decision` and the root modules (`_extras`, `keepalive`); the gate, the facilitator,
the paying client, `mpp_charge`, MCP, the examples, the demo and the CLI import it. Stores
and what they hold are separate modules (`idempotency_entry` below `idempotency` and
`idempotency_postgres`; `pending` below `settling` and `pending_postgres`), so no module
here imports one that imports it back.
"""

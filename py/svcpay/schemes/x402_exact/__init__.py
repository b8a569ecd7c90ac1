"""x402's `exact` scheme on Solana (x402-foundation/x402 `specs/schemes/exact/scheme_exact_svm.md`),
wire versions 1 and 2: `wire` (the models, headers and network ids), `svm` (the transaction
rules both sides apply), `server` (the gate's side), `client` (paying x402 servers) and
`facilitator` (`/supported`, `/verify`, `/settle`). docs/adr/0018.
"""

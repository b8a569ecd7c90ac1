"""MPP's `session` intent (docs/adr/0025): a deposit on chain, then signed vouchers per
request. `server`: the gate's side; `ledger` (and `ledger_postgres`): what the gate holds of
each session; `reporter`: what it tells the facilitator; `client`: the payer's side.

Part of `svcpay.schemes` (layer 2, docs/adr/0041): it imports the protocol,
`schemes.decision` and `svcpay._extras`; the gate, the paying client, MCP, the examples, the
demo and the CLI import it."""

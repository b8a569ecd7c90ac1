"""MPP's Solana `charge` intent: one price, one SPL transfer, pulled (the facilitator
co-signs as fee payer) or pushed (the payer sent it). `svm`: what the transaction must be;
`server`: the gate's side; `facilitator`: the facilitator's; `client`: the payer's.
docs/adr/0029.

Part of `svcpay.schemes` (layer 2, docs/adr/0041): it imports the protocol,
`schemes.decision` and `schemes.x402_exact` (the transaction rules it shares); the gate,
the facilitator, the paying client, `mpp_subscription`, MCP and the CLI import it.
"""

"""The svc_billing program: generated client, PDAs, errors and events.

Layer 2 (docs/adr/0041): it imports `svcpay.protocol` and `svcpay.rpc` only, never
`svcpay.schemes` (its own layer); the paying client, the gate, the facilitator, the drop-in
validator and everything above them import it.
"""

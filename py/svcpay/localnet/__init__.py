"""A local Solana runtime (LiteSVM through solders) with the svc_billing program loaded.

`svcpay.localnet.process` starts it (or solana-test-validator) for the tests, the demo and
`svcpay localnet`; `svcpay.localnet.chain` talks to it.

Layer 3 (docs/adr/0041): it imports `svcpay.program`, `svcpay.protocol` and the root modules,
never the gate, the facilitator or the paying client (its own layer); `svcpay.demo` and
`svcpay.cli` import it.
"""

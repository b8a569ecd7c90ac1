"""The HTTP 402 protocol, version 1: bodies, headers, memos and proofs. Pure data, no I/O
except the replay stores.

Layer 1 (docs/adr/0041), the bottom of svcpay's own layers: it imports only the
root's small modules (`_extras`, `rpc_errors`), never `svcpay.rpc` (its own layer) nor
anything above; every other part of svcpay may import it. `token2022` (a package) reads and
builds Token-2022 accounts, extensions and instructions.
"""

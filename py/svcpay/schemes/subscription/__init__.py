"""Subscriptions and metered use (`X-Svc-Sub`): an ACTIVE subscription to the route's plan
opens it; a metered route also draws on the subscription's allowance. `server`: the gate's
side (the program and the facilitator's crank keep the rest).

Part of `svcpay.schemes` (layer 2, docs/adr/0041): it imports the protocol and
`schemes.decision`; the gate, `mpp_subscription` and MCP import it.
"""

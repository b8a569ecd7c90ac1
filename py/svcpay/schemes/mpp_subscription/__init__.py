"""MPP's `subscription` intent (docs/adr/0029): a subscription to the route's plan,
opened through `Authorization: Payment` rather than `X-Svc-Sub`. `server`: the gate's side.

Part of `svcpay.schemes` (layer 2, docs/adr/0041): it imports the protocol,
`schemes.decision`, `schemes.mpp_charge` and `schemes.subscription`; only the gate's core
imports it."""

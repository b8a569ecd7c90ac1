"""svcpay's own one-time scheme: the client settles through the facilitator's `/authorize` and
sends the facilitator-signed proof in `X-PAYMENT`; the gate checks it offline
(docs/adr/0006). `server`: the gate's side.

Part of `svcpay.schemes` (layer 2, docs/adr/0041): it imports the protocol and
`schemes.decision`; the gate, the facilitator and the paying client import it.
"""

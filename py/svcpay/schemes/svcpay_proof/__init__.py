"""svcpay's own one-time scheme: the client settles through the facilitator's `/authorize` and
sends the facilitator-signed proof in `X-PAYMENT`; the gate checks it offline
(docs/adr/0006). `server`: the gate's side."""

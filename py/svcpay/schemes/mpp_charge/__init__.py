"""MPP's Solana `charge` intent: one price, one SPL transfer, pulled (the facilitator
co-signs as fee payer) or pushed (the payer sent it). `svm`: what the transaction must be;
`server`: the gate's side; `facilitator`: the facilitator's; `client`: the payer's.
docs/adr/0029."""

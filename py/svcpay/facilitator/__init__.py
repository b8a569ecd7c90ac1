"""The facilitator: settles one-time payments on chain and signs proofs (spec 4.2)."""

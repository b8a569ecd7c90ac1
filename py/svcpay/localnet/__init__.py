"""A local Solana runtime (LiteSVM through solders) with the svc_billing program loaded."""

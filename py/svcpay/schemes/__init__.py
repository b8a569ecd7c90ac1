"""Payment schemes, each with its server, client and facilitator sides together (as the x402
SDK arranges its mechanisms). `x402_exact`: x402's `exact` scheme on Solana, versions 1 and 2.
"""

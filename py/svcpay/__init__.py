"""svcpay: pay-per-request and subscription payments over HTTP 402 on Solana."""

__version__ = "0.1.0"

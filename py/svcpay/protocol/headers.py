"""Header names and protocol constants, defined once."""

X_PAYMENT = "X-PAYMENT"  # base64 of the facilitator-signed proof
X_SVC_SUB = "X-Svc-Sub"  # a subscription id
PROTOCOL_VERSION = "1"
SUPPORTED_VERSIONS = ("1",)
SCHEME_EXACT = "exact"
NETWORK_MAINNET = "solana-mainnet"
MAX_HEADER_BYTES = 4096  # larger X-PAYMENT / X-Svc-Sub values are refused unread

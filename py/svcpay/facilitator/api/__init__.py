"""The facilitator's HTTP API, by concern: `payments` (the public payment routes),
`provider` (the provider API, by API key), `operations` (health and the OpenAPI schema), and
`http` (the error shape, parsers and guards every route shares). `svcpay.facilitator.app`
composes them with the dashboard.

Part of `svcpay.facilitator` (layer 3, docs/adr/0041): it imports the facilitator's
service, models, answers and analytics, the schemes' facilitator sides and the protocol;
only `svcpay.facilitator.app` imports it.
"""

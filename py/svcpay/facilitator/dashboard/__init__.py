"""The provider dashboard: server-rendered pages (Jinja2, no JavaScript) at /dashboard,
logged into with a provider's API key (`routes.dashboard_app`).

Part of `svcpay.facilitator` (layer 3, docs/adr/0041): it imports the facilitator's
service, store, analytics and outage; only `svcpay.facilitator.app` imports it.
"""

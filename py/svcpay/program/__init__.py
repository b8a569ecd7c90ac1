"""The svc_billing program: generated client, PDAs, errors and events."""

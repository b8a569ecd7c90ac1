"""The provider dashboard: server-rendered pages (Jinja2, no JavaScript) at /dashboard,
logged into with a provider's API key (`routes.dashboard_app`)."""

"""API: the FastAPI service (risk lookups, decisions, failure records, Alertmanager webhook)."""

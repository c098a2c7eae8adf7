"""Per-node collector: backends, sampling loop, XID watcher, Prometheus exporter."""

"""Grafana dashboards generated from the catalogue with grafanalib."""

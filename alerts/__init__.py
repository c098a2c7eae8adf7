"""Prometheus alert rules generated from the catalogue, with promtool unit tests."""

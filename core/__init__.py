"""The ground floor: what every component shares (the catalogue, the history frame, units,
settings, the worker base, the Prometheus query client and OpenMetrics export). It imports
no other package of gpuhealth."""

__version__ = "0.1.0"

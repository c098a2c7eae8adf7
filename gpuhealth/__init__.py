"""gpuhealth: GPU fleet telemetry, failure prediction and decisions. This package is the
command line (`gpuhealth …`), the top layer: it assembles the service from settings."""

from core import __version__

__all__ = ["__version__"]

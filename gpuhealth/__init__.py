"""gpuhealth: GPU fleet telemetry, failure prediction and decisions."""

__version__ = "0.1.0"

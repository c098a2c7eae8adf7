"""Settings from flags, environment variables (GPUHEALTH_*) or a .env file."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Everything an operator can configure; a CLI flag wins over the environment."""

    model_config = SettingsConfigDict(env_prefix="GPUHEALTH_", env_file=".env", extra="ignore")

    backend: Literal["auto", "nvml", "dcgm", "sim", "replay"] = "auto"
    listen: str = "0.0.0.0:9400"  # dcgm-exporter's default port, so scrape configs carry over
    interval: str = "10s"  # sampling interval
    hostname: str | None = None  # host label value; default: this machine's hostname
    hostname_label: Literal["Hostname", "hostname"] = "Hostname"  # dcgm-exporter <2026 / newer
    fields: str = "default"  # "default", "all" or a comma list of catalogue short names
    log_level: str = "INFO"
    watch_threshold: float = 0.3  # risk >= this: watch (policy choice)
    demote_threshold: float = 0.7  # risk >= this: demote (product brief: "warning", interruptible only)


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (tests override by clearing the cache)."""
    return Settings()

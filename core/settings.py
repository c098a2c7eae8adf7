"""Settings from flags, environment variables (GPUHEALTH_*) or a .env file."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Everything an operator can configure; a CLI flag wins over the environment."""

    model_config = SettingsConfigDict(env_prefix="GPUHEALTH_", env_file=".env", extra="ignore")

    backend: Literal["auto", "nvml", "dcgm", "sim", "replay"] = "auto"
    listen: str = "0.0.0.0:9400"  # dcgm-exporter's default port, so scrape configs carry over
    web_config_file: str | None = None  # exporter-toolkit web config for the collector: TLS, basic auth
    interval: str = "10s"  # sampling interval
    hostname: str | None = None  # host label value; default: this machine's hostname
    hostname_label: Literal["Hostname", "hostname"] = "Hostname"  # dcgm-exporter <2026 / newer
    fields: str = "default"  # "default", "all" or a comma list of catalogue short names
    collectors: str | None = None  # a dcgm-exporter counters CSV choosing the fields (its DCGM_EXPORTER_COLLECTORS)
    log_level: str = "INFO"
    watch_threshold: float = 0.3  # risk >= this: watch (policy choice)
    demote_threshold: float = 0.7  # risk >= this: demote (product brief: "warning", interruptible only)
    demote_for: str = "3h"  # ... once the risk has held that long (an alert rule's `for:`); 0 = at once
    demote_for_ecc: str = "12h"  # ... the same, where the riskiest head is ECC (memory wears out over days)
    demote_for_pcie: str = "3h"  # ... and where it is PCIe (longer: fewer alarms on bursty links, less lead)
    demote_for_pcie_habit: str = "6h"  # ... where it is PCIe on a link replaying out of habit (under pcie_surprise_z)
    pcie_surprise_z: float = 3.0  # a link's replaying hours over 6 h under this σ of its own month: habit; 0 = never
    demote_for_light_load: str = "12h"  # ... where it is thermal on a GPU at light load (heat judged by extrapolation)
    light_load_share: float = 0.5  # light load: 6 h power under this share of the heat baseline's; 0 = never
    light_load_spread_z: float = 2.0  # ... only the thermal wait where the memory spread is this many σ; 0 = never
    thermal_corroborate_z: float = 1.0  # thermal demote waits longer where its node and spread z are both under this
    demote_for_uncorroborated: str = "6h"  # ... that long; 0 = never
    thermal_agree_z: float = 2.0  # thermal demote at once where the memory spread is this many σ wide; 0 = never
    thermal_agree_heat_z: float = 1.0  # ... and the core's heat this many σ against its own past and its node
    thermal_spread_z: float = 4.0  # ... or where the memory-core spread alone is this many σ wide; 0 = never
    thermal_agree_vs_node_z: float = 3.0  # ... or its heat over its node's this many σ of its own spread; 0 = never
    thermal_heat_z: float = 4.0  # thermal demote on heat alone: core heat this many σ over its past and node (0: never)
    thermal_heat_vs_node_z: float = 5.0  # ... or its heat over its node's this many σ of its own spread (0: never)
    thermal_heat_vs_node_excess_z: float = 2.0  # ... with its heat over its past and node at this many σ
    demote_for_heat: str = "6h"  # ... counted in every round this long (not at light load), whatever the risk
    probation_risk: float = 0.1  # after a drain/RMA lets a GPU go: demoted while its risk is at or above this ...
    probation_for: str = "30d"  # ... for at most this long after it (0 = no probation)
    remap_hold_risk: float = 0.0  # a pending remap's drain waits at watch while ECC risk is under this (0 = never)
    remap_hold_for: str = "0"  # ... until ECC risk has held it this long; once drained, the drain stands
    remap_hold_clear: str = "24h"  # ... and only if ECC risk has not held it within this long before
    release_threshold: float | None = None  # a standing demote holds while risk >= this (unset: watch; demote: no hold)

    # The service (`gpuhealth serve`): store, scoring loop and API.
    db: str = "sqlite:///gpuhealth.db"  # SQLAlchemy URL; PostgreSQL: postgresql+psycopg://user:pw@host/db
    api_listen: str = "0.0.0.0:8080"
    token: str | None = None  # bearer token for write endpoints; without one (or empty), writes are refused (403)
    read_open: bool = True  # reads without a token; False: reads, /docs and /openapi.json need the token too
    metrics_open: bool | None = None  # /metrics without a token; unset: as read_open (Prometheus can send it)
    score_interval: str = "5m"
    # Retention (store.retention.Retention says why each default): raw samples, then hourly roll-ups;
    # raw risk scores, then hourly; hourly roll-ups of both; closed decisions; alerts; probe results.
    # Failure and RMA records are kept for good (they are training labels).
    retention: str = "35d"
    score_retention: str = "7d"
    hourly_retention: str = "400d"
    decision_retention: str = "365d"
    alert_retention: str = "90d"
    probe_retention: str = "90d"
    action_retention: str = "365d"  # the actuator's audit
    model: str | None = None  # risk model file (.skops); default: the shipped model
    max_request_bytes: int = 1_048_576
    # Slow or many clients (uvicorn): a body must arrive within body_timeout; an idle keep-alive
    # connection closes after keep_alive_timeout; past max_connections, new requests get 503.
    body_timeout: str = "10s"
    keep_alive_timeout: str = "5s"  # uvicorn's default
    max_connections: int = 1000  # uvicorn's limit_concurrency: connections and tasks at once
    buffer_samples: int = 200_000  # samples held in memory while the database is down
    # Fleet mode (`serve --source prometheus`): samples pulled from Prometheus, not collected here.
    source: Literal["local", "prometheus"] = "local"
    prometheus_url: str | None = None  # e.g. http://prometheus:9090
    pull_every: str = "1m"
    pull_step: str = "5m"  # the resolution stored and scored (the shipped model learned from hourly data)
    backfill: str = "2d"  # how far the first pull, and a catch-up after an outage, reaches back
    # Several replicas of fleet mode on one PostgreSQL split the fleet by hostname (service/replicas.py).
    # On PostgreSQL they are on by default; on SQLite only when one of these is set.
    replica_id: str | None = None  # unique per replica; default: hostname-pid
    lease_seconds: float | None = None  # unset: 60 s; a dead replica's hosts move to the others within it

    # The actuator (`serve --actuate`, `gpuhealth actuate --once`): decisions acted on by the scheduler.
    actuate: Literal["off", "dry-run", "on"] = "off"  # dry-run records what it would do and touches nothing
    actuate_target: Literal["slurm", "kubernetes", "sim"] | None = None  # sim: the simulated fleet, in memory
    actuate_interval: str = "1m"  # one reconciliation pass per interval (backing off while the scheduler is down)
    actuate_settle: str = "1h"  # a node is lowered (ours undone) once its lower state held this long
    breaker_max_fraction: float = 0.10  # at most this share of the nodes newly demoted or drained per window …
    breaker_max_nodes: int = 5  # … and at most this many (the 400-server trace: 3 per hour at most)
    breaker_window: str = "1h"
    unmanaged_nodes: str = (
        ""  # nodes never touched: "gpu[001-004],login1" (Kubernetes also: gpuhealth.io/managed=false)
    )
    slurm_reliable_feature: str = "reliable"  # the feature non-interruptible jobs ask for (--constraint)
    slurm_demoted_weight: int = 1000  # Slurm uses low weights first: a demoted node is used last
    slurm_bin_dir: str | None = None  # where scontrol and squeue are; default: PATH
    kube_server: str | None = None  # API server URL without credentials (tests); default: in-cluster or kubeconfig
    kubeconfig: str | None = None
    kube_event_namespace: str = "default"  # where the actuator's Events about nodes go

    # Probes (CUDA stress kernels) run by the collector on idle GPUs.
    probe_every: str = "6h"  # "0" turns the scheduler off
    probe_budget: str = "60s"  # per GPU per run
    probe_tests: str = "gemm,memtest,bandwidth,pcie"
    probe_idle_util_pct: float = 5.0  # a GPU busier than this is never probed

    # Kubernetes labels through Node Feature Discovery (`collect --nfd-features-dir`, collector/nfd.py):
    # the collector asks the central service for this node's decisions and writes NFD's local feature file.
    nfd_features_dir: str | None = None  # e.g. /etc/kubernetes/node-feature-discovery/features.d; unset: off
    nfd_interval: str = "60s"  # how often to ask; labels expire after 3 intervals
    service_url: str | None = None  # the central `gpuhealth serve` as a node reaches it, e.g. http://gpuhealth:8080
    service_token: str | None = None  # bearer token for the service's reads, when it closes them (read_open=False)

    # Workload labels on the collector's series (collector/attribution.py), as dcgm-exporter's.
    pod_resources_socket: str | None = None  # the kubelet's; unset: its default path when it exists; "": off
    hpc_job_mapping_dir: str | None = None  # Slurm jobs per GPU, written by deploy/slurm's prolog; unset: off

    @field_validator("token", "service_token")
    @classmethod
    def _empty_token_is_none(cls, v: str | None) -> str | None:
        """GPUHEALTH_TOKEN= (empty) means no token: writes disabled, said at start-up, not 403 on every write."""
        return v.strip() or None if v is not None else None


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (tests override by clearing the cache)."""
    return Settings()

"""Settings from flags, environment variables (GPUHEALTH_*) or a .env file.

Each setting's description is its line in docs/configuration.md (`gpuhealth docs settings`): one line,
with its source where it has one; the why of a default goes in the docs the description names."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.labels import HOSTNAME, HostLabel


class Settings(BaseSettings):
    """Everything an operator can configure; a CLI flag wins over the environment."""

    model_config = SettingsConfigDict(env_prefix="GPUHEALTH_", env_file=".env", extra="ignore")

    backend: Literal["auto", "nvml", "dcgm", "sim", "replay"] = Field(
        default="auto", description="Where samples come from; auto: DCGM if installed, else NVML."
    )
    dcgm_address: str | None = Field(
        default=None,
        description=(
            "nv-hostengine's HOST:PORT for the dcgm backend, e.g. the GPU Operator's nvidia-dcgm.gpu-operator:5555;"
            " unset: localhost (or DCGM's embedded engine)."
        ),
    )
    listen: str = Field(
        default="0.0.0.0:9400",
        description=(
            "HOST:PORT of the collector's /metrics and /healthz (dcgm-exporter's port: scrape configs carry over)."
        ),
    )
    web_config_file: str | None = Field(
        default=None,
        description="exporter-toolkit web config for the collector's port: TLS, client certificates, basic auth.",
    )
    interval: str = Field(default="10s", description="Sampling interval; a scrape always gets the latest snapshot.")
    hostname: str | None = Field(default=None, description="Value of the host label; unset: this machine's hostname.")
    hostname_label: HostLabel = Field(
        default=HOSTNAME,
        description="Name of the host label: Hostname (dcgm-exporter before 2026) or hostname (newer).",
    )
    fields: str = Field(
        default="default", description='Fields exported: "default", "all" or a comma list of catalogue short names.'
    )
    collectors: str | None = Field(
        default=None,
        description=(
            "A dcgm-exporter counters CSV choosing the fields (its DCGM_EXPORTER_COLLECTORS); fields add to it."
        ),
    )
    log_level: str = Field(default="INFO", description="Log level: DEBUG, INFO, WARNING or ERROR.")
    watch_threshold: float = Field(default=0.3, description="Risk at or above this: watch (policy choice).")
    demote_threshold: float = Field(
        default=0.7, description='Risk at or above this: demote, interruptible work only (product brief: "warning").'
    )
    demote_for: str = Field(
        default="3h",
        description="A model demote stands once its risk has held this long (an alert rule's `for:`); 0: at once.",
    )
    demote_for_ecc: str = Field(
        default="12h", description="The demote's wait where the riskiest head is ECC (memory wears out over days)."
    )
    demote_for_pcie: str = Field(
        default="3h",
        description=(
            "The demote's wait where the riskiest head is PCIe (longer: fewer alarms on bursty links, less lead)."
        ),
    )
    demote_for_pcie_habit: str = Field(
        default="6h", description="The PCIe wait on a link that replays out of habit (see pcie_surprise_z)."
    )
    pcie_surprise_z: float = Field(
        default=3.0,
        description=(
            "A link whose replaying hours over 6 h stand under this many σ of "
            "its own month replays out of habit; 0: never."
        ),
    )
    demote_for_light_load: str = Field(
        default="12h",
        description=(
            "The wait of a thermal demote of a GPU at light load (heat judged "
            "by extrapolation), or until its load returns."
        ),
    )
    light_load_share: float = Field(
        default=0.5, description="Light load: 6 h power under this share of the heat baseline's; 0: never."
    )
    light_load_spread_z: float = Field(
        default=2.0,
        description=(
            "At light load, only the thermal wait (demote_for) where the "
            "memory-core spread is this many σ out; 0: never."
        ),
    )
    thermal_corroborate_z: float = Field(
        default=1.0,
        description=(
            "A thermal demote waits demote_for_uncorroborated where its "
            "node and spread z are both under this; 0: never."
        ),
    )
    demote_for_uncorroborated: str = Field(
        default="6h", description="The wait of a thermal demote that no reading of the GPU's own cooling corroborates."
    )
    thermal_agree_z: float = Field(
        default=2.0,
        description="A thermal demote stands at once where the memory-core spread is this many σ wide; 0: never.",
    )
    thermal_agree_heat_z: float = Field(
        default=1.0,
        description="With thermal_agree_z: the core's heat must also stand this many σ over its own past and its node.",
    )
    thermal_spread_z: float = Field(
        default=4.0,
        description="A thermal demote stands at once where the memory-core spread alone is this many σ wide; 0: never.",
    )
    thermal_agree_vs_node_z: float = Field(
        default=3.0,
        description=(
            "A thermal demote stands at once where its heat over its node's is this many σ of its own spread; 0: never."
        ),
    )
    thermal_heat_z: float = Field(
        default=4.0,
        description=(
            "Demote on heat alone: core heat this many σ over its own past and its node for demote_for_heat; 0: never."
        ),
    )
    thermal_heat_vs_node_z: float = Field(
        default=5.0,
        description=(
            "A round also counts toward heat alone where its heat over its "
            "node's is this many σ of its own spread; 0: never."
        ),
    )
    thermal_heat_vs_node_excess_z: float = Field(
        default=2.0,
        description="With thermal_heat_vs_node_z: its heat must also stand this many σ over its own past and its node.",
    )
    demote_for_heat: str = Field(
        default="6h",
        description=(
            "Heat alone demotes, whatever the risk, once it has stood in every round this long (not at light load)."
        ),
    )
    probation_risk: float = Field(
        default=0.1,
        description="After a drain or RMA lets a GPU go, it stays demoted while its risk is at or above this.",
    )
    probation_for: str = Field(
        default="30d", description="The probation lasts at most this long after the drain or RMA; 0: no probation."
    )
    remap_hold_risk: float = Field(
        default=0.3,
        description=(
            "A pending remap is watch + reset at idle; it drains once ECC risk "
            "reaches this (worn memory); 0: drains at once."
        ),
    )
    remap_hold_for: str = Field(
        default="0",
        description=(
            "A pending remap drains once ECC risk has held remap_hold_risk this long; once drained, the drain stands."
        ),
    )
    remap_hold_clear: str = Field(
        default="24h",
        description="A pending remap also drains if ECC risk held remap_hold_risk within this long before.",
    )
    release_threshold: float | None = Field(
        default=None,
        description=(
            "A standing demote is held while risk stays at or above this; "
            "unset: watch_threshold; demote_threshold: no hold."
        ),
    )

    # The service (`gpuhealth serve`): store, scoring loop and API.
    db: str = Field(
        default="sqlite:///gpuhealth.db",
        description="SQLAlchemy URL of the store: sqlite:///FILE or postgresql+psycopg://user:pw@host/db.",
    )
    api_listen: str = Field(
        default="0.0.0.0:8080", description="HOST:PORT of the service's API, /metrics, /healthz, /readyz and /docs."
    )
    token: str | None = Field(
        default=None, description="Bearer token for write endpoints; without one (or empty), writes are refused (403)."
    )
    read_open: bool = Field(
        default=True, description="Reads without a token; false: reads, /docs and /openapi.json need the token too."
    )
    metrics_open: bool | None = Field(
        default=None, description="/metrics without a token; unset: as read_open (Prometheus can send the token)."
    )
    score_interval: str = Field(default="5m", description="How often every GPU is scored.")
    # The scorer keeps its 31 days of hour rows between rounds (store.window, decision 0090), the 29 values
    # a round reads: 1.3 GB per 10,000 GPUs. 8192 MB holds about 60,000; past it the rest are read every round.
    score_window_mb: int = Field(
        default=8192,
        ge=0,
        description=(
            "Memory for the hour rows the scorer keeps between rounds (about 1.3 GB per 10,000 GPUs); "
            "the GPUs past it are read every round."
        ),
    )
    # A round's feature families in two threads: 0.86x the steady round at 10,000 GPUs, for 0.2 GB more in
    # use and 0.5 GB more resident per 10,000 GPUs (decision 0091). One replica of 100,000 GPUs on 32 GB
    # needs 1, so that is the default; `gpuhealth score` uses both cores for a big history.
    score_lanes: int = Field(
        default=1,
        ge=1,
        le=16,
        description=(
            "Threads a scoring round computes its feature families in; 2 is about 15 % faster and needs "
            "about 0.5 GB more per 10,000 GPUs."
        ),
    )
    model: str | None = Field(default=None, description="Risk model file (.skops); unset: the shipped model.")
    max_request_bytes: int = Field(default=1_048_576, description="Larger request bodies get 413.")
    # Slow or many clients (api/server.py): a request head must arrive within header_timeout and a
    # body within body_timeout; an idle keep-alive connection closes after keep_alive_timeout; past
    # max_connections, connections waiting for a request make room, and then new requests get 503.
    body_timeout: str = Field(default="10s", description="A request body must arrive within this, else 408.")
    keep_alive_timeout: str = Field(
        default="5s", description="An idle keep-alive connection closes after this (uvicorn's default)."
    )
    header_timeout: str = Field(
        default="5s", description="A request's line and headers must arrive within this, else the connection closes."
    )
    max_connections: int = Field(
        default=1000,
        description=(
            "Connections at once: past it, those waiting for a request close, oldest first; "
            "past this many requests in flight, 503."
        ),
    )
    buffer_samples: int = Field(default=200_000, description="Samples held in memory while the database is down.")
    # Retention (store.retention.Retention says why each default): raw samples, then hourly roll-ups;
    # raw risk scores, then hourly; hourly roll-ups of both; closed decisions; alerts; probe results.
    # Failure and RMA records are kept for good (they are training labels).
    retention: str = Field(default="35d", description="Raw samples are kept this long; their hourly roll-ups stay.")
    score_retention: str = Field(
        default="7d", description="Raw risk scores are kept this long; their hourly roll-ups stay."
    )
    hourly_retention: str = Field(
        default="400d", description="Hourly roll-ups of samples and scores are kept this long."
    )
    decision_retention: str = Field(
        default="365d", description="Closed decisions are kept this long after they closed."
    )
    alert_retention: str = Field(
        default="90d", description="Alerts from Alertmanager are kept this long after last received."
    )
    probe_retention: str = Field(default="90d", description="Probe results are kept this long.")
    action_retention: str = Field(default="365d", description="The actuator's audit is kept this long.")

    # Fleet mode (`serve --source prometheus`): samples pulled from Prometheus, not collected here.
    source: Literal["local", "prometheus"] = Field(
        default="local", description="local: collect on this box; prometheus: pull the fleet from prometheus_url."
    )
    prometheus_url: str | None = Field(default=None, description="Prometheus base URL, e.g. http://prometheus:9090.")
    pull_every: str = Field(default="1m", description="How often to pull from Prometheus.")
    pull_step: str = Field(
        default="5m", description="The resolution stored and scored (the shipped model learned from hourly data)."
    )
    backfill: str = Field(
        default="2d", description="How far the first pull, and a catch-up after an outage, reaches back."
    )
    # Several replicas of fleet mode on one PostgreSQL split the fleet by hostname (service/replicas.py).
    # On PostgreSQL they are on by default; on SQLite only when one of these is set.
    replica_id: str | None = Field(
        default=None, description="This replica's unique name among those sharing the database; unset: hostname-pid."
    )
    lease_seconds: float | None = Field(
        default=None,
        description=(
            "How long a dead replica's hosts stay its own (unset: 60 s); on SQLite, setting it turns replicas on."
        ),
    )

    # The actuator (`serve --actuate`, `gpuhealth actuate --once`): decisions acted on by the scheduler.
    actuate: Literal["off", "dry-run", "on"] = Field(
        default="off",
        description="Whether to act on the scheduler; dry-run records what it would do and touches nothing.",
    )
    actuate_target: Literal["slurm", "kubernetes", "sim"] | None = Field(
        default=None, description="The scheduler acted on; sim: the simulated fleet, in memory."
    )
    actuate_interval: str = Field(
        default="1m", description="One reconciliation pass per interval (backing off while the scheduler is down)."
    )
    actuate_settle: str = Field(
        default="1h", description="A node is lowered (ours undone) once its lower state has held this long."
    )
    breaker_max_fraction: float = Field(
        default=0.10,
        description="The breaker: at most this share of the nodes newly demoted or drained per breaker_window.",
    )
    breaker_max_nodes: int = Field(
        default=5,
        description="The breaker: also at most this many nodes (at least 1; the 400-server trace: 3 an hour at most).",
    )
    breaker_window: str = Field(default="1h", description="The breaker's window.")
    remediate: bool = Field(
        default=False,
        description="Carry out the remedies decisions name (reset, reboot, verify, return or RMA); with --actuate.",
    )
    remediate_max_concurrent: int = Field(
        default=4, ge=0, description="Remediations in their remedy or verify stage at once, per scheduler."
    )
    remediate_deadline: str = Field(
        default="24h", description="A remedy due now (its node drained) is stuck past this: an alert fires."
    )
    remediate_idle_deadline: str = Field(
        default="7d", description="A remedy due at idle (the GPU's next moment without work) is stuck past this."
    )
    unmanaged_nodes: str = Field(
        default="",
        description='Nodes never touched: "gpu[001-004],login1" (Kubernetes also: gpuhealth.io/managed=false).',
    )
    slurm_reliable_feature: str = Field(
        default="reliable",
        description="The feature non-interruptible jobs ask for (--constraint); a demoted node loses it.",
    )
    slurm_demoted_weight: int = Field(
        default=1000, description="A demoted node's weight (Slurm uses low weights first: it is used last)."
    )
    slurm_bin_dir: str | None = Field(default=None, description="Where scontrol and squeue are; unset: PATH.")
    kube_server: str | None = Field(
        default=None,
        description="API server URL without credentials (tests); unset: kubeconfig, else in-cluster or ~/.kube/config.",
    )
    kubeconfig: str | None = Field(
        default=None, description="The actuator's kubeconfig file; unset: in-cluster, else ~/.kube/config."
    )
    kube_event_namespace: str = Field(default="default", description="Where the actuator's Events about nodes go.")

    # Probes (CUDA stress kernels) run by the collector on idle GPUs.
    probe_every: str = Field(
        default="6h", description='How often each idle GPU is probed; "0" turns the scheduler off.'
    )
    probe_budget: str = Field(default="60s", description="Time budget per GPU per run.")
    probe_tests: str = Field(
        default="gemm,memtest,bandwidth,pcie",
        description="The probes run: a comma list of gemm, gemm_fp32, memtest, bandwidth, pcie.",
    )
    probe_idle_util_pct: float = Field(
        default=5.0, description="A GPU busier than this (utilisation, %) is never probed."
    )
    probe_dcgm_diag: int = Field(
        default=0,
        ge=0,
        le=2,
        description="With the dcgm backend, `dcgmi diag -r` at this level after the probes: 1 quick, 2 medium; 0: off.",
    )

    # Kubernetes labels through Node Feature Discovery (`collect --nfd-features-dir`, collector/nfd.py):
    # the collector asks the central service for this node's decisions and writes NFD's local feature file.
    nfd_features_dir: str | None = Field(
        default=None,
        description=(
            "NFD's features.d to write the node's labels in, e.g. /etc/kubernetes/node-feature-discovery/features.d."
        ),
    )
    nfd_interval: str = Field(
        default="60s", description="How often to ask the service; labels expire after 3 intervals."
    )
    service_url: str | None = Field(
        default=None, description="The central `gpuhealth serve` as a node reaches it, e.g. http://gpuhealth:8080."
    )
    service_token: str | None = Field(
        default=None,
        description=(
            "Bearer token for the service: its reads when it closes them; remedy reports are writes and need its"
            " own token (GPUHEALTH_TOKEN)."
        ),
    )
    # Remedies from the service, carried out by the node agent (collector/remediate.py, docs/collector.md).
    remedies: bool = Field(
        default=True,
        description=(
            "With service_url and service_token, carry out the service's remedies for this node's GPUs"
            " (reset: allow_reset; reboot: reboot_sentinel)."
        ),
    )
    remedies_interval: str = Field(default="30s", description="How often the collector asks the service for remedies.")

    # Workload labels on the collector's series (collector/attribution.py), as dcgm-exporter's.
    pod_resources_socket: str | None = Field(
        default=None,
        description='The kubelet\'s pod-resources socket; unset: its default path when it exists; "": off.',
    )
    pod_resources_resource_names: str = Field(
        default="nvidia.com/gpu,nvidia.com/gpu.shared,nvidia.com/mig-*",
        description=(
            "Comma-separated patterns (*, ?) of the kubelet resource names whose devices are GPUs: add a name"
            " the device plugin's config renames a shared GPU to."
        ),
    )
    hpc_job_mapping_dir: str | None = Field(
        default=None, description="Slurm jobs per GPU, written by deploy/slurm's prolog; unset: off."
    )

    # Node reboots on Kubernetes through kured (collector/reboot.py, docs/actuation.md).
    reboot_sentinel: str = Field(
        default="",
        description=(
            "kured's sentinel file the node agent writes to ask for a node reboot, e.g. /var/run/reboot-required"
            " (kured's --reboot-sentinel); empty: off."
        ),
    )

    # GPU reset by the node agent (`collect --allow-reset`, collector/remedy.py): off unless asked for.
    allow_reset: bool = Field(
        default=False,
        description="The collector may reset an idle GPU of its node (needs root or CAP_SYS_ADMIN); off: refuses all.",
    )
    nvidia_smi: str = Field(default="nvidia-smi", description="The nvidia-smi a GPU reset runs; a bare name: PATH.")
    reset_timeout: str = Field(
        default="120s", description="A GPU reset (nvidia-smi --gpu-reset) not done within this has failed."
    )

    # XIDs and NVSwitch SXIDs from the kernel log (collector/kernel_log.py, docs/decisions/0073).
    kernel_log: str = Field(
        default="/dev/kmsg",
        description="Kernel log read for XIDs and SXIDs (nvml, dcgm); unreadable: said once, NVML counts; empty: off.",
    )
    kernel_log_cursor: str = Field(
        default="/var/lib/gpuhealth/kmsg-cursor.json",
        description="Where the last kernel log record counted is kept, so a restart neither loses nor doubles one.",
    )
    # The same through the systemd journal, where /dev/kmsg cannot be read (docs/decisions/0081).
    kernel_log_source: Literal["kmsg", "journal", "auto"] = Field(
        default="auto",
        description="Kernel log read: kmsg (kernel_log), journal (journalctl); auto: kmsg if it opens, else journal.",
    )
    journalctl: str = Field(
        default="journalctl", description="The journalctl that reads the journal; a bare name: PATH."
    )
    journal_directory: str = Field(
        default="", description="journalctl -D: the host's journal mounted in a container; empty: the system journal."
    )
    kernel_log_journal_cursor: str = Field(
        default="/var/lib/gpuhealth/journal-cursor.json",
        description="Where the last journal entry counted is kept (__CURSOR): a restart neither loses nor doubles one.",
    )

    @field_validator("token", "service_token")
    @classmethod
    def _empty_token_is_none(cls, v: str | None) -> str | None:
        """GPUHEALTH_TOKEN= (empty) means no token: writes disabled, said at start-up, not 403 on every write."""
        return v.strip() or None if v is not None else None


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (tests override by clearing the cache)."""
    return Settings()

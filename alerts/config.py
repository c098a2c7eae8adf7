"""Thresholds and selectors of the alert rules, in one commented place (the kubernetes-mixin `_config`).

Every number names its source: ../shared/REFERENCE.md (NVIDIA/DCGM documentation), the product
brief, or "policy" where it is our choice. Change a value here and run `gpuhealth alerts build`.
"""

from __future__ import annotations

from core.labels import HOSTNAME
from core.settings import Settings

GPU_KEY = (HOSTNAME, "UUID")
"""Labels that identify one GPU across metrics of different exporters (`on (...)` joins)."""

COLLECTOR_SELECTOR = 'job="gpuhealth"'
"""Scrape job of the per-node `gpuhealth collect` exporters (name your scrape job so)."""
SERVICE_SELECTOR = 'job="gpuhealth-service"'
"""Scrape job of the central `gpuhealth serve` (risk, decisions, store health)."""
SAMPLER_SELECTOR = 'job=~"gpuhealth|gpuhealth-service"'
"""Jobs whose targets sample GPUs: the collectors, and `gpuhealth serve` with its in-process collector
(the small install), whose stalled or failing sampler must alert too (GpuCollectorFailing/Stale), as must
what only a sampler exports: the NVLink fabric and links, NVSwitches, InfiniBand ports, the kernel log."""

RUNBOOK_BASE_URL = "https://github.com/gpuhealth/gpuhealth/blob/main/docs/runbooks"
"""Where docs/runbooks/ is published; each alert's runbook_url is <base>/<AlertName>.md."""

# --- the product brief's standard alerts ---
MEMORY_FULL_RATIO = 0.95  # product brief: used/(used+free) > 0.95 for 5m, warning
MEMORY_FULL_FOR = "5m"
TEMP_DEFAULT_MAX_C = 85.0  # product brief: GPU temp > 85 C for 2m, critical (also A100 SXM max operating)
TEMP_FOR = "2m"
TEMP_MAX_OPERATING_C: dict[str, float] = {
    # REFERENCE.md "Thermal (SXM)": maximum operating temperature per model (modelName regex).
    "NVIDIA A100.*": 85.0,
    "NVIDIA H100.*": 87.0,
    "NVIDIA H200.*": 87.0,  # H200 shares the H100's board limits (simulator/models.py assumption)
}
MEMORY_TEMP_MAX_C = 95.0  # REFERENCE.md: HBM max 95 C on A100 and H100

# --- memory reliability ---
RETIRED_PAGES_LIMIT = 63  # DCGM health: SBE + DBE retired pages >= 63 -> fail (REFERENCE.md)
RETIRED_DBE_PAGES_LIMIT = 15  # DCGM health: DBE retired pages > 15 ...
RETIRED_DBE_PAGES_PER_WEEK = 1  # ... with more than 1 new per week -> fail
SBE_PER_DAY_HIGH = 10.0  # product brief: SBE rate 0 -> 10+/day is a strong sign a DBE is near
SBE_RISING_FACTOR = 2.0  # policy: the last hour's rate at least twice the last day's average = rising
SBE_FOR = "30m"

# --- PCIe and NVLink ---
PCIE_REPLAYS_PER_MIN_GEN4 = 16.0  # DCGM health: about 16 replays/min on Gen4 x16 ...
PCIE_REPLAYS_PER_MIN_GEN5 = 31.0  # ... 31 on Gen5 x16 (REFERENCE.md)
PCIE_DOWNTRAIN_FOR = "15m"  # policy: link retraining after a reset settles within minutes
PCIE_GEN_BUSY_UTIL_PCT = 50.0  # policy: idle GPUs lower their link generation to save power; judge only busy ones
NVLINK_CRC_PER_S = 100.0  # DCGM health: NVLink CRC errors >= 100/s

# --- XID classes (REFERENCE.md's table) ---
XID_DRAIN = ("48", "61", "62", "74", "79", "95", "119", "120")
"""Need a GPU reset (or a reboot): DBE, PMU halt, NVLink, off the bus, uncontained ECC, GSP."""
XID_RMA = ("64",)
"""Remap/retirement recording failure: reset, then an RMA candidate."""
XID_RMA_REPEATED = ("48", "79")
"""REFERENCE.md's RMA signs: XID 48 several times, falling off the bus repeatedly ..."""
XID_RMA_REPEATS = 3  # ... "several" = 3 since the collector started (policy)
XID_SBE_RATE = ("92",)
"""High single-bit ECC rate: watch."""
XID_APPLICATION = ("13", "31", "94")
"""Usually the application's fault (restart it); repeated on one GPU -> diagnose."""
XID_APPLICATION_REPEATS = 3  # policy: 3 in an hour on one GPU is no longer one bad job
# XID 43 (stopped processing), 45 (preemptive cleanup) and 63 (remap recorded, pending) are
# deliberately ignored by class alerts (REFERENCE.md: ignore / follow the earlier error;
# 63 is covered by GpuRowRemapPending). GpuXidErrors still reports them.

# --- XIDs and SXIDs from the kernel log (collector.kernel_log): what NVML's events miss ---
KERNEL_XID_RESET = ("48", "79", "95", "119", "120")
"""NVIDIA's XID catalogue resolves these with a GPU reset (48 DBE, 95 uncontained ECC, 119/120 GSP)
or a node reboot (79: a GPU off the bus cannot be reset): issue 57's remedies, drain now."""
KERNEL_XID_CONTAINED = ("94",)
"""Contained ECC error: the page is offlined and other work goes on; reset at the next idle moment."""
KERNEL_XID_WINDOW = "10m"  # policy: two scrape-and-poll rounds after the line is logged, with room for a restart

# --- InfiniBand/RoCE ports (collector.infiniband): each GPU's rail ---
IB_PORT_DOWN_FOR = "5m"  # policy: a switch reboot or a cable reseat brings a port back within minutes
IB_FLAPS_PER_HOUR = 3  # policy: one or two link downs follow a switch reboot; more in an hour is a flapping rail
IB_ERRORS_PER_HOUR = 10  # policy: a healthy HDR/NDR link (FEC) counts no symbol or receive errors at all

# --- NVLink links and the fabric (collector.nvlink) ---
FABRIC_NOT_READY_FOR = "10m"  # policy: GPUs register within a few minutes of boot once Fabric Manager runs
NVLINK_DOWN_FOR = "5m"  # policy: a GPU reset takes its links down for seconds, not minutes
NVLINK_UP_WITHIN = "1d"  # policy: a link never up in a day is unconnected (a bridge not fitted), not a failure

# --- collector and service health ---
SAMPLE_STALE_S = 120  # policy: 12 samples at the default 10 s interval; a hung NVML call shows here
SCORE_STALE_S = 1800  # policy: 6 scoring runs at the default 5 m score interval

# --- prediction (core/settings.py defaults, the same numbers the policy uses) ---
RISK_WATCH = float(Settings.model_fields["watch_threshold"].default)
RISK_DEMOTE = float(Settings.model_fields["demote_threshold"].default)
RISK_FOR = "15m"  # policy: three scoring runs at the default 5 m interval

# --- remediation (service.remediation: drain -> remedy -> verify -> return or rma) ---
REMEDIATION_STUCK_FOR = "10m"  # policy: ten passes of the actuator (1m); a report just past the deadline clears first
REMEDIATION_RMA_WINDOW = "1d"  # policy: remediations end a few a day on a large fleet; an hour holds too few to judge
REMEDIATION_RMA_SHARE = 0.5  # policy: verification sending more than half of the remedied GPUs to rma is a common cause
REMEDIATION_RMA_MIN = 3  # policy: one or two escalations are two bad GPUs, not a pattern

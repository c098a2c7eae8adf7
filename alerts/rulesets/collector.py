"""The collectors' own health: scraped, reading the GPUs, and sampling on time."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, collector_target
from alerts.rulesets.common import GROUP_COLLECTOR, INSTANCE, VALUE, label

_NODE = collector_target()
_SAMPLER = {**_NODE, "collector": "sample"}

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuCollectorDown",
        group=GROUP_COLLECTOR,
        expr=f"up{{{c.COLLECTOR_SELECTOR}}} == 0",
        for_="5m",
        severity="warning",
        action="watch",
        summary=f"gpuhealth collector down on {INSTANCE}",
        description=f"Prometheus cannot scrape {INSTANCE} (job {label('job')}) for 5m: its GPUs are unwatched.",
        case=Case.single("up", _NODE, "1x5 0x10", quiet_at="8m", fire_at="12m", value=0),
        meaning="The exporter process, the node or the network path to it is down. No GPU alert can fire for "
        "that node meanwhile.",
        check=(
            "`systemctl status gpuhealth-collect` (or the DaemonSet pod: `kubectl -n <ns> get pods -o wide "
            "| grep <node>`), and `curl -s http://<instance>/healthz`.",
        ),
        act=("Restart the collector; if the node is down, that is the incident.",),
    ),
    Alert(
        name="GpuCollectorFailing",
        group=GROUP_COLLECTOR,
        expr=f"gpuhealth_collector_success{{{c.SAMPLER_SELECTOR}}} == 0",
        for_="5m",
        severity="warning",
        action="watch",
        summary=f"gpuhealth collector {label('collector')} failing on {INSTANCE}",
        description=f"The {label('collector')} collector on {INSTANCE} has failed for 5m; "
        "its metrics are missing or old.",
        case=Case.single("gpuhealth_collector_success", _SAMPLER, "1x5 0x10", quiet_at="8m", fire_at="12m", value=0),
        meaning="The exporter answers but cannot read the GPUs (NVML/DCGM errors, driver mismatch after an upgrade).",
        check=("The collector's log: `journalctl -u gpuhealth-collect -n 100`; `nvidia-smi` on the node.",),
        act=("Fix the driver/NVML problem (a reboot after a driver upgrade), then restart the collector.",),
    ),
    Alert(
        name="GpuCollectorStale",
        group=GROUP_COLLECTOR,
        expr=f"gpuhealth_sample_age_seconds{{{c.SAMPLER_SELECTOR}}} > {c.SAMPLE_STALE_S}",
        for_="2m",
        severity="warning",
        action="watch",
        summary=f"gpuhealth collector serves stale samples on {INSTANCE}",
        description=f"The newest GPU sample on {INSTANCE} is {VALUE} s old (more than {c.SAMPLE_STALE_S} s): "
        "sampling is stalled.",
        case=Case.single(
            "gpuhealth_sample_age_seconds", _NODE, "5x5 130+60x10", quiet_at="6m", fire_at="8m", value=250
        ),
        meaning="The sampler thread hangs, usually in an NVML call to a GPU in a bad state; `/metrics` still "
        "answers with the last snapshot and `/healthz` answers 503.",
        check=("`curl -s http://<instance>/healthz`; `nvidia-smi` (does it hang too?); the kernel log for XIDs.",),
        act=("A hung NVML usually means a GPU needs a reset: drain the node and reset or reboot.",),
    ),
)

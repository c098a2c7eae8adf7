"""The GPUs' NVLink links and their registration with the NVLink fabric (collector.nvlink), and the
NVSwitches' fatal errors DCGM reports (collector.nvswitch)."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, collector_target, series
from alerts.rulesets.common import GROUP_NETWORK, HOST, VALUE, label
from core.kernel_log import READABLE
from core.labels import HOSTNAME
from core.nvlink import FABRIC_COMPLETED, FABRIC_STATE, FABRIC_STATUS, LINK_UP, NVML_SUCCESS, SWITCH_FATAL

_NODE = {HOSTNAME: "node-a", **collector_target()}
_G0 = {**_NODE, "gpu": "0", "UUID": "GPU-00000000-0000-4000-8000-000000000000"}
_G1 = {**_NODE, "gpu": "1", "UUID": "GPU-00000001-0000-4000-8000-000000000001"}
_G2 = {**_NODE, "gpu": "2", "UUID": "GPU-00000002-0000-4000-8000-000000000002"}
_SEL = f"{{{c.SAMPLER_SELECTOR}}}"
_SW8 = {**_NODE, "nvswitch": "8"}
_NODE_B = {HOSTNAME: "node-b", **collector_target("node-b")}

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuFabricNotReady",
        group=GROUP_NETWORK,
        expr=f"count by (instance, {HOSTNAME}) (\n  {FABRIC_STATE}{_SEL} != {FABRIC_COMPLETED}\n"
        f"  or {FABRIC_STATUS}{_SEL} != {NVML_SUCCESS}\n)",
        for_=c.FABRIC_NOT_READY_FOR,
        severity="critical",
        action="demote",
        summary=f"NVLink fabric not ready on {VALUE} GPUs of {HOST}: check nvidia-fabricmanager",
        description=f"{VALUE} GPUs of {HOST} have not completed their registration with the NVLink fabric, "
        f"or completed it with an error, for {c.FABRIC_NOT_READY_FOR}.",
        case=Case(
            # GPU 0 registers within minutes after boot (quiet); GPUs 1 and 2 never do (Fabric Manager stopped).
            series=(
                (series(FABRIC_STATE, _G0), "1x2 2x2 3x30"),
                (series(FABRIC_STATUS, _G0), "0x35"),
                (series(FABRIC_STATE, _G1), "1x35"),
                (series(FABRIC_STATUS, _G1), "0x35"),
                (series(FABRIC_STATE, _G2), "3x35"),
                (series(FABRIC_STATUS, _G2), "0x5 1x30"),
            ),
            quiet_at="5m",
            fire_at="20m",
            value=2,
            labels=({HOSTNAME: "node-a", "instance": _NODE["instance"]},),
        ),
        meaning="On an NVSwitch system (HGX, NVL) a GPU joins the NVLink fabric only once Fabric Manager (or, on "
        "NVL systems, the NVLink Subnet Manager) has set up its routes. Until then the GPU looks healthy per GPU "
        "but CUDA work across GPUs fails or hangs (cudaErrorSystemNotReady, NCCL timeouts).",
        check=(
            "`systemctl status nvidia-fabricmanager` and `journalctl -u nvidia-fabricmanager` (its version must "
            "match the driver's exactly).",
            "`nvidia-smi -q | grep -A4 Fabric` for each GPU's State and Status; `gpuhealth_nvlink_link_up` for "
            "links that are down.",
        ),
        act=(
            "Keep multi-GPU work off the node; start (or upgrade to the driver's version and restart) "
            "nvidia-fabricmanager, and reboot the node if the GPUs do not register within minutes.",
        ),
    ),
    Alert(
        name="GpuNvlinkLinkDown",
        group=GROUP_NETWORK,
        expr=f"{LINK_UP}{_SEL} == 0\nand\nmax_over_time({LINK_UP}{_SEL}[{c.NVLINK_UP_WITHIN}]) == 1",
        for_=c.NVLINK_DOWN_FOR,
        severity="warning",
        action="demote",
        summary=f"NVLink link {label('link')} down on {HOST} GPU {label('gpu')}",
        description=f"NVLink link {label('link')} of GPU {label('gpu')} ({label('UUID')}) on {HOST} is down for "
        f"{c.NVLINK_DOWN_FOR}; it was up within {c.NVLINK_UP_WITHIN}.",
        case=Case(
            series=(
                (series(LINK_UP, {**_G0, "link": "5"}), "1x10 0x30"),
                (series(LINK_UP, {**_G0, "link": "4"}), "1x40"),
                (series(LINK_UP, {**_G1, "link": "0"}), "0x40"),  # never up: an unconnected link
            ),
            quiet_at="13m",
            fire_at="20m",
            value=0,
            labels=({**_G0, "link": "5"},),
        ),
        meaning="A link that carried traffic went down: the GPU's bandwidth to its peers drops by one link's "
        "share, and on NVSwitch systems the GPU may leave the fabric; jobs that span GPUs slow down or hang.",
        check=(
            "`nvidia-smi nvlink -s -i <gpu>` (link states) and `nvidia-smi nvlink -e -i <gpu>` (its error "
            "counters); `gpuhealth_nvlink_*_errors_total{link=...}` before it went down.",
            "The kernel log for XIDs 74 (NVLink error) and NVSwitch SXIDs.",
        ),
        act=(
            "Keep multi-GPU work off the node; reset the GPU (or reboot) when idle and, if the link stays down, "
            "run `dcgmi diag -r 3` and open an RMA for the GPU or the baseboard.",
        ),
    ),
    Alert(
        name="GpuNvswitchFatalDcgm",
        group=GROUP_NETWORK,
        # DCGM keeps the last fatal SXID of each switch until nv-hostengine restarts (a reboot); where the
        # collector reads the kernel log, GpuNvswitchFatalSxid alerts on the same SXID with its line.
        expr=f"{SWITCH_FATAL}{_SEL} > 0\nunless on (instance)\n{READABLE}{_SEL} == 1",
        for_="0m",
        severity="critical",
        action="drain",
        summary=f"NVSwitch {label('nvswitch')} on {HOST} reports fatal SXID {VALUE} (DCGM)",
        description=f"DCGM reports the fatal SXID {VALUE} on NVSwitch {label('nvswitch')} of {HOST}; the "
        "collector cannot read the kernel log, so this is the only word of it.",
        case=Case(
            series=(
                (series(SWITCH_FATAL, _SW8), "0x10 1004x20"),
                (series(READABLE, _NODE), "0x30"),  # the kernel log unreadable on node-a
                (series(SWITCH_FATAL, {**_NODE_B, "nvswitch": "8"}), "0x10 1004x20"),
                (series(READABLE, _NODE_B), "1x30"),  # node-b's kernel log says it: GpuNvswitchFatalSxid
            ),
            quiet_at="5m",
            fire_at="12m",
            value=1004,
            labels=(_SW8,),
        ),
        meaning="DCGM (through the NVSwitch driver) reports a fatal error of a switch: its links, or the whole "
        "switch, stopped carrying traffic. GPUs routed through it leave the NVLink fabric; multi-GPU jobs on the "
        "node hang or fail with NCCL errors, while each GPU alone looks healthy. The same SXID is in the kernel "
        "log; this alert stands in for GpuNvswitchFatalSxid where the collector cannot read that log.",
        check=(
            "`dmesg -T | grep SXid` on the node for the line and its link; `dcgmi discovery -l` lists the "
            "switches by the id in the `nvswitch` label.",
            "`systemctl status nvidia-fabricmanager` and `journalctl -u nvidia-fabricmanager`.",
            "Why the collector cannot read the kernel log: its log line at start, `gpuhealth_kernel_log_readable`.",
        ),
        act=(
            "Drain the node; reboot it (or, with Fabric Manager stopped, reset its GPUs and switches), then check "
            "that every GPU registers with the fabric again (GpuFabricNotReady clears).",
            "A fatal SXID again on the same switch: open an RMA for the baseboard with `nvidia-bug-report.sh`.",
        ),
    ),
)

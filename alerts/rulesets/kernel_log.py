"""XIDs and NVSwitch SXIDs read from the kernel log (collector.kernel_log), the ones NVML's events miss included."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, collector_target, gpu_labels, series
from alerts.rulesets.common import GROUP_XID, HOST, ON_GPU, VALUE, WHO, label, new_events
from core.kernel_log import SXID, SXID_FATAL, XID
from core.labels import HOSTNAME

_FROM_LOG = 'source!="nvml"'
"""Counted from the log itself: when it cannot be read the counter is fed by NVML, whose events GpuXidFatal
and its siblings already alert on."""
CODE, MSG = label("err_code"), label("err_msg")
_SWITCH = f"{label('switch')} ({label('pci_bus_id')})"
_JOURNAL = "`journalctl -k | grep -E 'NVRM: Xid|SXid'` (or `dmesg -T | grep -E 'NVRM: Xid|SXid'`)"


def _xids(codes: tuple[str, ...]) -> str:
    sel = f'{XID}{{{c.SAMPLER_SELECTOR}, err_code=~"{"|".join(codes)}", {_FROM_LOG}}}'
    return new_events(sel, c.KERNEL_XID_WINDOW)


def _xid(i: int, code: int, msg: str, source: str = "kmsg") -> dict[str, str]:
    return gpu_labels(i, err_code=str(code), err_msg=msg, source=source)


X79 = _xid(0, 79, "GPU has fallen off the bus")
X119 = _xid(1, 119, "GSP RPC Timeout", "journal")
X94 = _xid(0, 94, "Contained ECC error")
_SW = {HOSTNAME: "node-a", **collector_target(), "pci_bus_id": "00000000:C5:00.0", "switch": "nvidia-nvswitch2"}
SXID_FATAL_1004 = {**_SW, "err_code": "1004", "severity": SXID_FATAL}


def _reset_case() -> Case:
    """XID 79 (kmsg) and 119 (journal) appear and fire; 13 is no reset class; 48 counted from NVML does not."""
    return Case(
        series=(
            (series(XID, X79), "_x10 1x20"),
            (series(XID, X119), "_x10 1x4 2x16"),
            (series(XID, _xid(0, 13, "Graphics Engine Exception")), "_x10 1+1x20"),
            (series(XID, _xid(1, 48, "Double Bit ECC Error", "nvml")), "_x10 1x20"),
        ),
        quiet_at="5m",
        fire_at="12m",
        value=1,
        labels=(X79, X119),
    )


ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuKernelXidResetRequired",
        group=GROUP_XID,
        expr=_xids(c.KERNEL_XID_RESET),
        for_="0m",
        severity="critical",
        action="drain",
        summary=f"{ON_GPU} logged XID {CODE} ({MSG}) in the kernel log: it needs a reset or a reboot",
        description=f"{WHO} logged XID {CODE} ({MSG}) {VALUE} times in {c.KERNEL_XID_WINDOW} (source "
        f"{label('source')}); NVIDIA's XID catalogue resolves XID {', '.join(c.KERNEL_XID_RESET)} with a GPU "
        "reset, 79 with a reboot.",
        case=_reset_case(),
        meaning="The driver wrote an XID to the kernel log whose documented resolution is a GPU reset (48 "
        "double-bit ECC, 95 uncontained ECC, 119/120 GSP timeout or error) or a node reboot (79, fallen off the "
        "bus: a reset cannot reach it). The kernel log holds XIDs NVML's event stream misses or that happened "
        "while the collector was down; when NVML saw the same XID, GpuXidFatal fires too, for the same GPU.",
        check=(
            f"The line and what came before it: {_JOURNAL}.",
            "Whether gpuhealth already remedies it: `curl -s 'http://127.0.0.1:8080/v1/remediations?open=true'`.",
            "`nvidia-smi -q -i <gpu> -d ECC,ROW_REMAPPER` for 48/95.",
        ),
        act=(
            "Drain the node, reset the GPU when idle (`nvidia-smi --gpu-reset -i <gpu>`; for 79 reboot the node), "
            "run `dcgmi diag -r 3 -i <gpu>`, return it if it passes (gpuhealth's remediation does this when on).",
        ),
    ),
    Alert(
        name="GpuKernelXidContainedEcc",
        group=GROUP_XID,
        expr=_xids(c.KERNEL_XID_CONTAINED),
        for_="0m",
        severity="warning",
        action="watch",
        summary=f"{ON_GPU} logged a contained ECC error (XID {CODE}): reset it when idle",
        description=f"{WHO} logged XID {CODE} ({MSG}) {VALUE} times in {c.KERNEL_XID_WINDOW}: the page was "
        "offlined and the work that hit it ended; other work goes on.",
        case=Case.single(XID, X94, "_x10 1x5 2x15", quiet_at="8m", fire_at="12m", value=1),
        meaning="An uncorrectable ECC error the GPU contained (XID 94): only the process that touched the memory "
        "was stopped, the page is offlined (dynamic page offlining) and a row remap waits for the next reset. "
        "NVIDIA's memory error management guide: unaffected applications continue; apply it in the regular "
        "service window.",
        check=(
            f"The line: {_JOURNAL}; which process it ended (`pid=`, `name=`).",
            "`nvidia-smi -q -i <gpu> -d ROW_REMAPPER` (pending remaps).",
        ),
        act=("Reset the GPU at its next idle moment (gpuhealth's remedy `reset` at `idle` does so when on).",),
    ),
    Alert(
        name="GpuNvswitchFatalSxid",
        group=GROUP_XID,
        expr=new_events(f'{SXID}{{{c.SAMPLER_SELECTOR}, severity="{SXID_FATAL}"}}', c.KERNEL_XID_WINDOW),
        for_="0m",
        severity="critical",
        action="drain",
        summary=f"NVSwitch {_SWITCH} on {HOST} logged fatal SXID {CODE}",
        description=f"The NVSwitch {_SWITCH} of {HOST} logged the fatal SXID {CODE} {VALUE} times in "
        f"{c.KERNEL_XID_WINDOW}: the NVLink traffic through it is lost until the switch and its GPUs are reset.",
        case=Case(
            series=(
                (series(SXID, SXID_FATAL_1004), "_x10 1x20"),
                (series(SXID, {**_SW, "err_code": "12028", "severity": "non-fatal"}), "1+1x30"),
            ),
            quiet_at="8m",
            fire_at="12m",
            value=1,
            labels=(SXID_FATAL_1004,),
        ),
        meaning="The NVSwitch driver reports a fatal error of a switch (SXid ..., Fatal, ...): its links, or the "
        "whole switch, stopped carrying traffic. GPUs routed through it leave the NVLink fabric; multi-GPU jobs "
        "on the node hang or fail with NCCL errors, while each GPU alone looks healthy. SXIDs never reach NVML's "
        "event stream: the kernel log is their only source.",
        check=(
            f"The SXID and its link: {_JOURNAL}.",
            "`systemctl status nvidia-fabricmanager` and `journalctl -u nvidia-fabricmanager` (it logs the fatal "
            "error and what it did); `nvidia-smi -q | grep -A4 Fabric` for the GPUs' fabric state.",
        ),
        act=(
            "Drain the node; reboot it (or, with Fabric Manager stopped, reset its GPUs and switches), then check "
            "that every GPU registers with the fabric again (GpuFabricNotReady clears).",
            "A fatal SXID again on the same switch: open an RMA for the baseboard with `nvidia-bug-report.sh`.",
        ),
    ),
)

"""XID errors, by the severity classes of REFERENCE.md's table."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, gpu_labels, series
from alerts.rulesets.common import GROUP_XID, ON_GPU, VALUE, WHO, XID_COUNTER, label, m, new_events
from alerts.rulesets.records import XID_INCREASE


def _codes(codes: tuple[str, ...]) -> str:
    """A regex matching any of the XID `codes`."""
    return "|".join(codes)


def _recent(codes: tuple[str, ...]) -> str:
    """PromQL: XID events of `codes` per GPU and code in the last 5m (the recording rule)."""
    return f'{XID_INCREASE}{{xid=~"{_codes(codes)}"}}'


def xid_events(codes: tuple[str, ...], window: str, at_least: int = 1) -> str:
    """PromQL: XID events of `codes` per GPU and code within `window`, where at least `at_least` (`new_events`)."""
    return new_events(f'{XID_COUNTER}{{xid=~"{_codes(codes)}"}}', window, at_least)


XID = label("xid")
XID_CODE = f"XID {XID}"
X13 = gpu_labels(0, xid="13")
X48 = gpu_labels(0, xid="48")

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuXidErrors",
        group=GROUP_XID,
        expr=f"{XID_INCREASE}\nor on ({', '.join(c.GPU_KEY)})\n({m('xid')} != 0 and changes({m('xid')}[5m]) > 0)",
        for_="0m",
        severity="critical",
        action="watch",
        summary=f"XID error on {ON_GPU}",
        description=f"{WHO} reported XID errors in the last 5m (xid={XID}, value {VALUE}: events for gpuhealth's "
        "counter, the last code for dcgm-exporter's gauge).",
        # The counter series does not exist before the first XID: absence must not fire, appearance must.
        case=Case.single(XID_COUNTER, X13, "_x10 1x10", quiet_at="5m", fire_at="12m", value=1),
        meaning="The driver logged an XID (an error report) for the GPU. The code says what happened; the class "
        "alerts (GpuXidFatal, GpuXidRmaCandidate, ...) carry the action.",
        check=(
            "The code and its context: `journalctl -k | grep -i 'NVRM: Xid'`; NVIDIA's XID catalogue explains "
            "each code.",
            "The XID panel on the GPU detail dashboard (codes over time).",
        ),
        act=("Follow the class alert that fires with it; alone (13, 31, 43, 45, 63, 94) it needs no action.",),
    ),
    Alert(
        name="GpuXidFatal",
        group=GROUP_XID,
        expr=_recent(c.XID_DRAIN),
        for_="0m",
        severity="critical",
        action="drain",
        summary=f"{ON_GPU} needs a reset after {XID_CODE}",
        description=f"{WHO} reported {XID_CODE} ({VALUE} in 5m), a class that needs a GPU reset or reboot "
        f"({', '.join(c.XID_DRAIN)}).",
        case=Case(
            series=((series(XID_COUNTER, gpu_labels(0, xid="43")), "1x20"), (series(XID_COUNTER, X48), "_x10 1x10")),
            quiet_at="8m",
            fire_at="12m",
            value=1,
            labels=(X48,),
        ),
        meaning="48 double-bit ECC, 61/62 PMU breakpoint/halt, 74 NVLink, 79 fell off the bus, 95 uncontained "
        "ECC, 119/120 GSP timeout/error: the GPU's state cannot be trusted until it is reset.",
        check=(
            "`journalctl -k | grep -i 'NVRM: Xid'` for the code and its detail.",
            "`nvidia-smi -q -i <gpu> -d ECC,ROW_REMAPPER` for 48/95.",
        ),
        act=("Drain the node, reset the GPU (or reboot for 79), run `dcgmi diag -r 3 -i <gpu>`, resume if it passes.",),
    ),
    Alert(
        name="GpuXidRmaCandidate",
        group=GROUP_XID,
        expr=f'{_recent(c.XID_RMA)}\nor\n{XID_COUNTER}{{xid=~"{_codes(c.XID_RMA_REPEATED)}"}} >= {c.XID_RMA_REPEATS}',
        for_="0m",
        severity="critical",
        action="rma",
        summary=f"{ON_GPU} is an RMA candidate ({XID_CODE})",
        description=f"{WHO} reported {XID_CODE} ({VALUE}): XID {', '.join(c.XID_RMA)} (memory repair failed) "
        f"or XID {'/'.join(c.XID_RMA_REPEATED)} at least {c.XID_RMA_REPEATS} times.",
        case=Case.single(XID_COUNTER, X48, "1x3 2x3 3x3", quiet_at="7m", fire_at="9m", value=3),
        meaning="NVIDIA's RMA signs: a remap/retirement recording failure (64), double-bit errors again "
        "and again (48), or falling off the bus repeatedly (79).",
        check=(
            "`nvidia-smi -q -i <gpu> -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`.",
            "`dcgmi diag -r 3 -i <gpu>` (the field diagnostic an RMA needs).",
        ),
        act=("Drain the node and open an RMA (see GpuRowRemapFailure for what to attach).",),
    ),
    Alert(
        name="GpuXidHighSbeRate",
        group=GROUP_XID,
        expr=_recent(c.XID_SBE_RATE),
        for_="0m",
        severity="warning",
        action="watch",
        summary=f"Driver reports a high single-bit ECC rate on {ON_GPU}",
        description=f"{WHO} reported XID 92 (high single-bit ECC error rate).",
        case=Case.single(XID_COUNTER, gpu_labels(0, xid="92"), "_x5 1x5", quiet_at="4m", fire_at="7m", value=1),
        meaning="The driver itself judged the corrected-error rate high (XID 92).",
        check=("As GpuEccSbeRateHigh: `nvidia-smi -q -i <gpu> -d ECC,ROW_REMAPPER`.",),
        act=("Watch; follow GpuEccSbeRateHigh.",),
    ),
    Alert(
        name="GpuXidApplicationRepeated",
        group=GROUP_XID,
        expr=xid_events(c.XID_APPLICATION, "1h", c.XID_APPLICATION_REPEATS),
        for_="0m",
        severity="warning",
        action="watch",
        summary=f"{XID_CODE} repeats on {ON_GPU}",
        description=f"{WHO} reported {XID_CODE} {VALUE} times in 1h. XID {', '.join(c.XID_APPLICATION)} are usually "
        "the application's fault, but not over and over on one GPU.",
        case=Case.single(XID_COUNTER, X13, "_x5 1 2 2 3x5", quiet_at="7m", fire_at="9m", value=3),
        meaning="13 graphics engine exception, 31 memory page fault, 94 contained ECC error: one occurrence is "
        "a job's problem; the same code again and again on one GPU (and not on its neighbours) is the GPU's.",
        check=(
            "Whether different jobs hit it (`journalctl -k | grep -i 'NVRM: Xid'` shows the pid/process).",
            "`dcgmi diag -r 3 -i <gpu>` when the GPU is free.",
        ),
        act=("Watch; if the diagnostic fails or the errors follow the GPU across jobs, drain and diagnose.",),
    ),
)

"""Memory reliability: ECC errors, and the row remaps and retired pages that repair them."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, series
from alerts.rulesets.common import G0, GROUP_GPU, HOST, ON_GPU, VALUE, WHO, fmt, m
from alerts.rulesets.records import SBE_RATE_1D, SBE_RATE_1H

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuEccUncorrectable",
        group=GROUP_GPU,
        expr=f"increase({m('ecc_dbe_volatile')}[10m]) > 0",
        for_="0m",
        severity="critical",
        action="drain",
        summary=f"Uncorrectable (double-bit) ECC error on {ON_GPU}",
        description=f"{WHO} logged {VALUE} uncorrectable ECC error(s) in the last 10m.",
        case=Case.single(m("ecc_dbe_volatile"), G0, "0x5 1x5", quiet_at="4m", fire_at="7m", value=1),
        meaning="Memory returned data the ECC could not correct. The application that read it has usually "
        "crashed (XID 48/94/95); on Ampere and later the row is remapped at the next GPU reset.",
        check=(
            "`nvidia-smi -q -i <gpu> -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`: volatile/aggregate DBE counts, "
            "pending remaps, remap failures.",
            "The kernel log for the matching XID: `journalctl -k | grep -i xid`.",
            "gpuhealth's view and reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`.",
        ),
        act=(
            "Drain the node, reset the GPU so the row remap takes effect, run `dcgmi diag -r 3 -i <gpu>`, "
            "and resume only if the diagnostic passes and no remap failure is reported.",
            "Repeated uncorrectable errors on one GPU are one of NVIDIA's RMA signs.",
        ),
    ),
    Alert(
        name="GpuRowRemapPending",
        group=GROUP_GPU,
        expr=f"({m('row_remap_pending')} == 1)\nor\n({m('retired_pages_pending')} == 1)",
        for_="5m",
        severity="warning",
        action="drain",
        summary=f"GPU memory repair waits for a reset on {ON_GPU}",
        description=f"{WHO} has a row remap (Ampere and later) or page retirement (earlier GPUs) pending: "
        "it takes effect only after a GPU reset.",
        case=Case(
            series=(
                (series(m("row_remap_pending"), G0), "0x5 1x10"),
                (series(m("retired_pages_pending"), G0), "0x15"),
            ),
            quiet_at="8m",
            fire_at="12m",
            value=1,
            labels=(G0,),
        ),
        meaning="The driver recorded a bad memory row (XID 63) and will remap it, but only after the GPU is "
        "reset. Until then error containment and dynamic page blacklisting keep work off that row, so running "
        "work can go on (NVIDIA memory error management; NVML nvmlDeviceGetRemappedRows); the reset applies the "
        "remap. A weak row on a healthy GPU is remapped so too: a pending remap alone does not say the memory is "
        "wearing out; the SBE trend does (gpuhealth's ECC risk reads both).",
        check=("`nvidia-smi -q -i <gpu> -d ROW_REMAPPER,PAGE_RETIREMENT` shows Pending: Yes.",),
        act=(
            "Drain the node at the next convenient moment, reset the GPU (`nvidia-smi -r -i <gpu>` with no "
            "processes on it; on NVSwitch systems reset all GPUs or reboot), check that Pending is No, resume.",
        ),
    ),
    Alert(
        name="GpuRowRemapFailure",
        group=GROUP_GPU,
        expr=f"{m('row_remap_failure')} == 1",
        for_="0m",
        severity="critical",
        action="rma",
        summary=f"GPU row remap failed on {ON_GPU}: RMA candidate",
        description=f"{WHO} reports a row remap failure: a bank ran out of spare rows, a remapped row failed "
        "again, or 512 uncorrectable remaps were reached.",
        case=Case.single(m("row_remap_failure"), G0, "0x3 1x3", quiet_at="2m", fire_at="5m", value=1),
        meaning="NVIDIA's criteria for RMA eligibility (after field diagnostics): the memory can no longer "
        "repair itself.",
        check=(
            "`nvidia-smi -q -i <gpu> -d ROW_REMAPPER` (Remapping Failure Occurred: Yes, and the remap histogram).",
            "`dcgmi diag -r 3 -i <gpu>` for the field diagnostic NVIDIA asks for with an RMA.",
        ),
        act=(
            "Drain the node, run the field diagnostic, and open an RMA with the GPU's serial "
            "(`nvidia-smi -q -i <gpu> | grep -i serial`) and the `nvidia-bug-report.sh` output.",
        ),
    ),
    Alert(
        name="GpuRetiredPagesLimit",
        group=GROUP_GPU,
        expr=f"{m('retired_pages_sbe')} + {m('retired_pages_dbe')} >= {c.RETIRED_PAGES_LIMIT}",
        for_="0m",
        severity="critical",
        action="rma",
        summary=f"GPU retired pages at DCGM's limit on {ON_GPU}",
        description=f"{WHO} has {VALUE} retired pages (single- plus double-bit), at or above DCGM's health limit "
        f"of {c.RETIRED_PAGES_LIMIT}.",
        case=Case(
            series=(
                (series(m("retired_pages_sbe"), G0), "40+5x10"),
                (series(m("retired_pages_dbe"), G0), "10x10"),
            ),
            quiet_at="2m",
            fire_at="4m",
            value=70,
            labels=(G0,),
        ),
        meaning="Pre-Ampere GPUs retire a page after one double-bit or two single-bit errors at one address. "
        "DCGM's health check fails a GPU at 63 retired pages; it is an RMA sign.",
        check=("`nvidia-smi -q -i <gpu> -d PAGE_RETIREMENT` and `dcgmi health -c`.",),
        act=("Drain the node and open an RMA (see GpuRowRemapFailure for what to attach).",),
    ),
    Alert(
        name="GpuRetiredDbePagesGrowing",
        group=GROUP_GPU,
        expr=f"{m('retired_pages_dbe')} > {c.RETIRED_DBE_PAGES_LIMIT}\nand\n"
        f"increase({m('retired_pages_dbe')}[7d]) > {c.RETIRED_DBE_PAGES_PER_WEEK}",
        for_="0m",
        severity="critical",
        action="rma",
        summary=f"GPU keeps retiring pages for double-bit errors on {HOST}",
        description=f"{WHO} has {VALUE} pages retired for double-bit errors (more than {c.RETIRED_DBE_PAGES_LIMIT}) "
        f"and more than {c.RETIRED_DBE_PAGES_PER_WEEK} new in 7 days.",
        case=Case.single(m("retired_pages_dbe"), G0, "14+1x30", quiet_at="1h", fire_at="3h", value=17, interval="1h"),
        meaning="DCGM's second page-retirement criterion: more than 15 DBE-retired pages with more than one new "
        "per week. The memory is degrading, not just carrying old scars.",
        check=("`nvidia-smi -q -i <gpu> -d PAGE_RETIREMENT` (Double Bit ECC list).",),
        act=("Drain the node and open an RMA (see GpuRowRemapFailure).",),
    ),
    Alert(
        name="GpuEccSbeRateHigh",
        group=GROUP_GPU,
        expr=f"86400 * {SBE_RATE_1H} > {fmt(c.SBE_PER_DAY_HIGH)}\nand\n"
        f"{SBE_RATE_1H} > {fmt(c.SBE_RISING_FACTOR)} * {SBE_RATE_1D}",
        for_=c.SBE_FOR,
        severity="warning",
        action="watch",
        summary=f"Single-bit ECC errors high and rising on {ON_GPU}",
        description=f"{WHO} corrects single-bit ECC errors at {VALUE} per day over the last hour "
        f"(more than {fmt(c.SBE_PER_DAY_HIGH)}/day and over {fmt(c.SBE_RISING_FACTOR)}x its daily average).",
        # Two quiet hours, then one error every 10 minutes (144/day); rate1d divides by a whole day.
        case=Case.single(
            m("ecc_sbe_volatile"), G0, "0x12 1+1x18", quiet_at="1h", fire_at="4h30m", value=144, interval="10m"
        ),
        meaning="Corrected errors cost nothing by themselves, but a rate going from 0 to 10+ per day is a strong "
        "sign that an uncorrectable error is near (the product brief; SBEs concentrate on a few cards).",
        check=(
            "The SBE rate and remaps on the GPU detail dashboard, panel *ECC errors*.",
            "`nvidia-smi -q -i <gpu> -d ECC,ROW_REMAPPER` (correctable remaps) and the HBM temperature.",
            "The ECC risk and its reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`.",
        ),
        act=(
            "Watch: keep latency-critical work away if the rate keeps climbing; schedule `dcgmi diag -r 3` in "
            "the next maintenance window.",
        ),
    ),
)

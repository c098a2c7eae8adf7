"""Every recording and alerting rule, built from the catalogue's metric names and alerts/config.py.

One list, several outputs (alerts/build.py): the Prometheus rule file, its promtool unit tests,
docs/alerts.md and one runbook per alert in docs/runbooks/.
"""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, Record, gpu_labels, series, service_labels
from core.catalog import BY_NAME


def m(short: str) -> str:
    """The /metrics name of a catalogue field (a KeyError here is a typo caught at import)."""
    return BY_NAME[short].metric_name


XID_COUNTER = "gpuhealth_xid_errors_total"
WHO = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }}"
A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def _fmt(x: float) -> str:
    """A threshold as PromQL and prose write it: 0.95, 85, 1e-06 never appears."""
    return f"{x:g}"


def _regex(codes: tuple[str, ...]) -> str:
    return "|".join(codes)


def xid_events(codes: tuple[str, ...], window: str, at_least: int = 1) -> str:
    """PromQL: XID events of `codes` per GPU and code within `window`, where at least `at_least`.

    gpuhealth_xid_errors_total{xid} appears only at a GPU's first XID of that code, so
    `increase()` alone misses the first event (a new series has nothing to increase from):
    a series that did not exist `window` ago counts with its whole value.
    """
    sel = f'{XID_COUNTER}{{xid=~"{_regex(codes)}"}}'
    return f"(increase({sel}[{window}]) >= {at_least})\nor\n(({sel} unless {sel} offset {window}) >= {at_least})"


# --- recording rules: rates shared by alerts and dashboards (level:metric:operation) ---
FB_USED_RATIO = "gpu:fb_used:ratio"
SBE_RATE_1H = "gpu:ecc_sbe_errors:rate1h"
SBE_RATE_1D = "gpu:ecc_sbe_errors:rate1d"
PCIE_REPLAY_RATE = "gpu:pcie_replays:rate5m"
NVLINK_CRC_RATE = "gpu:nvlink_crc_errors:rate5m"
XID_INCREASE = "gpu:xid_errors:increase5m"

_flit, _data = m("nvlink_crc_flit_errors"), m("nvlink_crc_data_errors")
RECORDS: tuple[Record, ...] = (
    Record(
        FB_USED_RATIO,
        f"{m('fb_used_mib')} / ({m('fb_used_mib')} + {m('fb_free_mib')})",
        "Framebuffer memory used as a share of used + free (0..1).",
    ),
    Record(SBE_RATE_1H, f"rate({m('ecc_sbe_volatile')}[1h])", "Single-bit ECC errors per second over 1h."),
    Record(SBE_RATE_1D, f"rate({m('ecc_sbe_volatile')}[1d])", "Single-bit ECC errors per second over 1d."),
    Record(PCIE_REPLAY_RATE, f"rate({m('pcie_replay_count')}[5m])", "PCIe replays per second over 5m."),
    Record(
        NVLINK_CRC_RATE,
        f"(rate({_flit}[5m]) + rate({_data}[5m]))\nor\nrate({_flit}[5m])\nor\nrate({_data}[5m])",
        "NVLink CRC (flit + data) errors per second over 5m, all links.",
    ),
    Record(
        XID_INCREASE,
        f"(increase({XID_COUNTER}[5m]) > 0)\nor\n({XID_COUNTER} unless {XID_COUNTER} offset 5m)",
        "XID events per GPU and code in the last 5m; only codes that occurred (a new series counts whole).",
    ),
)

# --- the product brief's alerts and GPU reliability ---
G0 = gpu_labels(0)
G1 = gpu_labels(1)
G0_A100 = gpu_labels(0, model=A100)


def _temp_expr() -> str:
    by_limit: dict[float, list[str]] = {}
    for pattern, limit in c.TEMP_MAX_OPERATING_C.items():
        by_limit.setdefault(limit, []).append(pattern)
    known = "|".join(c.TEMP_MAX_OPERATING_C)
    temp = m("gpu_temp_c")
    parts = [f'{temp}{{modelName=~"{"|".join(pats)}"}} > {_fmt(limit)}' for limit, pats in sorted(by_limit.items())]
    parts.append(f'{temp}{{modelName!~"{known}"}} > {_fmt(c.TEMP_DEFAULT_MAX_C)}')
    return "\nor\n".join(f"({p})" for p in parts)


_limits = ", ".join(
    f"{p.removeprefix('NVIDIA ').removesuffix('.*')} {_fmt(v)} °C" for p, v in c.TEMP_MAX_OPERATING_C.items()
)

GPU_ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuMemoryAlmostFull",
        group="gpuhealth.gpu",
        expr=f"{FB_USED_RATIO} > {_fmt(c.MEMORY_FULL_RATIO)}",
        for_=c.MEMORY_FULL_FOR,
        severity="warning",
        action="watch",
        summary="GPU memory almost full on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' uses {{ $value | printf "%.3f" }} of its framebuffer memory '
        f"(more than {_fmt(c.MEMORY_FULL_RATIO)} for {c.MEMORY_FULL_FOR}); the next allocation may fail.",
        case=Case(
            series=((series(m("fb_used_mib"), G0), "78000x10"), (series(m("fb_free_mib"), G0), "1559x10")),
            quiet_at="4m",
            fire_at="6m",
            value=78000 / 79559,
            labels=(G0,),
        ),
        meaning="A process (or several) holds almost all of the GPU's memory. Not a hardware fault, but the "
        "next allocation fails with out-of-memory, and a leak shows here first.",
        check=(
            "Which processes hold the memory: `nvidia-smi --query-compute-apps=pid,process_name,used_memory "
            "--format=csv -i <gpu>`.",
            "Whether usage keeps growing (a leak) on the GPU detail dashboard, panel *Framebuffer memory*.",
        ),
        act=(
            "Tell the job's owner; a leaking or orphaned process can be stopped with `kill <pid>`.",
            "No hardware action is needed.",
        ),
    ),
    Alert(
        name="GpuTemperatureHigh",
        group="gpuhealth.gpu",
        expr=_temp_expr(),
        for_=c.TEMP_FOR,
        severity="critical",
        action="demote",
        summary="GPU temperature above its maximum operating temperature on {{ $labels.Hostname }}",
        description=WHO + ' ({{ $labels.modelName }}) is at {{ $value | printf "%.0f" }} °C, above its model\'s '
        f"maximum operating temperature ({_limits}; others {_fmt(c.TEMP_DEFAULT_MAX_C)} °C) for {c.TEMP_FOR}.",
        case=Case(
            # An H100 at 86 C is inside its limit (87) though above the default (85): per-model thresholds.
            series=((series(m("gpu_temp_c"), G0), "86x5 88x5"),),
            quiet_at="4m",
            fire_at="9m",
            value=88,
            labels=(G0,),
        ),
        meaning="The core runs hotter than NVIDIA's maximum operating temperature for its model. The GPU "
        "slows its clocks near the slowdown temperature (89 °C on A100/H100 SXM) and shuts down at 92 °C; "
        "heat also ages HBM and solder. Hot GPUs cluster where cooling is worst (top of rack, far from the inlet).",
        check=(
            "Temperatures, limits and clock slowdown: `nvidia-smi -q -i <gpu> -d TEMPERATURE,PERFORMANCE,POWER`.",
            "Whether the node's other GPUs are hot too (cooling, inlet air, fans) on the node dashboard, "
            "or only this one (thermal interface, a stuck fan, a blocked heatsink).",
            "The thermal risk on `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`.",
        ),
        act=(
            "Demote the GPU (interruptible work only) until the cooling is fixed; open a facilities ticket for "
            "the rack if several GPUs are hot.",
            "A single hot GPU among cool neighbours needs a maintenance-window check of its heatsink and "
            "thermal interface.",
        ),
    ),
    Alert(
        name="GpuMemoryTemperatureHigh",
        group="gpuhealth.gpu",
        expr=f"{m('memory_temp_c')} > {_fmt(c.MEMORY_TEMP_MAX_C)}",
        for_=c.TEMP_FOR,
        severity="critical",
        action="demote",
        summary=f"GPU memory (HBM) above {_fmt(c.MEMORY_TEMP_MAX_C)} °C on {{{{ $labels.Hostname }}}}",
        description=WHO + ' has its HBM at {{ $value | printf "%.0f" }} °C, above the '
        f"{_fmt(c.MEMORY_TEMP_MAX_C)} °C memory maximum, for {c.TEMP_FOR}.",
        case=Case(
            series=((series(m("memory_temp_c"), G0), "90x5 97x5"),),
            quiet_at="4m",
            fire_at="9m",
            value=97,
            labels=(G0,),
        ),
        meaning="HBM runs above NVIDIA's memory maximum (95 °C on A100/H100). Hot HBM raises the single-bit "
        "ECC rate and is the commonest precursor of uncorrectable memory errors.",
        check=(
            "`nvidia-smi -q -i <gpu> -d TEMPERATURE` (Memory Current Temp) and the ECC counters: "
            "`nvidia-smi -q -i <gpu> -d ECC,ROW_REMAPPER`.",
            "Memory versus core temperature on the GPU detail dashboard: memory 9-18 °C above the core is "
            "normal at idle; a growing gap points at the memory's cooling.",
        ),
        act=("Demote the GPU and fix the cooling, as for GpuTemperatureHigh.",),
    ),
    Alert(
        name="GpuThermalThrottling",
        group="gpuhealth.gpu",
        expr=f"{m('clocks_event_reasons')}\nand\n"
        f"((floor({m('clocks_event_reasons')} / 64) % 2 == 1) or (floor({m('clocks_event_reasons')} / 8) % 2 == 1))",
        for_="10m",
        severity="warning",
        action="watch",
        summary="GPU clocks held down by hardware slowdown on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' reports clock event reasons {{ $value | printf "%.0f" }} (bit 0x40 hardware thermal '
        "slowdown or 0x8 hardware slowdown set) for 10m: it runs slower than its peers.",
        case=Case(
            # 0x20 software thermal is normal boost management; 0x40 | 0x4 = 68 is a hardware thermal slowdown.
            series=((series(m("clocks_event_reasons"), G0), "32x12 68x15"),),
            quiet_at="11m",
            fire_at="25m",
            value=68,
            labels=(G0,),
        ),
        meaning="The GPU's hardware lowered its clocks because it is too hot (0x40) or an external signal "
        "(power brake, 0x8) asked it to. Training jobs run at the speed of their slowest GPU.",
        check=(
            "`nvidia-smi -q -i <gpu> -d PERFORMANCE` lists the active clock event reasons.",
            "Core and memory temperatures and the throttle panel on the GPU detail dashboard.",
        ),
        act=(
            "Treat as GpuTemperatureHigh when temperatures are high; a power brake (0x80/0x8) with normal "
            "temperatures points at the node's power supply.",
        ),
    ),
    Alert(
        name="GpuEccUncorrectable",
        group="gpuhealth.gpu",
        expr=f"increase({m('ecc_dbe_volatile')}[10m]) > 0",
        for_="0m",
        severity="critical",
        action="drain",
        summary="Uncorrectable (double-bit) ECC error on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' logged {{ $value | printf "%.0f" }} uncorrectable ECC error(s) in the last 10m.',
        case=Case(
            series=((series(m("ecc_dbe_volatile"), G0), "0x5 1x5"),),
            quiet_at="4m",
            fire_at="7m",
            value=1,
            labels=(G0,),
        ),
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
        group="gpuhealth.gpu",
        expr=f"({m('row_remap_pending')} == 1)\nor\n({m('retired_pages_pending')} == 1)",
        for_="5m",
        severity="warning",
        action="drain",
        summary="GPU memory repair waits for a reset on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + " has a row remap (Ampere and later) or page retirement (earlier GPUs) pending: "
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
        "reset. Until then the bad row can be hit again.",
        check=("`nvidia-smi -q -i <gpu> -d ROW_REMAPPER,PAGE_RETIREMENT` shows Pending: Yes.",),
        act=(
            "Drain the node at the next convenient moment, reset the GPU (`nvidia-smi -r -i <gpu>` with no "
            "processes on it; on NVSwitch systems reset all GPUs or reboot), check that Pending is No, resume.",
        ),
    ),
    Alert(
        name="GpuRowRemapFailure",
        group="gpuhealth.gpu",
        expr=f"{m('row_remap_failure')} == 1",
        for_="0m",
        severity="critical",
        action="rma",
        summary="GPU row remap failed on {{ $labels.Hostname }} GPU {{ $labels.gpu }}: RMA candidate",
        description=WHO + " reports a row remap failure: a bank ran out of spare rows, a remapped row failed "
        "again, or 512 uncorrectable remaps were reached.",
        case=Case(
            series=((series(m("row_remap_failure"), G0), "0x3 1x3"),),
            quiet_at="2m",
            fire_at="5m",
            value=1,
            labels=(G0,),
        ),
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
        group="gpuhealth.gpu",
        expr=f"{m('retired_pages_sbe')} + {m('retired_pages_dbe')} >= {c.RETIRED_PAGES_LIMIT}",
        for_="0m",
        severity="critical",
        action="rma",
        summary="GPU retired pages at DCGM's limit on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' has {{ $value | printf "%.0f" }} retired pages (single- plus double-bit), at or '
        f"above DCGM's health limit of {c.RETIRED_PAGES_LIMIT}.",
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
        group="gpuhealth.gpu",
        expr=f"{m('retired_pages_dbe')} > {c.RETIRED_DBE_PAGES_LIMIT}\nand\n"
        f"increase({m('retired_pages_dbe')}[7d]) > {c.RETIRED_DBE_PAGES_PER_WEEK}",
        for_="0m",
        severity="critical",
        action="rma",
        summary="GPU keeps retiring pages for double-bit errors on {{ $labels.Hostname }}",
        description=WHO + ' has {{ $value | printf "%.0f" }} pages retired for double-bit errors '
        f"(more than {c.RETIRED_DBE_PAGES_LIMIT}) and more than {c.RETIRED_DBE_PAGES_PER_WEEK} new in 7 days.",
        case=Case(
            series=((series(m("retired_pages_dbe"), G0), "14+1x30"),),
            quiet_at="1h",
            fire_at="3h",
            value=17,
            labels=(G0,),
            interval="1h",
        ),
        meaning="DCGM's second page-retirement criterion: more than 15 DBE-retired pages with more than one new "
        "per week. The memory is degrading, not just carrying old scars.",
        check=("`nvidia-smi -q -i <gpu> -d PAGE_RETIREMENT` (Double Bit ECC list).",),
        act=("Drain the node and open an RMA (see GpuRowRemapFailure).",),
    ),
    Alert(
        name="GpuEccSbeRateHigh",
        group="gpuhealth.gpu",
        expr=f"86400 * {SBE_RATE_1H} > {_fmt(c.SBE_PER_DAY_HIGH)}\nand\n"
        f"{SBE_RATE_1H} > {_fmt(c.SBE_RISING_FACTOR)} * {SBE_RATE_1D}",
        for_=c.SBE_FOR,
        severity="warning",
        action="watch",
        summary="Single-bit ECC errors high and rising on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' corrects single-bit ECC errors at {{ $value | printf "%.0f" }} per day over the last '
        f"hour (more than {_fmt(c.SBE_PER_DAY_HIGH)}/day and over {_fmt(c.SBE_RISING_FACTOR)}x its daily average).",
        case=Case(
            # Two quiet hours, then one error every 10 minutes (144/day); rate1d divides by a whole day.
            series=((series(m("ecc_sbe_volatile"), G0), "0x12 1+1x18"),),
            quiet_at="1h",
            fire_at="4h30m",
            value=144,
            labels=(G0,),
            interval="10m",
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
    Alert(
        name="GpuPcieReplayRateHigh",
        group="gpuhealth.gpu",
        expr=f"(60 * {PCIE_REPLAY_RATE} > {_fmt(c.PCIE_REPLAYS_PER_MIN_GEN5)})\nor\n"
        f"(60 * {PCIE_REPLAY_RATE} > {_fmt(c.PCIE_REPLAYS_PER_MIN_GEN4)} and {m('pcie_link_gen')} < 5)",
        for_="10m",
        severity="warning",
        action="demote",
        summary="PCIe replays above DCGM's threshold on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' retransmits {{ $value | printf "%.0f" }} PCIe packets per minute, above DCGM\'s '
        f"health threshold ({_fmt(c.PCIE_REPLAYS_PER_MIN_GEN4)}/min below Gen5, "
        f"{_fmt(c.PCIE_REPLAYS_PER_MIN_GEN5)}/min at Gen5).",
        case=Case(
            # Both GPUs replay 20/min: above the Gen4 threshold, below Gen5's. Only the Gen4 GPU fires.
            series=(
                (series(m("pcie_replay_count"), G0), "0+20x30"),
                (series(m("pcie_link_gen"), G0), "5x30"),
                (series(m("pcie_replay_count"), G1), "0+20x30"),
                (series(m("pcie_link_gen"), G1), "4x30"),
            ),
            quiet_at="5m",
            fire_at="20m",
            value=20,
            labels=(G1,),
        ),
        meaning="The PCIe link retransmits packets: a marginal link (riser, slot, cable, retimer). Bandwidth "
        "drops and the GPU may fall off the bus later.",
        check=(
            "`nvidia-smi -q -i <gpu> | grep -A14 'GPU Link Info'` (replay counters, current/max generation "
            "and width) and `lspci -vvv -s <pci_bus_id> | grep -E 'LnkCap|LnkSta'`.",
            "Whether other GPUs behind the same PCIe switch replay too (the node dashboard).",
        ),
        act=(
            "Demote the GPU; in the next maintenance window reseat the GPU/riser and check the retimer firmware, "
            "then `dcgmi diag -r 3 -i <gpu>` (its PCIe test fails above 8 replays/min).",
        ),
    ),
    Alert(
        name="GpuPcieLinkWidthDowntrained",
        group="gpuhealth.gpu",
        expr=f"{m('pcie_link_width')} < {m('pcie_link_width_max')}",
        for_=c.PCIE_DOWNTRAIN_FOR,
        severity="warning",
        action="demote",
        summary="PCIe link downtrained on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' runs its PCIe link at x{{ $value | printf "%.0f" }}, below its maximum width, '
        f"for {c.PCIE_DOWNTRAIN_FOR}.",
        case=Case(
            series=(
                (series(m("pcie_link_width"), G0), "16x10 8x30"),
                (series(m("pcie_link_width_max"), G0), "16x40"),
            ),
            quiet_at="20m",
            fire_at="30m",
            value=8,
            labels=(G0,),
        ),
        meaning="The link trained to fewer lanes than it has (x16 -> x8): half the host bandwidth. A sign of a "
        "bad slot, riser or connector that often precedes replays and bus drops.",
        check=("`lspci -vvv -s <pci_bus_id> | grep -E 'LnkCap|LnkSta'` (Width x8 (downgraded)).",),
        act=("Demote; reseat the GPU or riser in the next maintenance window.",),
    ),
    Alert(
        name="GpuPcieLinkGenDowntrained",
        group="gpuhealth.gpu",
        expr=f"{m('pcie_link_gen')} < {m('pcie_link_gen_max')}\nand\n"
        f"{m('gpu_util_pct')} > {_fmt(c.PCIE_GEN_BUSY_UTIL_PCT)}",
        for_=c.PCIE_DOWNTRAIN_FOR,
        severity="warning",
        action="watch",
        summary="PCIe link below its generation under load on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' runs PCIe Gen{{ $value | printf "%.0f" }}, below its maximum generation, while busy '
        f"(utilisation above {_fmt(c.PCIE_GEN_BUSY_UTIL_PCT)}%) for {c.PCIE_DOWNTRAIN_FOR}.",
        case=Case(
            # Gen1 at idle is power saving (no alert); Gen1 at 90 % utilisation is a downtrained link.
            series=(
                (series(m("pcie_link_gen"), G0), "1x60"),
                (series(m("pcie_link_gen_max"), G0), "5x60"),
                (series(m("gpu_util_pct"), G0), "0x30 90x30"),
            ),
            quiet_at="29m",
            fire_at="50m",
            value=1,
            labels=(G0,),
        ),
        meaning="Idle GPUs lower their link generation to save power; a busy one should run at the maximum. "
        "Running below it under load means the link could not train at full speed.",
        check=("`nvidia-smi -q -i <gpu> | grep -A14 'GPU Link Info'` while the GPU is busy.",),
        act=("Watch; reseat in the next maintenance window if it persists or replays rise.",),
    ),
    Alert(
        name="GpuNvlinkCrcErrorsHigh",
        group="gpuhealth.gpu",
        expr=f"{NVLINK_CRC_RATE} >= {_fmt(c.NVLINK_CRC_PER_S)}",
        for_="10m",
        severity="warning",
        action="demote",
        summary="NVLink CRC errors above DCGM's threshold on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' sees {{ $value | printf "%.0f" }} NVLink CRC errors per second (all links), at or '
        f"above DCGM's {_fmt(c.NVLINK_CRC_PER_S)}/s.",
        case=Case(
            series=(
                (series(m("nvlink_crc_flit_errors"), G0), "0+600x10 6000+60000x20"),
                (series(m("nvlink_crc_data_errors"), G0), "0x30"),
            ),
            quiet_at="10m",
            fire_at="28m",
            value=1000,
            labels=(G0,),
        ),
        meaning="NVLink retransmits corrupted flits: collective operations (all-reduce) slow down, and XID 74 "
        "may follow.",
        check=("`nvidia-smi nvlink -e -i <gpu>` (per-link error counters) and `nvidia-smi nvlink -s -i <gpu>`.",),
        act=("Demote; reset the GPU(s) of the node in the next window; persistent errors on one link -> RMA.",),
    ),
    Alert(
        name="GpuRecoveryActionRequired",
        group="gpuhealth.gpu",
        expr=f"{m('recovery_action')} > 0",
        for_="1m",
        severity="critical",
        action="drain",
        summary="The driver asks for a GPU recovery on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' reports recovery action {{ $value | printf "%.0f" }} '
        "(1 reset, 2 reboot, 3 drain P2P, 4 drain and reset).",
        case=Case(
            series=((series(m("recovery_action"), G0), "0x3 1x5"),),
            quiet_at="3m",
            fire_at="6m",
            value=1,
            labels=(G0,),
        ),
        meaning="The driver (R550+) decided the GPU needs a reset or the node a reboot to recover from an error.",
        check=("`nvidia-smi -q -i <gpu> | grep -i -A2 recovery` and the kernel log for the XID that caused it.",),
        act=("Drain the node and do what the code asks: reset the GPU (1, 4) or reboot the node (2).",),
    ),
    Alert(
        name="GpuLost",
        group="gpuhealth.gpu",
        expr="gpuhealth_gpu_lost == 1",
        for_="1m",
        severity="critical",
        action="drain",
        summary="GPU fell off the bus on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + " stopped answering (NVML: GPU is lost, XID 79); its other metrics are gone.",
        case=Case(
            series=((series("gpuhealth_gpu_lost", G0), "0x3 1x5"),),
            quiet_at="3m",
            fire_at="6m",
            value=1,
            labels=(G0,),
        ),
        meaning="The GPU disappeared from the PCIe bus. Every job on it has failed; the node needs a reboot "
        "(often a power cycle). Falling off the bus repeatedly is an RMA sign.",
        check=(
            "`nvidia-smi` (the GPU is missing or shows ERR!), `dmesg -T | grep -i -E 'xid|fallen off'`.",
            'How often it happened before: `gpuhealth_xid_errors_total{xid="79"}` and the API\'s history.',
        ),
        act=("Drain the node, power-cycle it, run `dcgmi diag -r 3` before resuming; RMA if it repeats.",),
    ),
    Alert(
        name="GpuCountDropped",
        group="gpuhealth.gpu",
        expr="gpuhealth_gpus < max_over_time(gpuhealth_gpus[1d])",
        for_="5m",
        severity="warning",
        action="drain",
        summary="Fewer GPUs answering on {{ $labels.instance }}",
        description='{{ $labels.instance }} answers with {{ $value | printf "%.0f" }} GPU(s), fewer than it had '
        "in the last day.",
        case=Case(
            series=((series("gpuhealth_gpus", {"job": "gpuhealth", "instance": "node-a:9400"}), "8x10 7x10"),),
            quiet_at="9m",
            fire_at="18m",
            value=7,
            labels=({"job": "gpuhealth", "instance": "node-a:9400"},),
        ),
        meaning="A GPU the node had during the last day no longer answers (lost, or not enumerated after a "
        "reboot or driver reload).",
        check=("`nvidia-smi -L` on the node; GpuLost names the GPU when the collector still knows it.",),
        act=("Drain the node and reboot it; if the GPU stays missing, reseat or RMA it.",),
    ),
)

# --- XID by severity class (REFERENCE.md's table) ---
XID_CODE = "XID {{ $labels.xid }}"
X48 = gpu_labels(0, xid="48")
XID_ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuXidErrors",
        group="gpuhealth.xid",
        expr=f"{XID_INCREASE}\nor on ({', '.join(c.GPU_KEY)})\n({m('xid')} != 0 and changes({m('xid')}[5m]) > 0)",
        for_="0m",
        severity="critical",
        action="watch",
        summary="XID error on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + " reported XID errors in the last 5m (xid={{ $labels.xid }}, "
        'value {{ $value | printf "%.0f" }}: events for gpuhealth\'s counter, the last code for '
        "dcgm-exporter's gauge).",
        case=Case(
            # The counter series does not exist before the first XID: absence must not fire, appearance must.
            series=((series(XID_COUNTER, gpu_labels(0, xid="13")), "_x10 1x10"),),
            quiet_at="5m",
            fire_at="12m",
            value=1,
            labels=(gpu_labels(0, xid="13"),),
        ),
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
        group="gpuhealth.xid",
        expr=f'{XID_INCREASE}{{xid=~"{_regex(c.XID_DRAIN)}"}}',
        for_="0m",
        severity="critical",
        action="drain",
        summary="{{ $labels.Hostname }} GPU {{ $labels.gpu }} needs a reset after XID {{ $labels.xid }}",
        description=WHO + f' reported {XID_CODE} ({{{{ $value | printf "%.0f" }}}} in 5m), a class that needs a GPU '
        f"reset or reboot ({', '.join(c.XID_DRAIN)}).",
        case=Case(
            series=(
                (series(XID_COUNTER, gpu_labels(0, xid="43")), "1x20"),
                (series(XID_COUNTER, X48), "_x10 1x10"),
            ),
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
        group="gpuhealth.xid",
        expr=f'{XID_INCREASE}{{xid=~"{_regex(c.XID_RMA)}"}}\nor\n'
        f'{XID_COUNTER}{{xid=~"{_regex(c.XID_RMA_REPEATED)}"}} >= {c.XID_RMA_REPEATS}',
        for_="0m",
        severity="critical",
        action="rma",
        summary="{{ $labels.Hostname }} GPU {{ $labels.gpu }} is an RMA candidate (XID {{ $labels.xid }})",
        description=WHO + f' reported {XID_CODE} ({{{{ $value | printf "%.0f" }}}}): XID {", ".join(c.XID_RMA)} '
        f"(memory repair failed) or XID {'/'.join(c.XID_RMA_REPEATED)} at least {c.XID_RMA_REPEATS} times.",
        case=Case(
            series=((series(XID_COUNTER, X48), "1x3 2x3 3x3"),),
            quiet_at="7m",
            fire_at="9m",
            value=3,
            labels=(X48,),
        ),
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
        group="gpuhealth.xid",
        expr=f'{XID_INCREASE}{{xid=~"{_regex(c.XID_SBE_RATE)}"}}',
        for_="0m",
        severity="warning",
        action="watch",
        summary="Driver reports a high single-bit ECC rate on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + " reported XID 92 (high single-bit ECC error rate).",
        case=Case(
            series=((series(XID_COUNTER, gpu_labels(0, xid="92")), "_x5 1x5"),),
            quiet_at="4m",
            fire_at="7m",
            value=1,
            labels=(gpu_labels(0, xid="92"),),
        ),
        meaning="The driver itself judged the corrected-error rate high (XID 92).",
        check=("As GpuEccSbeRateHigh: `nvidia-smi -q -i <gpu> -d ECC,ROW_REMAPPER`.",),
        act=("Watch; follow GpuEccSbeRateHigh.",),
    ),
    Alert(
        name="GpuXidApplicationRepeated",
        group="gpuhealth.xid",
        expr=xid_events(c.XID_APPLICATION, "1h", c.XID_APPLICATION_REPEATS),
        for_="0m",
        severity="warning",
        action="watch",
        summary="XID {{ $labels.xid }} repeats on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + f' reported {XID_CODE} {{{{ $value | printf "%.0f" }}}} times in 1h. XID '
        f"{', '.join(c.XID_APPLICATION)} are usually the application's fault, but not over and over on one GPU.",
        case=Case(
            series=((series(XID_COUNTER, gpu_labels(0, xid="13")), "_x5 1 2 2 3x5"),),
            quiet_at="7m",
            fire_at="9m",
            value=3,
            labels=(gpu_labels(0, xid="13"),),
        ),
        meaning="13 graphics engine exception, 31 memory page fault, 94 contained ECC error: one occurrence is "
        "a job's problem; the same code again and again on one GPU (and not on its neighbours) is the GPU's.",
        check=(
            "Whether different jobs hit it (`journalctl -k | grep -i 'NVRM: Xid'` shows the pid/process).",
            "`dcgmi diag -r 3 -i <gpu>` when the GPU is free.",
        ),
        act=("Watch; if the diagnostic fails or the errors follow the GPU across jobs, drain and diagnose.",),
    ),
)

# --- collector and service health ---
_collector = {"job": "gpuhealth", "instance": "node-a:9400"}
_service = {"job": "gpuhealth-service", "instance": "gpuhealth:8080"}
HEALTH_ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuCollectorDown",
        group="gpuhealth.collector",
        expr=f"up{{{c.COLLECTOR_SELECTOR}}} == 0",
        for_="5m",
        severity="warning",
        action="watch",
        summary="gpuhealth collector down on {{ $labels.instance }}",
        description="Prometheus cannot scrape {{ $labels.instance }} (job {{ $labels.job }}) for 5m: "
        "its GPUs are unwatched.",
        case=Case(
            series=((series("up", _collector), "1x5 0x10"),),
            quiet_at="8m",
            fire_at="12m",
            value=0,
            labels=(_collector,),
        ),
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
        group="gpuhealth.collector",
        expr=f"gpuhealth_collector_success{{{c.SAMPLER_SELECTOR}}} == 0",
        for_="5m",
        severity="warning",
        action="watch",
        summary="gpuhealth collector {{ $labels.collector }} failing on {{ $labels.instance }}",
        description="The {{ $labels.collector }} collector on {{ $labels.instance }} has failed for 5m; "
        "its metrics are missing or old.",
        case=Case(
            series=((series("gpuhealth_collector_success", {**_collector, "collector": "sample"}), "1x5 0x10"),),
            quiet_at="8m",
            fire_at="12m",
            value=0,
            labels=({**_collector, "collector": "sample"},),
        ),
        meaning="The exporter answers but cannot read the GPUs (NVML/DCGM errors, driver mismatch after an upgrade).",
        check=("The collector's log: `journalctl -u gpuhealth-collect -n 100`; `nvidia-smi` on the node.",),
        act=("Fix the driver/NVML problem (a reboot after a driver upgrade), then restart the collector.",),
    ),
    Alert(
        name="GpuCollectorStale",
        group="gpuhealth.collector",
        expr=f"gpuhealth_sample_age_seconds{{{c.SAMPLER_SELECTOR}}} > {c.SAMPLE_STALE_S}",
        for_="2m",
        severity="warning",
        action="watch",
        summary="gpuhealth collector serves stale samples on {{ $labels.instance }}",
        description='The newest GPU sample on {{ $labels.instance }} is {{ $value | printf "%.0f" }} s old '
        f"(more than {c.SAMPLE_STALE_S} s): sampling is stalled.",
        case=Case(
            series=((series("gpuhealth_sample_age_seconds", _collector), "5x5 130+60x10"),),
            quiet_at="6m",
            fire_at="8m",
            value=250,
            labels=(_collector,),
        ),
        meaning="The sampler thread hangs, usually in an NVML call to a GPU in a bad state; `/metrics` still "
        "answers with the last snapshot and `/healthz` answers 503.",
        check=("`curl -s http://<instance>/healthz`; `nvidia-smi` (does it hang too?); the kernel log for XIDs.",),
        act=("A hung NVML usually means a GPU needs a reset: drain the node and reset or reboot.",),
    ),
    Alert(
        name="GpuHealthServiceDown",
        group="gpuhealth.collector",
        expr=f"up{{{c.SERVICE_SELECTOR}}} == 0",
        for_="5m",
        severity="warning",
        action="watch",
        summary="gpuhealth service down ({{ $labels.instance }})",
        description="Prometheus cannot scrape the gpuhealth service at {{ $labels.instance }} for 5m: no risk "
        "scores, decisions or webhook.",
        case=Case(
            series=((series("up", _service), "1x5 0x10"),),
            quiet_at="8m",
            fire_at="12m",
            value=0,
            labels=(_service,),
        ),
        meaning="`gpuhealth serve` is down or unreachable; decisions stop updating and Alertmanager's webhook "
        "deliveries fail.",
        check=("`systemctl status gpuhealth-serve`; `curl -s http://<instance>/healthz`.",),
        act=("Restart the service; check its database (GpuHealthStoreDown).",),
    ),
    Alert(
        name="GpuHealthStoreDown",
        group="gpuhealth.collector",
        expr="gpuhealth_store_up == 0",
        for_="5m",
        severity="warning",
        action="watch",
        summary="gpuhealth cannot reach its database ({{ $labels.instance }})",
        description="The gpuhealth service at {{ $labels.instance }} has had no database for 5m; samples are "
        "buffered in memory and dropped when the buffer fills.",
        case=Case(
            series=((series("gpuhealth_store_up", _service), "1x5 0x10"),),
            quiet_at="8m",
            fire_at="12m",
            value=0,
            labels=(_service,),
        ),
        meaning="SQLite/PostgreSQL is unreachable or failing.",
        check=("The service log; `pg_isready -h <db host>` for PostgreSQL; free disk space for SQLite.",),
        act=("Restore the database; the service reconnects by itself.",),
    ),
    Alert(
        name="GpuHealthDroppingSamples",
        group="gpuhealth.collector",
        expr="increase(gpuhealth_buffer_dropped_samples_total[10m]) > 0",
        for_="0m",
        severity="warning",
        action="watch",
        summary="gpuhealth drops samples ({{ $labels.instance }})",
        description='The gpuhealth service at {{ $labels.instance }} dropped {{ $value | printf "%.0f" }} samples '
        "in 10m: its buffer is full while the database is down.",
        case=Case(
            series=((series("gpuhealth_buffer_dropped_samples_total", _service), "0x10 100+100x10"),),
            quiet_at="9m",
            fire_at="20m",
            value=1000,
            labels=(_service,),
        ),
        meaning="History is being lost: the scores will miss these samples.",
        check=("GpuHealthStoreDown; the `buffer_samples` setting.",),
        act=("Restore the database; raise GPUHEALTH_BUFFER_SAMPLES if outages are expected to be long.",),
    ),
    Alert(
        name="GpuHealthScoringStale",
        group="gpuhealth.collector",
        expr=f"time() - gpuhealth_score_last_run_timestamp_seconds > {c.SCORE_STALE_S}",
        for_="10m",
        severity="warning",
        action="watch",
        summary="gpuhealth has not scored GPUs for a while ({{ $labels.instance }})",
        description='The gpuhealth service at {{ $labels.instance }} last scored {{ $value | printf "%.0f" }} s ago '
        f"(more than {c.SCORE_STALE_S} s): risks and decisions are stale.",
        case=Case(
            series=((series("gpuhealth_score_last_run_timestamp_seconds", _service), "0x200"),),
            quiet_at="30m",
            fire_at="1h",
            value=3600,
            labels=(_service,),
        ),
        meaning="The scoring loop stopped or keeps failing (no data, model file missing, database down).",
        check=("The service log (search for `score`); `curl -s http://127.0.0.1:8080/v1/gpus | head`.",),
        act=("Fix the cause in the log and restart the service.",),
    ),
    Alert(
        name="GpuHealthPullFailing",
        group="gpuhealth.collector",
        expr="increase(gpuhealth_pull_failures_total[15m]) > 0 and increase(gpuhealth_pull_runs_total[15m]) == 0",
        for_="0m",
        severity="warning",
        action="watch",
        summary="gpuhealth cannot pull the fleet from Prometheus ({{ $labels.instance }})",
        description="The gpuhealth service at {{ $labels.instance }} (`serve --source prometheus`) has failed "
        '{{ $value | printf "%.0f" }} pulls in 15m and none succeeded: no new samples are stored or scored.',
        case=Case(
            series=(
                (series("gpuhealth_pull_failures_total", _service), "0x10 1+1x20"),
                (series("gpuhealth_pull_runs_total", _service), "0+1x10 10x20"),
            ),
            quiet_at="20m",
            fire_at="28m",
            value=15,
            labels=(_service,),
        ),
        meaning="Fleet mode is blind: Prometheus is unreachable or refuses the queries, or the database is down. "
        "Nothing is lost yet: the next successful pull catches up, as far back as `--backfill`.",
        check=(
            "The service log (search for `pull from Prometheus failed`); "
            "`curl -s http://127.0.0.1:8080/healthz`; `curl -s <prometheus>/-/ready`.",
            "GpuHealthStoreDown, if the database is the cause.",
        ),
        act=("Restore Prometheus or the database; the service pulls again by itself.",),
    ),
)

# --- prediction and probes ---
RISK = "gpuhealth_risk"
P_RISK = service_labels(0, mode="overall")
PREDICTION_ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuRiskWatch",
        group="gpuhealth.prediction",
        expr=f'{RISK}{{mode="overall"}} >= {_fmt(c.RISK_WATCH)}',
        for_=c.RISK_FOR,
        severity="info",
        action="watch",
        summary="GPU failure risk elevated on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
        description=WHO + ' has a predicted failure risk of {{ $value | printf "%.2f" }} '
        f"(watch at {_fmt(c.RISK_WATCH)}).",
        case=Case(
            series=((series(RISK, P_RISK), "0.1x10 0.45x30"),),
            quiet_at="20m",
            fire_at="30m",
            value=0.45,
            labels=(P_RISK,),
        ),
        meaning="The model's calibrated probability that this GPU fails within 7 days passed the watch threshold "
        "(a policy choice, GPUHEALTH_WATCH_THRESHOLD).",
        check=(
            "The reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>` (risk per mode and what drives it).",
            "The GPU detail dashboard, panel *Risk per mode*.",
        ),
        act=("Watch: nothing to do now; the alert escalates to GpuRiskDemote if the risk keeps rising.",),
    ),
    Alert(
        name="GpuRiskDemote",
        group="gpuhealth.prediction",
        expr=f'{RISK}{{mode="overall"}} >= {_fmt(c.RISK_DEMOTE)}',
        for_=c.RISK_FOR,
        severity="warning",
        action="demote",
        summary="GPU failure risk high on {{ $labels.Hostname }} GPU {{ $labels.gpu }}: demote",
        description=WHO + ' has a predicted failure risk of {{ $value | printf "%.2f" }} '
        f"(demote at {_fmt(c.RISK_DEMOTE)}): interruptible, checkpointed work only.",
        case=Case(
            series=((series(RISK, P_RISK), "0.5x10 0.82x30"),),
            quiet_at="20m",
            fire_at="30m",
            value=0.82,
            labels=(P_RISK,),
        ),
        meaning="The product brief's 'warning': risk > 0.7. The GPU should run only interruptible, checkpointed "
        "training, never latency-critical inference, and be diagnosed in the next maintenance window.",
        check=("The reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`.",),
        act=("Demote the GPU's node (see below) and schedule `dcgmi diag -r 3 -i <gpu>`.",),
    ),
    Alert(
        name="GpuDecisionDrain",
        group="gpuhealth.prediction",
        expr='gpuhealth_decision{decision="drain"} == 1',
        for_="1m",
        severity="critical",
        action="drain",
        summary="gpuhealth decided to drain {{ $labels.Hostname }} (GPU {{ $labels.gpu }})",
        description=WHO + " has the decision `drain`: an imminent failure signal (off the bus, uncontained ECC, "
        "a remap waiting for a reset).",
        case=Case(
            series=(
                (series("gpuhealth_decision", service_labels(0, decision="drain")), "0x5 1x5"),
                (series("gpuhealth_decision", service_labels(0, decision="ok")), "1x5 0x5"),
            ),
            quiet_at="5m",
            fire_at="8m",
            value=1,
            labels=(service_labels(0, decision="drain"),),
        ),
        meaning="gpuhealth's policy turned imminent signals into a drain decision.",
        check=("The reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`.",),
        act=("Drain the node (see below), then follow the reason's own runbook.",),
    ),
    Alert(
        name="GpuDecisionRma",
        group="gpuhealth.prediction",
        expr='gpuhealth_decision{decision="rma"} == 1',
        for_="1m",
        severity="critical",
        action="rma",
        summary="gpuhealth decided {{ $labels.Hostname }} GPU {{ $labels.gpu }} needs an RMA",
        description=WHO + " meets NVIDIA's documented RMA criteria (remap failure, retired-page limit, repeated "
        "XID 48/79).",
        case=Case(
            series=((series("gpuhealth_decision", service_labels(0, decision="rma")), "0x5 1x5"),),
            quiet_at="5m",
            fire_at="8m",
            value=1,
            labels=(service_labels(0, decision="rma"),),
        ),
        meaning="The rule engine (not the model) found an RMA criterion.",
        check=("The reasons: `curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`; `dcgmi diag -r 3 -i <gpu>`.",),
        act=("Drain the node and open an RMA (see GpuRowRemapFailure for what to attach).",),
    ),
    Alert(
        name="GpuProbeFailed",
        group="gpuhealth.prediction",
        expr='gpuhealth_probe_passed{test=~"gemm|memtest"} == 0',
        for_="0m",
        severity="critical",
        action="drain",
        summary="GPU computed wrong results in the {{ $labels.test }} probe on {{ $labels.Hostname }}",
        description=WHO + " failed the {{ $labels.test }} probe: its results did not match the reference "
        "(silent data corruption).",
        case=Case(
            series=((series("gpuhealth_probe_passed", gpu_labels(0, test="gemm")), "1x5 0x5"),),
            quiet_at="4m",
            fire_at="7m",
            value=0,
            labels=(gpu_labels(0, test="gemm"),),
        ),
        meaning="A verified GEMM or memory test produced wrong data. A GPU that computes wrong results "
        "silently poisons training runs; it must not take work.",
        check=(
            "The probe's errors: `gpuhealth_probe_errors` on the GPU detail dashboard; rerun `dcgmi diag -r 3 "
            "-i <gpu>` (or `gpu-burn`) to confirm.",
        ),
        act=("Drain the node; if the failure repeats after a reset, RMA the GPU.",),
    ),
    Alert(
        name="GpuProbeDegraded",
        group="gpuhealth.prediction",
        expr='gpuhealth_probe_passed{test=~"bandwidth|pcie"} == 0',
        for_="0m",
        severity="warning",
        action="demote",
        summary="GPU below expected speed in the {{ $labels.test }} probe on {{ $labels.Hostname }}",
        description=WHO + " failed the {{ $labels.test }} probe (bandwidth below the model's expectation).",
        case=Case(
            series=((series("gpuhealth_probe_passed", gpu_labels(0, test="pcie")), "1x5 0x5"),),
            quiet_at="4m",
            fire_at="7m",
            value=0,
            labels=(gpu_labels(0, test="pcie"),),
        ),
        meaning="Memory or host-link bandwidth is below what the model should deliver: a downtrained link, "
        "throttling, or degraded memory.",
        check=("`gpuhealth_probe_ratio` (measured / expected) on the GPU detail dashboard; the PCIe link panel.",),
        act=("Demote; check link width/generation and throttling, reseat in the next maintenance window.",),
    ),
)

ALERTS: tuple[Alert, ...] = GPU_ALERTS + XID_ALERTS + HEALTH_ALERTS + PREDICTION_ALERTS
GROUPS: tuple[str, ...] = ("gpuhealth.gpu", "gpuhealth.xid", "gpuhealth.collector", "gpuhealth.prediction")

"""Operating conditions (the product brief's standard alerts): memory use, temperatures, clock slowdown."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, series
from alerts.rulesets.common import G0, GROUP_GPU, HOST, ON_GPU, VALUE, WHO, fmt, label, m, value
from alerts.rulesets.records import FB_USED_RATIO


def _temp_expr() -> str:
    """Each model above its own maximum operating temperature, others above the default."""
    by_limit: dict[float, list[str]] = {}
    for pattern, limit in c.TEMP_MAX_OPERATING_C.items():
        by_limit.setdefault(limit, []).append(pattern)
    known = "|".join(c.TEMP_MAX_OPERATING_C)
    temp = m("gpu_temp_c")
    parts = [f'{temp}{{modelName=~"{"|".join(pats)}"}} > {fmt(limit)}' for limit, pats in sorted(by_limit.items())]
    parts.append(f'{temp}{{modelName!~"{known}"}} > {fmt(c.TEMP_DEFAULT_MAX_C)}')
    return "\nor\n".join(f"({p})" for p in parts)


def _bit_set(metric: str, bit: int) -> str:
    """PromQL: whether `bit` (a power of two) is set in a bitmask gauge."""
    return f"floor({metric} / {bit}) % 2 == 1"


_LIMITS = ", ".join(
    f"{p.removeprefix('NVIDIA ').removesuffix('.*')} {fmt(v)} °C" for p, v in c.TEMP_MAX_OPERATING_C.items()
)
_REASONS = m("clocks_event_reasons")

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuMemoryAlmostFull",
        group=GROUP_GPU,
        expr=f"{FB_USED_RATIO} > {fmt(c.MEMORY_FULL_RATIO)}",
        for_=c.MEMORY_FULL_FOR,
        severity="warning",
        action="watch",
        summary=f"GPU memory almost full on {ON_GPU}",
        description=f"{WHO} uses {value('%.3f')} of its framebuffer memory (more than {fmt(c.MEMORY_FULL_RATIO)} "
        f"for {c.MEMORY_FULL_FOR}); the next allocation may fail.",
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
        group=GROUP_GPU,
        expr=_temp_expr(),
        for_=c.TEMP_FOR,
        severity="critical",
        action="demote",
        summary=f"GPU temperature above its maximum operating temperature on {HOST}",
        description=f"{WHO} ({label('modelName')}) is at {VALUE} °C, above its model's maximum operating "
        f"temperature ({_LIMITS}; others {fmt(c.TEMP_DEFAULT_MAX_C)} °C) for {c.TEMP_FOR}.",
        # An H100 at 86 C is inside its limit (87) though above the default (85): per-model thresholds.
        case=Case.single(m("gpu_temp_c"), G0, "86x5 88x5", quiet_at="4m", fire_at="9m", value=88),
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
        group=GROUP_GPU,
        expr=f"{m('memory_temp_c')} > {fmt(c.MEMORY_TEMP_MAX_C)}",
        for_=c.TEMP_FOR,
        severity="critical",
        action="demote",
        summary=f"GPU memory (HBM) above {fmt(c.MEMORY_TEMP_MAX_C)} °C on {HOST}",
        description=f"{WHO} has its HBM at {VALUE} °C, above the {fmt(c.MEMORY_TEMP_MAX_C)} °C memory maximum, "
        f"for {c.TEMP_FOR}.",
        case=Case.single(m("memory_temp_c"), G0, "90x5 97x5", quiet_at="4m", fire_at="9m", value=97),
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
        group=GROUP_GPU,
        expr=f"{_REASONS}\nand\n(({_bit_set(_REASONS, 64)}) or ({_bit_set(_REASONS, 8)}))",
        for_="10m",
        severity="warning",
        action="watch",
        summary=f"GPU clocks held down by hardware slowdown on {ON_GPU}",
        description=f"{WHO} reports clock event reasons {VALUE} (bit 0x40 hardware thermal slowdown or 0x8 "
        "hardware slowdown set) for 10m: it runs slower than its peers.",
        # 0x20 software thermal is normal boost management; 0x40 | 0x4 = 68 is a hardware thermal slowdown.
        case=Case.single(_REASONS, G0, "32x12 68x15", quiet_at="11m", fire_at="25m", value=68),
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
)

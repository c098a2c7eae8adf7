"""The GPU's links: PCIe replays and downtrained PCIe links, NVLink CRC errors."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, series
from alerts.rulesets.common import G0, G1, GROUP_GPU, ON_GPU, VALUE, WHO, fmt, m
from alerts.rulesets.records import NVLINK_CRC_RATE, PCIE_REPLAY_RATE

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuPcieReplayRateHigh",
        group=GROUP_GPU,
        expr=f"(60 * {PCIE_REPLAY_RATE} > {fmt(c.PCIE_REPLAYS_PER_MIN_GEN5)})\nor\n"
        f"(60 * {PCIE_REPLAY_RATE} > {fmt(c.PCIE_REPLAYS_PER_MIN_GEN4)} and {m('pcie_link_gen')} < 5)",
        for_="10m",
        severity="warning",
        action="demote",
        summary=f"PCIe replays above DCGM's threshold on {ON_GPU}",
        description=f"{WHO} retransmits {VALUE} PCIe packets per minute, above DCGM's health threshold "
        f"({fmt(c.PCIE_REPLAYS_PER_MIN_GEN4)}/min below Gen5, {fmt(c.PCIE_REPLAYS_PER_MIN_GEN5)}/min at Gen5).",
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
        group=GROUP_GPU,
        expr=f"{m('pcie_link_width')} < {m('pcie_link_width_max')}",
        for_=c.PCIE_DOWNTRAIN_FOR,
        severity="warning",
        action="demote",
        summary=f"PCIe link downtrained on {ON_GPU}",
        description=f"{WHO} runs its PCIe link at x{VALUE}, below its maximum width, for {c.PCIE_DOWNTRAIN_FOR}.",
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
        group=GROUP_GPU,
        expr=f"{m('pcie_link_gen')} < {m('pcie_link_gen_max')}\nand\n"
        f"{m('gpu_util_pct')} > {fmt(c.PCIE_GEN_BUSY_UTIL_PCT)}",
        for_=c.PCIE_DOWNTRAIN_FOR,
        severity="warning",
        action="watch",
        summary=f"PCIe link below its generation under load on {ON_GPU}",
        description=f"{WHO} runs PCIe Gen{VALUE}, below its maximum generation, while busy "
        f"(utilisation above {fmt(c.PCIE_GEN_BUSY_UTIL_PCT)}%) for {c.PCIE_DOWNTRAIN_FOR}.",
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
        group=GROUP_GPU,
        expr=f"{NVLINK_CRC_RATE} >= {fmt(c.NVLINK_CRC_PER_S)}",
        for_="10m",
        severity="warning",
        action="demote",
        summary=f"NVLink CRC errors above DCGM's threshold on {ON_GPU}",
        description=f"{WHO} sees {VALUE} NVLink CRC errors per second (all links), at or above DCGM's "
        f"{fmt(c.NVLINK_CRC_PER_S)}/s.",
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
)

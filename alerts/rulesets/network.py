"""The node's InfiniBand/RoCE ports that serve its GPUs (each GPU's rail): down, flapping, erring."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, collector_target, series
from alerts.rulesets.common import GROUP_NETWORK, HOST, VALUE, fmt, label
from core.infiniband import STATE_ACTIVE, metric
from core.labels import HOSTNAME

_PORT = {HOSTNAME: "node-a", **collector_target(), "port": "1"}
RAIL = {**_PORT, "device": "mlx5_0"}
"""The port of the test cases that serves GPU 0 (under its PCIe switch)."""
_OTHER = {**_PORT, "device": "mlx5_1"}
_UNTIED = {**_PORT, "device": "mlx5_9"}
"""A port that serves no GPU (a spare, uncabled): never alerts."""
_TIE = {"gpu": "0", "UUID": "GPU-00000000-0000-4000-8000-000000000000", "affinity": "pcie_switch"}

ON_PORT = f"{HOST} rail {label('device')} port {label('port')}"
"""`node-a rail mlx5_0 port 1` in a summary."""
_SERVES_GPUS = (
    f"and on (instance, device, port)\ngroup by (instance, device, port) ({metric('port_gpu_info')}"
    f"{{{c.SAMPLER_SELECTOR}}})"
)
"""Only ports tied to a GPU (by PCIe switch or NUMA node): a GPU's rail, not a spare port."""


def _increase(suffix: str) -> str:
    return f"increase({metric(suffix)}{{{c.SAMPLER_SELECTOR}}}[1h])"


ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuInfinibandPortDown",
        group=GROUP_NETWORK,
        expr=f"{metric('state_id')}{{{c.SAMPLER_SELECTOR}}} != {STATE_ACTIVE}\n{_SERVES_GPUS}",
        for_=c.IB_PORT_DOWN_FOR,
        severity="warning",
        action="demote",
        summary=f"InfiniBand/RoCE port not active on {ON_PORT}",
        description=f"{ON_PORT}, which serves GPUs of {HOST}, is in state {VALUE} (4 is ACTIVE) for "
        f"{c.IB_PORT_DOWN_FOR}.",
        case=Case(
            series=(
                (series(metric("state_id"), RAIL), "4x10 1x20"),
                (series(metric("state_id"), _OTHER), "4x30"),
                (series(metric("state_id"), _UNTIED), "1x30"),
                (series(metric("port_gpu_info"), {**RAIL, **_TIE}), "1x30"),
                (series(metric("port_gpu_info"), {**_OTHER, **_TIE, "gpu": "1", "affinity": "numa"}), "1x30"),
            ),
            quiet_at="13m",
            fire_at="20m",
            value=1,
            labels=(RAIL,),
        ),
        meaning="The port is not ACTIVE (DOWN, INIT or ARMED): its GPUs' traffic to other nodes goes over fewer "
        "rails or not at all, and NCCL jobs across nodes hang or slow down.",
        check=(
            "`ibstat <device>` or `cat /sys/class/infiniband/<device>/ports/<port>/{state,phys_state}` "
            "(phys_state Polling: no cable or no peer; Disabled: turned off).",
            "`gpuhealth_infiniband_port_gpu_info` names the GPUs this port serves.",
        ),
        act=(
            "Keep multi-node jobs off the node; reseat or replace the cable or transceiver, check the switch port, "
            "then watch the port come back ACTIVE.",
        ),
    ),
    Alert(
        name="GpuInfinibandLinkFlapping",
        group=GROUP_NETWORK,
        expr=f"{_increase('link_downed_total')} > {fmt(c.IB_FLAPS_PER_HOUR)}",
        for_="0m",
        severity="warning",
        action="demote",
        summary=f"InfiniBand/RoCE link flapping on {ON_PORT}",
        description=f"{ON_PORT} went down {VALUE} times in the last hour (more than {fmt(c.IB_FLAPS_PER_HOUR)}).",
        case=Case(
            # One link down (a switch reboot) stays quiet; four in minutes fire.
            series=((series(metric("link_downed_total"), RAIL), "0x10 1x20 2 3 4 5x30"),),
            quiet_at="25m",
            fire_at="40m",
            value=5,
            labels=(RAIL,),
        ),
        meaning="The link trains, fails and retrains: each down drops every queue pair on the port, and NCCL "
        "jobs on the node's GPUs fail or hang. Usually a cable, a transceiver or the switch port.",
        check=(
            "`cat /sys/class/infiniband/<device>/ports/<port>/counters/{link_downed,symbol_error,"
            "link_error_recovery}` and the kernel log (`dmesg | grep -i mlx5`) for the link changes.",
            "Whether the port's peer on the switch flaps too (the fabric manager or UFM).",
        ),
        act=("Keep multi-node jobs off the node; replace the cable or transceiver, or move to another switch port.",),
    ),
    Alert(
        name="GpuInfinibandPortErrorsHigh",
        group=GROUP_NETWORK,
        expr=f"{_increase('symbol_error_total')} + {_increase('port_errors_received_total')}"
        f" > {fmt(c.IB_ERRORS_PER_HOUR)}",
        for_="0m",
        severity="warning",
        action="watch",
        summary=f"InfiniBand/RoCE errors on {ON_PORT}",
        description=f"{ON_PORT} counted {VALUE} symbol and receive errors in the last hour "
        f"(more than {fmt(c.IB_ERRORS_PER_HOUR)}).",
        case=Case(
            series=(
                (series(metric("symbol_error_total"), RAIL), "0x10 0+2x30"),
                (series(metric("port_errors_received_total"), RAIL), "0x40"),
            ),
            quiet_at="12m",
            fire_at="25m",
            value=28,  # 2 a minute from 11m; increase() does not extrapolate below a counter's zero
            labels=(RAIL,),
        ),
        meaning="The link delivers corrupted symbols or packets: retransmissions cut its bandwidth, and such a "
        "link often goes on to flap.",
        check=(
            "`cat /sys/class/infiniband/<device>/ports/<port>/counters/{symbol_error,port_rcv_errors}` twice, "
            "a minute apart; the cable's optical levels (`mlxlink -d <device> -m`).",
        ),
        act=("Watch; replace the cable or transceiver in the next window, sooner if the link starts to flap.",),
    ),
)

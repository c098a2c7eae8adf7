"""The InfiniBand/RoCE port series: names, the sysfs files they come from, the states they encode.

One table for the collector (collector.infiniband), the alert rules and the dashboards. Not in
`core.catalog`: the catalogue is per GPU (each field is read from a GPU backend and becomes a
history column); a port is not a GPU. Names are node_exporter's infiniband collector's suffixes
under our prefix (docs/decisions/0074-infiniband-ports-from-sysfs.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from core.shared_map import SharedMap

NAME = "infiniband"
"""This collector's name in gpuhealth_collector_success{collector}."""
PREFIX = "gpuhealth_infiniband_"
PORT_LABELS = ("device", "port")
"""node_exporter's labels of a port's series."""
RAILS_ATTR = "gpuhealth_ib_rails"
"""The scoring frame's attribute (`DataFrame.attrs`) naming each GPU's rail: GPU UUID -> its ports as
`device/port`, "mlx5_3/1" (several joined by ", "), from the store's GPU records (`store.samples`)."""


def rail_name(ports: Iterable[tuple[str, str]]) -> str:
    """A GPU's rail as its reasons name it: its ports as `device/port`, sorted, joined by ", "."""
    return ", ".join(sorted({f"{d}/{p}" for d, p in ports}))


class Rails(SharedMap):
    """GPU UUID -> its rail's name (`RAILS_ATTR`), read-only and shared with every frame taken."""


COUNTERS: Mapping[str, tuple[str, str]] = {
    # file in counters/ -> (node_exporter's suffix, help); help texts after the IB specification.
    "link_downed": ("link_downed_total", "Times the link failed to recover from an error state and went down."),
    "link_error_recovery": ("link_error_recovery_total", "Times the link recovered from an error state."),
    "symbol_error": ("symbol_error_total", "Minor link errors detected on one or more physical lanes."),
    "port_rcv_errors": ("port_errors_received_total", "Packets with an error received on this port."),
    "port_xmit_discards": (
        "port_discards_transmitted_total",
        "Outbound packets discarded because the port is down or congested.",
    ),
    "excessive_buffer_overrun_errors": (
        "excessive_buffer_overrun_errors_total",
        "Times OverrunErrors consecutive flow control update periods each had an overrun error.",
    ),
    "local_link_integrity_errors": (
        "local_link_integrity_errors_total",
        "Times local physical errors exceeded the LocalPhyErrors threshold.",
    ),
    "port_rcv_remote_physical_errors": (
        "port_receive_remote_physical_errors_total",
        "Packets received marked with the EBP (end of bad packet) delimiter.",
    ),
}
HW_COUNTERS: Mapping[str, tuple[str, str]] = {
    # file in hw_counters/ (mlx5's RDMA counters) -> (node_exporter's suffix, help)
    "out_of_sequence": ("out_of_sequence_packets_received_total", "Out of sequence packets received."),
    "packet_seq_err": ("packet_sequence_errors_total", "NAK sequence error packets received."),
    "local_ack_timeout_err": ("local_ack_timeout_errors_total", "Times a QP's ack timer expired at the sender."),
    "out_of_buffer": ("out_of_buffer_drops_total", "Drops for lack of a WQE on the QP."),
}

STATE_ACTIVE = 4
"""`state` of a port that carries traffic ("4: ACTIVE"; IB specification PortState)."""
PHYS_DISABLED = 3
"""`phys_state` of a port an administrator disabled ("3: Disabled")."""


SUFFIXES = frozenset(
    {"state_id", "physical_state_id", "rate_bytes_per_second", "port_gpu_info"}
    | {s for s, _ in COUNTERS.values()}
    | {s for s, _ in HW_COUNTERS.values()}
)
"""Every port series the collector can export, by suffix."""


def metric(suffix: str) -> str:
    """The /metrics name of a port series (a KeyError here is a typo caught at import)."""
    if suffix not in SUFFIXES:
        raise KeyError(f"no InfiniBand port series {suffix!r}")
    return PREFIX + suffix


def doc_lines() -> list[str]:
    """The section of docs/metrics.md on the port series (`gpuhealth docs metrics`)."""
    gauges = (
        ("state_id", "state", 'The port\'s state: "4: ACTIVE" -> 4 (1 DOWN, 2 INIT, 3 ARMED).'),
        ("physical_state_id", "phys_state", '"5: LinkUp" -> 5 (2 Polling, 3 Disabled, 4 Training).'),
        ("rate_bytes_per_second", "rate", '"400 Gb/sec (4X NDR)" -> 5e10 (bytes per second).'),
    )
    lines = [
        "## InfiniBand and RoCE ports",
        "",
        "Read from `/sys/class/infiniband/<device>/ports/<port>/` at each scrape by `gpuhealth collect`",
        "with a live backend (`--sysfs-root`; `collector/infiniband.py`), labelled `device`, `port` and",
        "`Hostname`. Names are node_exporter's infiniband collector's under the `gpuhealth_infiniband_`",
        "prefix, so both exporters can run on one node without doubling a sum. Counters are raw: a driver",
        "reload resets them and `increase()` handles it. No RDMA device: no series at all.",
        "",
        "| metric | type | sysfs file | help |",
        "|---|---|---|---|",
        *(f"| `{PREFIX}{s}` | gauge | `{file}` | {text} |" for s, file, text in gauges),
        *(f"| `{PREFIX}{s}` | counter | `counters/{file}` | {text} |" for file, (s, text) in COUNTERS.items()),
        *(f"| `{PREFIX}{s}` | counter | `hw_counters/{file}` | {text} |" for file, (s, text) in HW_COUNTERS.items()),
        f"| `{PREFIX}port_gpu_info{{gpu,UUID,affinity}}` | gauge | `device` link, `numa_node` | 1 for each GPU the "
        'port serves: `affinity="pcie_switch"` when their sysfs paths share more than the root port, else '
        '`"numa"` on one NUMA node. |',
        "",
    ]
    return lines

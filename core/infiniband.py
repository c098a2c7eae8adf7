"""The InfiniBand/RoCE port series: names, the sysfs files they come from, the states they encode.

One table for the collector (collector.infiniband), the alert rules and the dashboards. Not in
`core.catalog`: the catalogue is per GPU (each field is read from a GPU backend and becomes a
history column); a port is not a GPU. Names are node_exporter's infiniband collector's suffixes
under our prefix (docs/decisions/, "InfiniBand ports under our own prefix").
"""

from __future__ import annotations

from collections.abc import Mapping

NAME = "infiniband"
"""This collector's name in gpuhealth_collector_success{collector}."""
PREFIX = "gpuhealth_infiniband_"
PORT_LABELS = ("device", "port")
"""node_exporter's labels of a port's series."""

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

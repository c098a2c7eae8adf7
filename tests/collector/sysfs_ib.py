"""A fake sysfs with InfiniBand/RoCE ports, in the formats the kernel writes.

Formats: the kernel's Documentation/ABI/stable/sysfs-class-infiniband (`state` "4: ACTIVE",
`phys_state` "5: LinkUp", `rate` "400 Gb/sec (4X NDR)", one decimal per file in `counters/`)
and NVIDIA's "Understanding mlx5 Linux counters and status parameters" (`hw_counters/`).
The PCI layout is an HGX-like one: a GPU and its NIC under one PCIe switch, and on another
root port a GPU and a NIC that share only their NUMA node. GPU bus ids are tests.collector.helpers'.
"""

from __future__ import annotations

import os
from pathlib import Path

GPU0 = "pci0000:00/0000:00:01.0/0000:15:00.0/0000:16:00.0/0000:18:00.0"
"""GPU 0 (00000000:18:00.0) behind the PCIe switch 0000:15:00.0, NUMA node 0."""
NIC0 = "pci0000:00/0000:00:01.0/0000:15:00.0/0000:16:01.0/0000:17:00.0"
"""mlx5_0, an InfiniBand HCA on GPU 0's switch, NUMA node 0."""
GPU1 = "pci0000:80/0000:80:01.0/0000:19:00.0"
"""GPU 1 (00000000:19:00.0) on a root port of its own, NUMA node 1."""
NIC1 = "pci0000:80/0000:80:02.0/0000:9a:00.0"
"""mlx5_1, a RoCE NIC on another root port, NUMA node 1."""

IB_COUNTERS = {
    "link_downed": "4",
    "link_error_recovery": "2",
    "symbol_error": "17",
    "port_rcv_errors": "3",
    "excessive_buffer_overrun_errors": "0",
    "port_xmit_discards": "9",
    "local_link_integrity_errors": "0",
    "port_rcv_remote_physical_errors": "0",
    "port_rcv_data": "1182301235",  # read by no metric here: present as on real HCAs
}
HW_COUNTERS = {"out_of_sequence": "12", "packet_seq_err": "1", "local_ack_timeout_err": "5", "out_of_buffer": "0"}


def _pci(root: Path, path: str, numa: int) -> Path:
    dev = root / "devices" / path
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text(f"{numa}\n")
    link = root / "bus" / "pci" / "devices" / path.rsplit("/", 1)[1]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(dev, link.parent))
    return dev


def port(root: Path, device: str, n: int = 1) -> Path:
    """The directory of a port (to change its files in a test)."""
    return root / "class" / "infiniband" / device / "ports" / str(n)


def write_port(
    root: Path,
    device: str,
    pci: Path,
    *,
    state: str = "4: ACTIVE",
    phys_state: str = "5: LinkUp",
    rate: str = "400 Gb/sec (4X NDR)",
    counters: dict[str, str] | None = None,
    hw_counters: dict[str, str] | None = None,
) -> Path:
    dev = root / "class" / "infiniband" / device
    dev.mkdir(parents=True, exist_ok=True)
    if not (dev / "device").exists():
        (dev / "device").symlink_to(os.path.relpath(pci, dev))
    p = port(root, device)
    (p / "counters").mkdir(parents=True)
    for name, text in (("state", state), ("phys_state", phys_state), ("rate", rate)):
        (p / name).write_text(text + "\n")
    for name, value in (IB_COUNTERS if counters is None else counters).items():
        (p / "counters" / name).write_text(value + "\n")
    if hw_counters is not None:
        (p / "hw_counters").mkdir()
        for name, value in hw_counters.items():
            (p / "hw_counters" / name).write_text(value + "\n")
    return p


def build(root: Path) -> Path:
    """Two GPUs and two ports: mlx5_0 (IB, on GPU 0's switch, no hw_counters), mlx5_1 (RoCE, NUMA of GPU 1)."""
    _pci(root, GPU0, 0)
    _pci(root, GPU1, 1)
    nic0 = _pci(root, NIC0, 0)
    nic1 = _pci(root, NIC1, 1)
    write_port(root, "mlx5_0", nic0)
    write_port(root, "mlx5_1", nic1, rate="100 Gb/sec (2X HDR)", hw_counters=HW_COUNTERS)
    return root

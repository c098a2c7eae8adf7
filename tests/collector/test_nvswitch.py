"""NVSwitches listed from sysfs (nvml nodes), so the kernel log's SXIDs name their switch there too.

The fake sysfs is an HGX H100 baseboard's PCI functions as the kernel shows them: each device a folder
under devices/pci…, linked from bus/pci/devices/<address>, with `vendor` and `class` as the kernel writes
them ("0x10de\\n", "0x068000\\n"; Documentation/ABI/testing/sysfs-bus-pci). The NVSwitch class is the
nvidia-nvswitch driver's match, PCI_CLASS_BRIDGE_OTHER << 8 (open-gpu-kernel-modules,
kernel-open/nvidia/linux_nvswitch.c); lspci shows those functions as `Bridge [0680]: NVIDIA Corporation`.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.registry import CollectorRegistry

import collector.kernel_log
from collector.kernel_log import KernelLog, KernelLogCollector
from collector.kmsg import KmsgCursor, KmsgReader
from collector.nvswitch import SwitchInfo, SysfsSwitches, list_switches
from core.settings import Settings
from gpuhealth.cli import collect
from tests.collector.helpers import ScriptedBackend, info

RECORDS = Path(__file__).parent / "kmsg" / "xid-records.kmsg"
BOOT = "0f6c1d3e-8a41-4c55-9b7e-2d5f1a0c9e11"

DEVICES = {
    # address: (vendor, class), on an HGX H100 node
    "0000:c3:00.0": ("0x10de", "0x068000"),  # NVSwitch (10de:22a3)
    "0000:c4:00.0": ("0x10de", "0x068000"),
    "0000:c5:00.0": ("0x10de", "0x068000"),
    "0000:18:00.0": ("0x10de", "0x030200"),  # H100 SXM: 3D controller
    "0000:17:00.0": ("0x15b3", "0x020700"),  # ConnectX-7: InfiniBand controller
    "0000:15:00.0": ("0x1000", "0x060400"),  # Broadcom PCIe switch: PCI bridge
    "0000:c2:00.0": ("0x10de", "0x060400"),  # an NVIDIA PCI bridge (0x0604): no NVSwitch driver binds it
}


def fake_sysfs(root: Path, devices: dict[str, tuple[str, str]] = DEVICES) -> Path:
    for address, (vendor, klass) in devices.items():
        dev = root / "devices" / "pci0000:c0" / address
        dev.mkdir(parents=True)
        (dev / "vendor").write_text(vendor + "\n")
        (dev / "class").write_text(klass + "\n")
        link = root / "bus" / "pci" / "devices" / address
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(dev, link.parent))
    return root


def test_sysfs_lists_nvidia_bridge_other_functions_in_pci_order(tmp_path: Path) -> None:
    assert SysfsSwitches(fake_sysfs(tmp_path)).switches() == [
        SwitchInfo("0", "00000000:C3:00.0"),
        SwitchInfo("1", "00000000:C4:00.0"),
        SwitchInfo("2", "00000000:C5:00.0"),
    ]


def test_sysfs_without_switches_or_without_pci_lists_none(tmp_path: Path) -> None:
    gpus_only = {a: vc for a, vc in DEVICES.items() if vc[1] != "0x068000"}
    assert SysfsSwitches(fake_sysfs(tmp_path / "pcie", gpus_only)).switches() == []
    assert SysfsSwitches(tmp_path / "nothing").switches() == []
    (tmp_path / "odd" / "bus" / "pci" / "devices" / "0000:01:00.0").mkdir(parents=True)  # no vendor file
    assert SysfsSwitches(tmp_path / "odd").switches() == []


def test_a_backend_that_cannot_list_switches_falls_back_to_sysfs(tmp_path: Path) -> None:
    root = fake_sysfs(tmp_path)
    assert [s.pci_bus_id for s in list_switches(ScriptedBackend(), root)] == [
        "00000000:C3:00.0",
        "00000000:C4:00.0",
        "00000000:C5:00.0",
    ]
    assert list_switches(ScriptedBackend()) == []  # no sysfs given: none, as before


def test_an_sxid_on_an_nvml_node_names_its_switch_from_sysfs(tmp_path: Path) -> None:
    switches = list_switches(ScriptedBackend(), fake_sysfs(tmp_path))
    kl = KernelLog(KmsgReader(RECORDS), KmsgCursor(None, BOOT), [info(0)], switches=switches)
    kl.poll()
    registry = CollectorRegistry()
    registry.register(KernelLogCollector(kl, dict, "node-a"))
    sxid = {"switch": "nvidia-nvswitch0", "nvswitch": "0", "switch_uuid": "", "pci_bus_id": "00000000:C3:00.0"}
    sxid |= {"Hostname": "node-a", "err_code": "20009", "severity": "non-fatal"}
    assert registry.get_sample_value("gpuhealth_kernel_sxid_errors_total", sxid) == 1.0


def test_collect_gives_the_kernel_log_the_switches_sysfs_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(collector.kernel_log, "attach_kernel_log", lambda *a, **kw: seen.update(kw))
    running = SimpleNamespace(registry=object(), sampler=object())
    nvml_like = ScriptedBackend()
    nvml_like.name = "nvml"
    collect._kernel_log(running, nvml_like, Settings(), "Hostname", fake_sysfs(tmp_path))  # type: ignore[arg-type]
    assert [s.id for s in seen["switches"]] == ["0", "1", "2"]

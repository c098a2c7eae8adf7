"""The driver's XID and SXID lines parsed from real formats (tests/collector/kmsg/ names the sources)."""

from __future__ import annotations

import pytest

from collector.xid_log import UNKNOWN, XidLine, parse_line, pci_key, xid_message


def test_an_xid_line_with_pid_and_name() -> None:
    line = "NVRM: Xid (PCI:0000:41:00): 79, pid=1797828, name=pt_main_thread, GPU has fallen off the bus."
    assert parse_line(line) == XidLine(
        "xid", (0, 0x41, 0), 79, "pid=1797828, name=pt_main_thread, GPU has fallen off the bus."
    )


@pytest.mark.parametrize(
    ("line", "code"),
    [
        # older drivers: no pid, no name
        ("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus", 79),
        ("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception", 13),
        # a record the kernel cut after the code still names the code
        ("NVRM: Xid (PCI:0000:cb:00): 109", 109),
        # dmesg's own prefix in front, as `dmesg` prints it
        ("[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 8", 109),
    ],
)
def test_xid_line_variants(line: str, code: int) -> None:
    parsed = parse_line(line)
    assert parsed is not None and parsed.kind == "xid" and parsed.code == code


def test_an_sxid_line_names_its_switch() -> None:
    parsed = parse_line(
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error"
    )
    assert parsed == XidLine(
        "sxid", (0, 5, 0), 12028, "Non-fatal, Link 32 egress non-posted PRIV error", "nvidia-nvswitch3"
    )
    # the NVSwitch driver prints the code as %05d
    zero = parse_line("nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 01004, Fatal, Link 4 ingress invalid command")
    assert zero is not None and zero.code == 1004


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: Xid (PCI:0000:41",  # cut inside the PCI id
        "NVRM: Xid (PCI:0000:41:00): ",  # cut before the code
        "nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): garbled, Fatal",
        "NVRM: GPU at PCI:0000:41:00: GPU-5ee2e2c9-1f9e-6d7b-9a4c-3d2c1b0a9f8e",
        "NVRM: The NVIDIA GPU 0000:b3:00.0",
        "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE",
    ],
)
def test_lines_that_are_not_a_whole_xid(line: str) -> None:
    assert parse_line(line) is None


def test_pci_ids_in_every_spelling_meet() -> None:
    nvml, xid, sxid = pci_key("00000000:41:00.0"), pci_key("0000:41:00"), pci_key("0000:41:00.0")
    assert nvml == xid == sxid == (0, 0x41, 0)
    assert pci_key("not a bus id") is None


def test_err_msg_from_the_catalogue() -> None:
    assert xid_message(79) == "GPU has fallen off the bus"
    assert xid_message(48) == "Double Bit ECC Error"
    assert xid_message(99999) == UNKNOWN

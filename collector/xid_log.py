"""The NVIDIA driver's XID and NVSwitch SXID lines in the kernel log, parsed.

Line formats (facts, from the driver's own printing and the lines operators post):
- GPU: ``NVRM: Xid (PCI:0000:41:00): 79, pid=1234, name=python3, GPU has fallen off the bus.``
  The PCI id is domain:bus:device without the function; ``pid=``/``name=`` are absent on older
  drivers and read ``pid='<unknown>', name=<unknown>`` when no process is to blame.
- NVSwitch: ``nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress ...``
  (open-gpu-kernel-modules prints the code as ``%05d``, so it may carry leading zeros).

Messages per code come from NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors), in the
short names dcgm-exporter and the catalogue's table use; a code not listed gets "Unknown Error".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

XID_MESSAGES: dict[int, str] = {
    # NVIDIA XID catalogue, "Xid error listing" (docs.nvidia.com/deploy/xid-errors/index.html).
    8: "GPU stopped processing",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link corrected error",
    140: "Unrecovered ECC Error",
    143: "GPU Initialization Failure",
    144: "NVLINK: SAW Error",
    145: "NVLINK: RLW Error",
    149: "NVLINK: NETIR Error",
    154: "GPU Recovery Action Changed",
}
UNKNOWN = "Unknown Error"

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+)(?:,\s*(?P<rest>.*))?$")
_SXID = re.compile(
    r"(?P<dev>nvidia-nvswitch\d+): SXid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+)(?:,\s*(?P<rest>.*))?$"
)
_PCI = re.compile(r"^(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})(?:\.\d)?$")


@dataclass(frozen=True)
class XidLine:
    """One parsed XID (GPU) or SXID (NVSwitch) line."""

    kind: str
    """"xid" or "sxid"."""
    pci: tuple[int, int, int]
    """(domain, bus, device): the function is dropped, as the driver's XID line does."""
    code: int
    detail: str
    """The rest of the line after the code (pid, process, the driver's own words)."""
    device: str = ""
    """The NVSwitch's kernel name (nvidia-nvswitch3) for an SXID; "" for an XID."""


def pci_key(bus_id: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI id in any of the driver's spellings, or None.

    NVML says 00000000:41:00.0, the XID line 0000:41:00, an SXID line 0000:05:00.0.
    """
    m = _PCI.match(bus_id.strip())
    if m is None:
        return None
    return int(m["domain"] or "0", 16), int(m["bus"], 16), int(m["dev"], 16)


def xid_message(code: int) -> str:
    """The XID catalogue's name of `code` (dcgm-exporter's err_msg), or "Unknown Error"."""
    return XID_MESSAGES.get(code, UNKNOWN)


def parse_line(message: str) -> XidLine | None:
    """The XID or SXID in one kernel log message, or None (not one, or cut before its code).

    A line cut after the code (a truncated record) still counts: the code is what is counted.
    """
    if "Xid (PCI:" not in message:
        return None
    for kind, rx in (("sxid", _SXID), ("xid", _XID)):
        m = rx.search(message.rstrip("\r\n"))
        if m is None:
            continue
        key = pci_key(m["pci"])
        if key is None:
            return None
        dev = m.groupdict().get("dev") or ""
        return XidLine(kind, key, int(m["code"]), (m["rest"] or "").strip(), dev)
    return None

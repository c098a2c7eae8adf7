"""Recording rules: rates shared by the alerts and the dashboards (names follow level:metric:operation)."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Record
from alerts.rulesets.common import XID_COUNTER, m
from core.remediation_metrics import TOTAL as REMEDIATIONS

FB_USED_RATIO = "gpu:fb_used:ratio"
SBE_RATE_1H = "gpu:ecc_sbe_errors:rate1h"
SBE_RATE_1D = "gpu:ecc_sbe_errors:rate1d"
PCIE_REPLAY_RATE = "gpu:pcie_replays:rate5m"
NVLINK_CRC_RATE = "gpu:nvlink_crc_errors:rate5m"
XID_INCREASE = "gpu:xid_errors:increase5m"
REMEDIATIONS_ENDED = f"service:remediations:increase{c.REMEDIATION_RMA_WINDOW}"

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
    Record(
        REMEDIATIONS_ENDED,
        f"sum by (remedy, result) (\n  (increase({REMEDIATIONS}[{c.REMEDIATION_RMA_WINDOW}]) > 0)\n  or\n"
        f"  ({REMEDIATIONS} unless {REMEDIATIONS} offset {c.REMEDIATION_RMA_WINDOW})\n)",
        f"Remediations ended per remedy and result in the last {c.REMEDIATION_RMA_WINDOW} (a series new within it "
        "counts whole); replicas' series summed.",
    ),
)

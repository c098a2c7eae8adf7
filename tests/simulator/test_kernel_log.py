"""The simulated kernel log (issue 58): every XID the driver logs, and one NVML's events never deliver."""

from __future__ import annotations

import numpy as np

from collector.xid_log import parse_line, pci_key
from simulator.config import FaultSpec, SimConfig
from simulator.fleet import FleetSim
from simulator.kernel_log import LOG_ONLY_XID, driver_line


def fleet(*faults: str) -> FleetSim:
    f = FleetSim(SimConfig(nodes=2, seed=3))
    f.klog.keep = True
    for text in faults:
        f.inject(FaultSpec.parse(text))
    return f


def test_a_log_only_xid_is_in_the_kernel_log_once_and_never_in_nvmls_events_or_gauge() -> None:
    f = fleet("2:log-xid:1", "9:offbus:0.5")
    events, logged, gauge = [], [], []
    for _ in range(18):  # three hours in ten-minute steps
        f.step(600.0)
        events += f.drain_events()
        logged += f.klog.drain()
        gauge.append(f.values()["xid"][2])
    assert LOG_ONLY_XID == 120
    assert [(i, c) for i, c, _ in logged if i == 2] == [(2, 120)]  # once, at its time, never again
    assert not [e for e in events if e[0] == 2] and set(gauge) == {0.0}  # NVML: no event, the gauge unmoved
    # An XID NVML delivers is logged by the driver too (the GPU that fell off the bus).
    assert [(i, c) for i, c, _ in events] == [(9, 79)] and (9, 79) in [(i, c) for i, c, _ in logged]
    assert not f.failed[2] and not f.lost[2]  # it keeps answering: not a failure


def test_the_log_only_fault_draws_nothing_and_keeps_nothing_unread() -> None:
    a, b = FleetSim(SimConfig(nodes=2, seed=3)), FleetSim(SimConfig(nodes=2, seed=3))
    b.inject(FaultSpec.parse("2:log-xid:0.5"))
    for _ in range(12):
        a.step(600.0)
        b.step(600.0)
    va, vb = a.values(), b.values()
    assert all(np.array_equal(va[k], vb[k], equal_nan=True) for k in va)
    assert b.klog.drain() == []  # nobody reads this fleet's log: nothing kept


def test_the_simulated_line_is_the_drivers_format_and_parses_to_its_gpu() -> None:
    line = driver_line("00000000:41:00.0", 3, 120)
    assert line.startswith("NVRM: Xid (PCI:0000:41:00): 120, pid=100003, name=python3, ")
    x = parse_line(line)
    assert x is not None and x.kind == "xid" and x.code == 120 and x.pci == pci_key("00000000:41:00.0")

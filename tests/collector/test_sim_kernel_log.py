"""A simulated fleet's kernel log (issue 58): XIDs NVML's events miss reach the samples through the
kernel-log reader (collector.kernel_log), counted once; without the log they are not seen at all."""

from __future__ import annotations

from pathlib import Path

from collector.backends.sim import SimBackend
from collector.kernel_log import LogXids
from collector.records import XidIntervals
from collector.run import build_sampling
from core import catalog
from simulator.config import FaultSpec

STEPS = 18
"""Three simulated hours in ten-minute samples; the log-only XID fires at one hour."""


Run = tuple[SimBackend, list[float], dict[str, dict[int, int]], dict[tuple[str, int], int]]
"""The backend, GPU 2's history `xid`, NVML's event counts per GPU, the kernel logs' counts per (host, code)."""


def _run(kernel_log: Path | None, nodes: int = 1) -> Run:
    faults = [FaultSpec.parse("2:log-xid:1")]
    backend = SimBackend(nodes=nodes, gpus_per_node=4, seed=3, step_s=600.0, faults=faults, kernel_log=kernel_log)
    s = build_sampling(backend, list(catalog.select("default")), 10.0)
    intervals = XidIntervals()
    uuid = backend.gpus()[2].uuid
    xids: list[float] = []
    for _ in range(STEPS):
        snap = s.sampler.sample_once()
        rows, _ = intervals.rows(snap)
        xids += [float(r["xid"]) for r in rows if r["gpu_uuid"] == uuid]
    logs = [a for a in s.sampler.augment if isinstance(a, LogXids)]
    counted = {(h, code): n for a in logs for h, kl in a.logs.items() for (_, code), n in kl.xids.items()}
    return backend, xids, {u: dict(c) for u, c in snap.xid_counts.items()}, counted


def test_nvmls_events_never_see_a_log_only_xid(tmp_path: Path) -> None:
    _, xids, events, counted = _run(None)
    assert set(xids) == {0.0}  # the history's xid: nothing on GPU 2
    assert all(120 not in codes for codes in events.values())
    assert counted == {}  # no kernel log read


def test_the_kernel_log_counts_it_once_and_the_history_has_it_once(tmp_path: Path) -> None:
    _, xids, events, counted = _run(tmp_path / "kmsg")
    text = (tmp_path / "kmsg" / "sim-node-00.kmsg").read_text()
    assert ";NVRM: Xid (PCI:0000:38:00): 120, pid=100002, name=python3, " in text  # the driver's line, once
    assert all(120 not in codes for codes in events.values())  # NVML's events still miss it
    assert xids.count(120.0) == 1 and set(xids) == {0.0, 120.0}  # the interval it fired in, once
    assert counted == {("sim-node-00", 120): 1}  # the log's counter (gpuhealth_kernel_xid_errors_total's)


def test_each_node_has_its_own_log_as_pci_ids_repeat_from_node_to_node(tmp_path: Path) -> None:
    backend, xids, _, counted = _run(tmp_path / "kmsg", nodes=2)
    assert xids.count(120.0) == 1 and counted == {("sim-node-00", 120): 1}
    assert backend.gpus()[6].pci_bus_id == backend.gpus()[2].pci_bus_id  # sim-node-01's GPU 2: same slot
    assert (tmp_path / "kmsg" / "sim-node-01.kmsg").read_text() == ""


def test_the_sim_kernel_log_flag_reaches_the_backend(tmp_path: Path) -> None:
    """`--sim-kernel-log DIR` (collect, serve; the demo's is beside its database): a file per node."""
    from core.settings import Settings
    from gpuhealth.cli.backend import BackendFlags, open_from_flags

    flags = BackendFlags(backend="sim", sim_nodes=2, sim_gpus=2, sim_kernel_log=str(tmp_path / "k"))
    backend = open_from_flags(flags, Settings()).backend
    assert isinstance(backend, SimBackend)
    assert sorted(p.name for p in backend.kernel_logs.values()) == ["sim-node-00.kmsg", "sim-node-01.kmsg"]
    assert open_from_flags(BackendFlags(backend="sim"), Settings()).backend.kernel_logs == {}  # type: ignore[attr-defined]

"""The kernel log reader, its cursor across restarts and reboots, and the XID counters it feeds."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest
from prometheus_client.registry import CollectorRegistry

from collector.backends.base import BackendError, XidEvent
from collector.kernel_log import KernelLog, KernelLogCollector, attach_kernel_log
from collector.kmsg import Cursor, KmsgCursor, KmsgReader, load_cursor, parse_record, save_cursor
from collector.nvswitch import SwitchInfo, list_switches
from collector.sampler import Sampler
from tests.collector.helpers import ScriptedBackend, info

RECORDS = Path(__file__).parent / "kmsg" / "xid-records.kmsg"
BOOT = "0f6c1d3e-8a41-4c55-9b7e-2d5f1a0c9e11"


def xid_record(seq: int, gpu_bus: int = 0x18, code: int = 79) -> str:
    return f"4,{seq},{seq * 1000},-;NVRM: Xid (PCI:0000:{gpu_bus:02x}:00): {code}, pid=42, name=python3, text\n"


def kernel_log(log: Path, cursor: Path | None, boot: str = BOOT) -> KernelLog:
    return KernelLog(KmsgReader(log), KmsgCursor(cursor, boot), [info(0), info(1)])


def total(kl: KernelLog) -> int:
    xids, sxids = kl.snapshot()
    return sum(xids.values()) + sum(sxids.values())


def test_records_and_continuation_lines() -> None:
    assert parse_record("4,1001,1843308145,-;NVRM: Xid (PCI:0000:18:00): 79, x\n") is not None
    assert parse_record(" SUBSYSTEM=pci") is None
    assert parse_record("# a comment, with commas") is None
    assert parse_record("garbage without a separator") is None


def test_the_real_formats_file_is_counted_per_gpu_switch_and_code(tmp_path: Path) -> None:
    kl = kernel_log(RECORDS, tmp_path / "cursor")
    assert kl.poll() == 5
    xids, sxids = kl.snapshot()
    assert xids == {((0, 0x18, 0), 79): 1, ((0, 0x19, 0), 13): 1, ((0, 0x19, 0), 109): 1, ((0, 0xCB, 0), 48): 1}
    assert sxids == {("nvidia-nvswitch0", (0, 0xC3, 0), 20009, "non-fatal"): 1}
    assert load_cursor(tmp_path / "cursor") == Cursor(BOOT, 1006)


def test_a_restart_neither_loses_nor_doubles(tmp_path: Path) -> None:
    log, cursor = tmp_path / "kmsg", tmp_path / "cursor"
    log.write_text("".join(xid_record(s) for s in range(1, 6)))
    first = kernel_log(log, cursor)
    assert first.poll() == 5
    first.stop()
    # Down for a while: three more XIDs are logged, then the collector comes back.
    with log.open("a") as f:
        f.write("".join(xid_record(s, 0x19, 13) for s in range(6, 9)))
    second = kernel_log(log, cursor)
    assert second.poll() == 3
    assert second.poll() == 0
    assert total(first) + total(second) == 8
    assert second.snapshot()[0] == {((0, 0x19, 0), 13): 3}


def test_a_new_boot_drops_the_cursor(tmp_path: Path) -> None:
    log, cursor = tmp_path / "kmsg", tmp_path / "cursor"
    save_cursor(cursor, Cursor("an-older-boot", 900))
    # After a reboot the sequence starts again at 0: all of this boot's records are new.
    log.write_text("".join(xid_record(s) for s in range(0, 4)))
    assert kernel_log(log, cursor).poll() == 4
    assert load_cursor(cursor) == Cursor(BOOT, 3)


def test_a_line_cut_mid_write_waits_for_its_end(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    whole = xid_record(1)
    log.write_text(xid_record(0) + whole[:30])
    kl = kernel_log(log, None)
    assert kl.poll() == 1
    with log.open("a") as f:
        f.write(whole[30:])
    assert kl.poll() == 1
    assert total(kl) == 2


def test_interleaved_records_of_other_drivers_and_gpus(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_text(
        xid_record(10, 0x18, 79)
        + " SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n"
        + "6,11,11000,c;mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link DOWN\n"
        + xid_record(12, 0x19, 79)
        + "6,13,13000,+;NVRM: GPU at PCI:0000:19:00: GPU-00000001-test\n"
        + xid_record(14, 0x18, 79)
    )
    kl = kernel_log(log, None)
    assert kl.poll() == 3
    assert kl.snapshot()[0] == {((0, 0x18, 0), 79): 2, ((0, 0x19, 0), 79): 1}


def test_unreadable_log_is_said_once_and_nvml_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def denied(*_: object, **__: object) -> int:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "open", denied)
    kl = kernel_log(Path("/dev/kmsg"), None)
    with caplog.at_level(logging.WARNING, logger="collector.kernel_log"):
        for _ in range(3):
            assert kl.poll() == 0
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "Permission denied" in said[0] and "CAP_SYSLOG" in said[0]
    registry = CollectorRegistry()
    registry.register(KernelLogCollector(kl, lambda: {"GPU-00000000-test": {79: 2}}, "node-a"))
    assert registry.get_sample_value("gpuhealth_kernel_log_readable") == 0.0
    labels = {"gpu": "0", "UUID": "GPU-00000000-test", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3"}
    labels |= {"pci_bus_id": "00000000:18:00.0", "Hostname": "node-a"}
    got = registry.get_sample_value(
        "gpuhealth_kernel_xid_errors_total",
        labels | {"err_code": "79", "err_msg": "GPU has fallen off the bus", "source": "nvml"},
    )
    assert got == 2.0


def test_the_ring_overtaking_the_reader_is_counted_and_reading_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "kmsg"
    log.write_text(xid_record(1) + xid_record(2))
    real_read, calls = os.read, []

    def epipe_once(fd: int, n: int) -> bytes:
        calls.append(fd)
        if len(calls) == 1:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", epipe_once)
    kl = kernel_log(log, None)
    assert kl.poll() == 2
    assert kl.reader.overrun == 1


def test_the_collector_exports_log_counts_with_err_code_and_err_msg(tmp_path: Path) -> None:
    kl = kernel_log(RECORDS, None)
    kl.poll()
    registry = CollectorRegistry()
    # NVML saw the same XID 79: the log is the source while readable, so it is not counted twice.
    registry.register(KernelLogCollector(kl, lambda: {"GPU-00000000-test": {79: 1}}, "node-a"))
    base = {"gpu": "0", "UUID": "GPU-00000000-test", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3"}
    base |= {"pci_bus_id": "00000000:18:00.0", "Hostname": "node-a"}
    fell = {"err_code": "79", "err_msg": "GPU has fallen off the bus"}

    def value(name: str, labels: dict[str, str]) -> float | None:
        return registry.get_sample_value(name, labels)

    name = "gpuhealth_kernel_xid_errors_total"
    assert value(name, base | fell | {"source": "kmsg"}) == 1.0
    assert value(name, base | fell | {"source": "nvml"}) is None
    # An XID of a PCI id no GPU of this backend has keeps its bus id.
    stray = dict.fromkeys(("gpu", "UUID", "device", "modelName"), "")
    stray |= {"pci_bus_id": "00000000:CB:00.0", "Hostname": "node-a"}
    dbe = {"err_code": "48", "err_msg": "Double Bit ECC Error", "source": "kmsg"}
    assert value(name, stray | dbe) == 1.0
    # No switch listed by the backend: the SXID keeps what its line says, the kernel name and bus id.
    sxid = {"switch": "nvidia-nvswitch0", "nvswitch": "", "switch_uuid": "", "pci_bus_id": "00000000:C3:00.0"}
    sxid |= {"Hostname": "node-a", "err_code": "20009", "severity": "non-fatal"}
    assert value("gpuhealth_kernel_sxid_errors_total", sxid) == 1.0
    assert value("gpuhealth_kernel_log_readable", {}) == 1.0


def test_an_sxid_names_the_switch_the_backend_lists_by_its_bus_id() -> None:
    switches = [SwitchInfo("3", "00000000:C3:00.0", "NVSWITCH-0003"), SwitchInfo("4", "00000000:C4:00.0")]
    kl = KernelLog(KmsgReader(RECORDS), KmsgCursor(None, BOOT), [info(0)], switches=switches)
    kl.poll()
    registry = CollectorRegistry()
    registry.register(KernelLogCollector(kl, dict, "node-a"))
    sxid = {"switch": "nvidia-nvswitch0", "nvswitch": "3", "switch_uuid": "NVSWITCH-0003"}
    sxid |= {"pci_bus_id": "00000000:C3:00.0", "Hostname": "node-a", "err_code": "20009", "severity": "non-fatal"}
    assert registry.get_sample_value("gpuhealth_kernel_sxid_errors_total", sxid) == 1.0


def test_switches_come_from_a_backend_that_lists_them() -> None:
    class Lists:
        def switches(self) -> list[SwitchInfo]:
            return [SwitchInfo("0", "00000000:05:00.0")]

    class Fails:
        def switches(self) -> list[SwitchInfo]:
            raise BackendError("nv-hostengine went away")

    assert list_switches(Lists()) == [SwitchInfo("0", "00000000:05:00.0")]
    assert list_switches(Fails()) == [] and list_switches(ScriptedBackend()) == []


def test_attached_to_a_running_collector_the_log_wins_over_nvml(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    backend.events = [XidEvent("GPU-00000000-test", 79, 1.0)]  # NVML saw it too
    sampler = Sampler(backend, 10.0)
    sampler.sample_once()
    registry = CollectorRegistry()
    assert attach_kernel_log(registry, sampler, backend.gpus(), "", "") is None
    log = tmp_path / "kmsg"
    log.write_text(xid_record(7))
    kl = attach_kernel_log(registry, sampler, backend.gpus(), str(log), str(tmp_path / "cursor"))
    assert kl is not None
    kl.poll()
    samples = [s for m in registry.collect() if m.name == "gpuhealth_kernel_xid_errors" for s in m.samples]
    assert [(s.labels["gpu"], s.labels["err_code"], s.labels["source"], s.value) for s in samples] == [
        ("0", "79", "kmsg", 1.0)
    ]


def test_attached_to_a_running_collector_the_log_gives_the_history_its_xid(tmp_path: Path) -> None:
    """An XID only the kernel log has (NVML's events miss 79, 119 and 120: DCGM issue 162) reaches the
    readings the history stores, at the next sample, on a live node as on a simulated one."""
    backend = ScriptedBackend()  # its NVML events: none
    sampler = Sampler(backend, 10.0)
    sampler.sample_once()
    log = tmp_path / "kmsg"
    log.write_text("")
    kl = attach_kernel_log(CollectorRegistry(), sampler, backend.gpus(), str(log), str(tmp_path / "cursor"))
    assert kl is not None
    sampler.sample_once()
    assert [r.values.get("xid") for r in sampler.latest.readings] == [0.0, 0.0]  # the log read, no XID yet
    log.write_text(xid_record(7, gpu_bus=0x18, code=120))
    sampler.sample_once()
    assert [r.values.get("xid") for r in sampler.latest.readings] == [120.0, 0.0]
    assert total(kl) == 1  # the sampler's read and the log's own thread share one cursor: counted once
    kl.poll()
    assert total(kl) == 1

"""InfiniBand/RoCE ports from a fake sysfs (tests/collector/sysfs_ib.py), and the GPUs each serves."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client.registry import CollectorRegistry

from collector import infiniband
from collector.exporter import SelfCollector
from collector.infiniband import InfinibandCollector, read_ports, shares_switch, sysfs_bdf, ties
from collector.run import build_sampling
from core import infiniband as core_ib
from core.labels import HOSTNAME
from gpuhealth.cli.serve import sysfs_root
from tests.collector import sysfs_ib
from tests.collector.helpers import ScriptedBackend, info

P = "gpuhealth_infiniband_"


def _registry(root: Path, n_gpus: int = 2) -> tuple[CollectorRegistry, InfinibandCollector]:
    reg = CollectorRegistry(auto_describe=False)
    ib = InfinibandCollector(root, lambda: [info(i) for i in range(n_gpus)])
    reg.register(ib)
    return reg, ib


def _value(reg: CollectorRegistry, suffix: str, device: str = "mlx5_0") -> float | None:
    return reg.get_sample_value(P + suffix, {"device": device, "port": "1", HOSTNAME: "node-a"})


def test_a_port_in_the_kernels_formats(tmp_path: Path) -> None:
    reg, ib = _registry(sysfs_ib.build(tmp_path))
    assert _value(reg, "state_id") == 4.0 and _value(reg, "physical_state_id") == 5.0
    assert _value(reg, "rate_bytes_per_second") == 400e9 / 8
    assert _value(reg, "rate_bytes_per_second", "mlx5_1") == 100e9 / 8
    assert {
        s: _value(reg, s)
        for s in (
            "link_downed_total", "symbol_error_total", "port_errors_received_total", "link_error_recovery_total",
            "excessive_buffer_overrun_errors_total", "port_discards_transmitted_total",
        )
    } == {
        "link_downed_total": 4.0, "symbol_error_total": 17.0, "port_errors_received_total": 3.0,
        "link_error_recovery_total": 2.0, "excessive_buffer_overrun_errors_total": 0.0,
        "port_discards_transmitted_total": 9.0,
    }  # fmt: skip
    assert _value(reg, "out_of_sequence_packets_received_total", "mlx5_1") == 12.0
    assert ib.statuses()["infiniband"].success


def test_a_port_down(tmp_path: Path) -> None:
    sysfs_ib.build(tmp_path)
    p = sysfs_ib.port(tmp_path, "mlx5_0")
    (p / "state").write_text("1: DOWN\n")
    (p / "phys_state").write_text("3: Disabled\n")
    reg, _ = _registry(tmp_path)
    assert _value(reg, "state_id") == 1.0 and _value(reg, "physical_state_id") == 3.0


def test_a_counter_reset_is_exported_raw(tmp_path: Path) -> None:
    """A driver reload sets the counters back to 0: exported as read, Prometheus's increase() sees a reset."""
    sysfs_ib.build(tmp_path)
    reg, _ = _registry(tmp_path)
    assert _value(reg, "link_downed_total") == 4.0
    (sysfs_ib.port(tmp_path, "mlx5_0") / "counters" / "link_downed").write_text("0\n")
    assert _value(reg, "link_downed_total") == 0.0


def test_without_hw_counters_only_the_ib_counters(tmp_path: Path) -> None:
    reg, _ = _registry(sysfs_ib.build(tmp_path))
    assert _value(reg, "out_of_sequence_packets_received_total", "mlx5_0") is None
    assert _value(reg, "link_downed_total", "mlx5_0") == 4.0


def test_an_unreadable_file_is_one_sample_fewer(tmp_path: Path) -> None:
    sysfs_ib.build(tmp_path)
    counters = sysfs_ib.port(tmp_path, "mlx5_0") / "counters"
    (counters / "symbol_error").unlink()
    (counters / "symbol_error").mkdir()  # reading it raises IsADirectoryError, as an unreadable file would
    (counters / "port_rcv_errors").write_text("garbage\n")
    (sysfs_ib.port(tmp_path, "mlx5_0") / "rate").write_text("\n")
    reg, ib = _registry(tmp_path)
    assert _value(reg, "symbol_error_total") is None and _value(reg, "port_errors_received_total") is None
    assert _value(reg, "rate_bytes_per_second") is None
    assert _value(reg, "link_downed_total") == 4.0 and _value(reg, "symbol_error_total", "mlx5_1") == 17.0
    assert ib.statuses()["infiniband"].success


def test_a_failed_read_is_a_failed_status_not_an_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(root: Path) -> list[infiniband.Port]:
        raise PermissionError(f"{root}/class/infiniband: permission denied")

    monkeypatch.setattr(infiniband, "read_ports", broken)
    reg, ib = _registry(sysfs_ib.build(tmp_path))
    assert _value(reg, "link_downed_total") is None
    assert not ib.statuses()["infiniband"].success


def test_no_rdma_hardware_is_no_data_logged_at_debug(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="collector.infiniband"):
        reg, ib = _registry(tmp_path)
        assert list(reg.collect()) == [] and ib.statuses() == {}
        list(reg.collect())
    msgs = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert msgs == [(logging.DEBUG, f"no InfiniBand/RoCE ports under {tmp_path}: no infiniband series")]


def test_ports_tied_to_gpus_by_pcie_switch_and_numa_node(tmp_path: Path) -> None:
    root = sysfs_ib.build(tmp_path)
    found = {(t.device, t.gpu.index, t.affinity) for t in ties(root, read_ports(root), [info(0), info(1)])}
    assert found == {("mlx5_0", 0, "pcie_switch"), ("mlx5_1", 1, "numa")}
    reg, _ = _registry(root)
    labels = {"device": "mlx5_0", "port": "1", "gpu": "0", "UUID": info(0).uuid, "affinity": "pcie_switch"}
    assert reg.get_sample_value(P + "port_gpu_info", {**labels, HOSTNAME: "node-a"}) == 1.0


def test_a_common_root_port_alone_is_no_switch() -> None:
    a = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"
    assert not shares_switch(a, "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.1")
    assert shares_switch(sysfs_ib.GPU0, sysfs_ib.NIC0)
    assert not shares_switch(sysfs_ib.GPU0, sysfs_ib.GPU0)


@pytest.mark.parametrize(
    ("nvml", "sysfs"),
    [("00000000:41:00.0", "0000:41:00.0"), ("0000:9A:00.1", "0000:9a:00.1"), ("41:00.0", "0000:41:00.0"), ("", None)],
)
def test_bus_ids_as_sysfs_names_them(nvml: str, sysfs: str | None) -> None:
    assert sysfs_bdf(nvml) == sysfs


def test_scrape_health_names_the_infiniband_collector(tmp_path: Path) -> None:
    s = build_sampling(ScriptedBackend(), [], 10.0, sysfs_root=sysfs_ib.build(tmp_path))
    s.sampler.sample_once()
    assert s.registry.get_sample_value("gpuhealth_collector_success", {"collector": "infiniband"}) == 1.0
    assert s.registry.get_sample_value(P + "link_downed_total", {"device": "mlx5_0", "port": "1", HOSTNAME: "node-a"})
    bare = build_sampling(ScriptedBackend(), [], 10.0)
    bare.sampler.sample_once()
    assert bare.registry.get_sample_value("gpuhealth_collector_success", {"collector": "infiniband"}) is None
    assert isinstance(SelfCollector(bare.sampler), SelfCollector)


def test_the_cli_reads_sys_for_live_gpus_only() -> None:
    assert sysfs_root(None, "nvml") == Path("/sys") and sysfs_root(None, "sim") is None
    assert sysfs_root("", "nvml") is None and sysfs_root("/x", "sim") == Path("/x")


def test_every_series_is_named_in_the_shared_table(tmp_path: Path) -> None:
    """The rules and dashboards take their names from core.infiniband: the collector exports exactly those."""
    reg, _ = _registry(sysfs_ib.build(tmp_path))
    exported = {s.name for fam in reg.collect() for s in fam.samples}
    assert exported == {core_ib.metric(s) for s in core_ib.SUFFIXES}
    with pytest.raises(KeyError, match="link_down_total"):
        core_ib.metric("link_down_total")


def test_each_gpu_reading_gains_its_rails_link_downs(tmp_path: Path) -> None:
    """ib_rail_link_downed: the ports tied to the GPU (switch, else NUMA node), summed, in the sample itself."""
    from core.catalog import BY_NAME

    root = sysfs_ib.build(tmp_path)
    (sysfs_ib.port(root, "mlx5_1") / "counters" / "link_downed").write_text("7\n")
    backend = ScriptedBackend(3)  # GPU 2 has no sysfs device: no rail
    s = build_sampling(backend, [BY_NAME["ib_rail_link_downed"]], 10.0, sysfs_root=root)
    snap = s.sampler.sample_once()
    assert [r.values.get("ib_rail_link_downed") for r in snap.readings] == [4.0, 7.0, None]
    assert [r.rail for r in snap.readings] == ["mlx5_0/1", "mlx5_1/1", ""]  # the ports, named for the reasons
    assert s.registry.get_sample_value("gpuhealth_collector_success", {"collector": "infiniband_rails"}) == 1.0
    exported = {
        x.labels["gpu"]: x.value
        for fam in s.registry.collect()
        for x in fam.samples
        if x.name == "gpuhealth_ib_rail_link_downed_total"
    }
    assert exported == {"0": 4.0, "1": 7.0}  # a catalogue field: on /metrics with the GPU's labels
    backend.lost.add(0)
    assert [r.values.get("ib_rail_link_downed") for r in s.sampler.sample_once().readings] == [None, 7.0, None]


def test_a_failed_rail_read_costs_the_values_not_the_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(root: Path) -> list[infiniband.Port]:
        raise OSError("sysfs went away")

    s = build_sampling(ScriptedBackend(), [], 10.0, sysfs_root=sysfs_ib.build(tmp_path))
    monkeypatch.setattr(infiniband, "read_ports", broken)
    snap = s.sampler.sample_once()
    assert snap.status["sample"].success and [r.values["gpu_temp_c"] for r in snap.readings] == [40.0, 41.0]
    assert not snap.status["infiniband_rails"].success and "sysfs went away" in str(
        snap.status["infiniband_rails"].error
    )

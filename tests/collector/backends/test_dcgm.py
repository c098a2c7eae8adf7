"""DcgmBackend without DCGM: binding discovery, blank handling, and reads over fake bindings.

The fakes (fake_dcgm.py) follow the DCGM Python bindings; the sentinels are copied from DCGM's
dcgmvalue.py. Nothing here proves the real bindings behave so: that needs a DCGM node. NVLink links,
the fabric and the NVSwitches: test_dcgm_links.py.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from collector.backends import dcgm as dcgm_mod
from collector.backends.base import Backend, BackendError, BackendUnavailable, XidEvent
from collector.backends.dcgm import (
    XID_FIELD_ID,
    DcgmBackend,
    binding_dirs,
    dcgm_number,
    field_names,
    load_bindings,
    sample_value,
)
from collector.probes import SubprocessProbeRunner
from core.catalog import FIELDS
from tests.collector.backends.fake_dcgm import (
    DCGM_FP64_BLANK,
    DCGM_INT32_BLANK,
    DCGM_INT64_BLANK,
    Engine,
    Sample,
    dcgmvalue,
    make,
)

# --- bindings discovery --------------------------------------------------------------------


def test_missing_bindings_name_every_place_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    std = (str(tmp_path / "std-a" / "bindings" / "python3"), str(tmp_path / "std-b"))
    monkeypatch.setattr(dcgm_mod, "STANDARD_BINDING_DIRS", std)
    monkeypatch.setenv("DCGM_HOME", str(tmp_path / "dcgm-home"))
    with pytest.raises(BackendUnavailable) as exc:
        DcgmBackend("node-01", FIELDS, 10.0)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("DCGM Python bindings not found (looked in DCGM_HOME=")
    home_dir = tmp_path / "dcgm-home" / "bindings" / "python3"
    assert f"DCGM_HOME={tmp_path / 'dcgm-home'} ({home_dir})" in msg
    assert all(d in msg for d in std)
    assert msg.endswith("install datacenter-gpu-manager or use --backend nvml")


def test_binding_dirs_put_dcgm_home_first() -> None:
    dirs = binding_dirs({"DCGM_HOME": "/opt/dcgm"})
    assert dirs[0][1] == Path("/opt/dcgm/bindings/python3")
    assert [p for _, p in dirs[1:]] == [Path(d) for d in dcgm_mod.STANDARD_BINDING_DIRS]
    assert [p for _, p in binding_dirs({})] == [Path(d) for d in dcgm_mod.STANDARD_BINDING_DIRS]


def test_broken_bindings_are_unavailable_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_bindings prepends the folder
    (tmp_path / "pydcgm.py").write_text("raise ImportError('libdcgm.so.4: cannot open')\n")
    with pytest.raises(BackendUnavailable, match=r"do not import \(ImportError: libdcgm"):
        load_bindings([("test", tmp_path)])


# --- value mapping -------------------------------------------------------------------------


def test_field_ids_map_every_catalogue_field_with_a_dcgm_id() -> None:
    names = field_names(FIELDS)
    expected = {f.dcgm_id: f.name for f in FIELDS if f.dcgm_id is not None}
    assert names == expected
    assert names[XID_FIELD_ID] == "xid" and names[150] == "gpu_temp_c"
    assert len(names) == sum(1 for f in FIELDS if f.dcgm_id is not None)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (41, 41.0),
        (0, 0.0),
        (312.5, 312.5),
        (DCGM_INT32_BLANK, float(DCGM_INT32_BLANK)),  # a real int64 count, not a blank
        (DCGM_INT64_BLANK, None),
        (DCGM_INT64_BLANK + 1, None),  # not found
        (DCGM_INT64_BLANK + 2, None),  # not supported
        (DCGM_INT64_BLANK + 3, None),  # not permissioned
        (DCGM_FP64_BLANK, None),
        (DCGM_FP64_BLANK + 2.0, None),
        (float("nan"), None),
        ("<<<NOT_SUPPORTED>>>", None),
        (None, None),
    ],
)
def test_blank_values_are_absent(raw: object, expected: float | None) -> None:
    assert dcgm_number(raw, dcgmvalue) == expected


def test_samples_flagged_blank_are_absent() -> None:
    assert sample_value(types.SimpleNamespace(isBlank=True, value=5), dcgmvalue) is None
    assert sample_value(types.SimpleNamespace(isBlank=False, value=5), dcgmvalue) == 5.0


def test_start_up_watches_known_fields_at_the_interval_and_lists_gpus() -> None:
    engine = Engine()
    b = make(engine)
    assert isinstance(b, Backend) and b.name == "dcgm"
    assert b.data_time() is None  # live readings: the wall clock
    assert isinstance(b.probe_runner(), SubprocessProbeRunner)
    infos = b.gpus()
    assert [(i.index, i.uuid, i.pci_bus_id) for i in infos] == [
        (0, "GPU-dcgm-0", "00000000:18:00.0"),
        (1, "GPU-dcgm-1", "00000000:19:00.0"),
    ]
    assert {(i.model_name, i.driver_version, i.hostname) for i in infos} == {("NVIDIA H200", "570.86.15", "node-01")}
    base, prof, xid, links = engine.watches
    expected = sorted(set(field_names(FIELDS)) - {1523})  # 1523 unknown to this DCGM
    assert sorted(base[0] + prof[0]) == expected
    assert all(1001 <= i < 1100 for i in prof[0])
    assert xid[0] == [XID_FIELD_ID]
    assert 400 in links[0] and 170 in links[0]  # per-link counters and the fabric: test_dcgm_links.py
    assert {(w[1], w[2], w[3]) for w in engine.watches} == {(10_000_000, 50.0, 0)}


def test_read_maps_ids_to_names_and_drops_blanks() -> None:
    engine = Engine()
    r0, r1 = make(engine).read()
    assert r0.values == {
        "gpu_temp_c": 45.0,
        "power_w": 301.25,
        "fb_free_mib": 40000.0,
        "prof_sm_active": 0.75,
        "xid": 0.0,
        "fb_reserved_mib": 529.0,
        "nvlink_bandwidth_mbps": 61234.0,
        "pcie_tx_bytes_per_s": 2e9,
        "pcie_rx_bytes_per_s": 3e9,
        "vgpu_license_status": 0.0,
    }
    assert r1.values == {"gpu_temp_c": 47.0, "xid": 48.0}
    assert not r0.lost and not r1.lost


def test_new_xid_samples_become_events_once() -> None:
    engine = Engine()
    engine.new_xids = {1: [Sample(48, 1_700_000_000_000_000)]}  # before start: not an event
    b = make(engine)
    engine.new_xids = {
        1: [Sample(79, 1_700_000_002_000_000), Sample(0, 1_700_000_003_000_000)],
        0: [Sample(48, 1_700_000_001_000_000), Sample(48, 1_700_000_001_500_000)],
    }
    b.read()
    assert b.drain_xid_events() == [
        XidEvent("GPU-dcgm-0", 48, 1_700_000_001.0),
        XidEvent("GPU-dcgm-0", 48, 1_700_000_001.5),
        XidEvent("GPU-dcgm-1", 79, 1_700_000_002.0),
    ]
    assert b.drain_xid_events() == []
    b.read()
    assert b.drain_xid_events() == []


def test_profiling_failure_costs_only_prof_fields() -> None:
    engine = Engine()
    engine.prof_ok = False
    r0, _ = make(engine).read()
    assert "prof_sm_active" not in r0.values and r0.values["gpu_temp_c"] == 45.0


def test_lost_gpu_is_flagged() -> None:
    engine = Engine()
    b = make(engine)
    engine.lost = {1}
    r0, r1 = b.read()
    assert r1.lost and r1.values == {} and r1.error == "DCGM reports GPU 1 lost"
    assert r0.values["gpu_temp_c"] == 45.0


def test_falls_back_to_embedded_engine_on_localhost() -> None:
    engine = Engine()
    engine.standalone = False
    b = make(engine)
    assert b._handle.embedded
    assert b.read()[0].values["gpu_temp_c"] == 45.0


def test_unreachable_host_engine_is_one_line() -> None:
    engine = Engine()
    engine.standalone = False
    engine.embedded = False
    with pytest.raises(BackendUnavailable) as exc:
        make(engine)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("cannot reach nv-hostengine at localhost:5555: DCGM error -21")
    assert "embedded engine failed too" in msg and msg.endswith("use --backend nvml")
    with pytest.raises(BackendUnavailable, match=r"at gpu-node-7:5555: DCGM error -21; start"):
        make(engine, host="gpu-node-7")  # no embedded fallback for a remote host


def test_read_failure_is_a_backend_error_with_context() -> None:
    engine = Engine()
    b = make(engine)
    engine.fail_reads = True
    with pytest.raises(BackendError, match="reading field values from nv-hostengine at local"):
        b.read()


def test_close_deletes_field_groups_and_disconnects_once() -> None:
    engine = Engine()
    b = make(engine)
    b.close()
    b.close()
    assert len(engine.deleted) == 4 and engine.shutdown == 1  # base, prof, xid, links

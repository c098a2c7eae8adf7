"""NvmlBackend against FakeNvml (no GPU needed), plus one real-hardware check marked gpu."""

from __future__ import annotations

import ast
import inspect
import logging
import re
import time
from pathlib import Path

import pynvml
import pytest

from collector.backends import nvml as nvml_mod
from collector.backends import nvml_derived as nvml_derived_mod
from collector.backends import nvml_mig as nvml_mig_mod
from collector.backends import nvml_reset as nvml_reset_mod
from collector.backends.base import Backend, BackendUnavailable, XidEvent
from collector.backends.nvml import EVENT_FIELDS, NvmlBackend, build_readers, value_members
from collector.probes import SubprocessProbeRunner
from collector.sampler import Sampler
from core.catalog import FIELDS
from tests.collector.backends.fake_nvml import FakeGpu, FakeNvml

UUIDS = ["GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-1111-1111-1111-111111111111"]
DEADLINE_S = 2.0


def two_gpus(**kw: object) -> FakeNvml:
    gpus = [
        FakeGpu(UUIDS[0], pci_bus_id="00000000:18:00.0", serial="1650000000001"),
        FakeGpu(UUIDS[1], pci_bus_id="00000000:2A:00.0", serial="1650000000002"),
    ]
    return FakeNvml(gpus, **kw)  # type: ignore[arg-type]


def backend(fake: FakeNvml, watch_xid: bool = False) -> NvmlBackend:
    return NvmlBackend("node-01", nvml=fake, watch_xid=watch_xid)  # type: ignore[arg-type]


def drain_until(b: NvmlBackend, n: int) -> list[XidEvent]:
    """Drain until `n` events arrived or the deadline passed."""
    events: list[XidEvent] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(events) < n and time.monotonic() < deadline:
        events += b.drain_xid_events()
        time.sleep(0.01)
    return events


# --- the reader table and the test double stay in step with the catalogue and pynvml --------


def test_every_catalogue_nvml_field_has_a_reader_or_comes_from_events() -> None:
    with_nvml = {f.name for f in FIELDS if f.nvml is not None}
    readers = set(build_readers(pynvml))
    assert readers | EVENT_FIELDS == with_nvml
    assert not readers & EVENT_FIELDS
    assert set(EVENT_FIELDS) == {"xid"}


def test_value_union_members_match_pynvml() -> None:
    members = value_members(pynvml)
    union = {name for name, _ in pynvml.c_nvmlValue_t._fields_}
    types = {
        getattr(pynvml, n) for n in dir(pynvml) if n.startswith("NVML_VALUE_TYPE_") and n != "NVML_VALUE_TYPE_COUNT"
    }
    assert set(members) == types
    assert set(members.values()) <= union


def _nvml_names_used() -> set[str]:
    """pynvml names in nvml.py's and nvml_mig.py's code: attributes and string constants (call names, codes)."""
    names: set[str] = set()
    for module in (nvml_mod, nvml_mig_mod, nvml_derived_mod, nvml_reset_mod):
        names |= _nvml_names_in(Path(module.__file__).read_text())
    return names


def _nvml_names_in(source: str) -> set[str]:
    tree = ast.parse(source)
    docstrings = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    pattern = re.compile(r"nvml[A-Z]\w*|NVML_\w+")
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            candidate = node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            candidate = node.value
        else:
            continue
        if pattern.fullmatch(candidate):
            names.add(candidate)
    return names


def test_fake_exposes_every_pynvml_call_nvml_py_makes_with_real_signatures() -> None:
    names = _nvml_names_used()
    # Names that are not pynvml attributes must be members of the structures it returns.
    struct_members = {n for n, _ in pynvml.c_nvmlFieldValue_t._fields_}
    unknown = {n for n in names if not hasattr(pynvml, n)} - struct_members
    assert not unknown, f"nvml.py uses names pynvml lacks: {sorted(unknown)}"
    functions = {n for n in names if inspect.isfunction(getattr(pynvml, n, None))}
    assert {"nvmlInit", "nvmlDeviceGetFieldValues", "nvmlEventSetWait_v2"} <= functions
    fake = FakeNvml([])
    for name in sorted(functions):
        assert name in FakeNvml.__dict__, f"FakeNvml lacks {name}"
        real = inspect.signature(getattr(pynvml, name)).parameters.values()
        mine = inspect.signature(getattr(fake, name)).parameters.values()
        assert len(mine) == len(real), name
        required = [p for p in real if p.default is inspect.Parameter.empty]
        assert len([p for p in mine if p.default is inspect.Parameter.empty]) == len(required)
    # Constants and exceptions are the real ones, not copies.
    assert fake.NVMLError is pynvml.NVMLError
    assert fake.NVML_FI_DEV_MEMORY_TEMP == pynvml.NVML_FI_DEV_MEMORY_TEMP
    with pytest.raises(AttributeError):
        fake.nvmlDeviceGetVbiosVersion  # noqa: B018 - a call the fake lacks must not reach pynvml


def test_fake_raises_the_real_exception_classes() -> None:
    fake = FakeNvml([FakeGpu(UUIDS[0], serial=None)])
    fake.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetSerial(fake.handle(0))
    fake.lose(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetPowerUsage(fake.handle(0))


# --- discovery -----------------------------------------------------------------------------


def test_discovery_lists_identity_of_each_gpu() -> None:
    b = backend(two_gpus(driver_version="550.54.15"))
    infos = b.gpus()
    assert [(i.index, i.uuid, i.pci_bus_id, i.serial) for i in infos] == [
        (0, UUIDS[0], "00000000:18:00.0", "1650000000001"),
        (1, UUIDS[1], "00000000:2A:00.0", "1650000000002"),
    ]
    assert {i.model_name for i in infos} == {"NVIDIA H100 80GB HBM3"}
    assert {i.hostname for i in infos} == {"node-01"}
    assert {i.driver_version for i in infos} == {"550.54.15"}
    assert isinstance(b, Backend) and b.name == "nvml"
    assert b.data_time() is None  # live readings: the wall clock
    assert isinstance(b.probe_runner(), SubprocessProbeRunner)


def test_discovery_decodes_bytes_from_older_pynvml_and_tolerates_missing_serial() -> None:
    fake = FakeNvml([FakeGpu(UUIDS[0], serial=None)], bytes_strings=True)
    (info,) = backend(fake).gpus()
    assert (info.uuid, info.model_name, info.serial) == (UUIDS[0], "NVIDIA H100 80GB HBM3", "")
    assert info.driver_version == "550.54.15"


def test_gpu_lost_at_discovery_is_listed_and_reported_lost() -> None:
    fake = two_gpus()
    fake.lose(1)
    b = backend(fake)
    assert [i.uuid for i in b.gpus()] == [UUIDS[0], "GPU-unknown-1"]
    r0, r1 = b.read()
    assert not r0.lost and r0.values["gpu_temp_c"] == 41.0
    assert r1.lost and r1.values == {} and "GPU is lost" in (r1.error or "")


# --- reading -------------------------------------------------------------------------------


def test_full_read_has_every_field_in_catalogue_units() -> None:
    (r0, r1) = backend(two_gpus()).read()
    assert r1.values == r0.values
    assert not r0.lost and r0.error is None
    assert r0.values == {
        "gpu_temp_c": 41.0,
        "memory_temp_c": 52.0,
        "slowdown_temp_c": 87.0,
        "shutdown_temp_c": 92.0,
        "power_w": 312.456,  # 312456 mW
        "power_limit_w": 700.0,
        "energy_mj": 123456789.0,
        "sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 2619.0,
        "clocks_event_reasons": 4.0,
        "thermal_violation_us": 5000.0,  # 5e6 ns
        "power_violation_us": 12345.678,
        "gpu_util_pct": 87.0,
        "mem_copy_util_pct": 40.0,
        "enc_util_pct": 0.0,
        "dec_util_pct": 3.0,
        "fb_total_mib": 81559.0,  # bytes / 2**20
        "fb_free_mib": 41559.0,
        "fb_used_mib": 39471.0,  # nvmlMemory_v2: without the reserved memory, as DCGM
        "fb_reserved_mib": 529.0,
        "ecc_sbe_volatile": 3.0,
        "ecc_dbe_volatile": 0.0,
        "ecc_sbe_aggregate": 17.0,
        "ecc_dbe_aggregate": 1.0,
        "retired_pages_sbe": 2.0,  # len of the page list
        "retired_pages_dbe": 1.0,
        "retired_pages_pending": 0.0,
        "remapped_rows_correctable": 2.0,
        "remapped_rows_uncorrectable": 1.0,
        "row_remap_pending": 0.0,
        "row_remap_failure": 0.0,
        "pcie_replay_count": 5.0,
        "pcie_link_gen": 5.0,
        "pcie_link_gen_max": 5.0,
        "pcie_link_width": 8.0,
        "pcie_link_width_max": 16.0,
        "pcie_tx_kbps": 1234.0,
        "pcie_rx_kbps": 5678.0,
        "pcie_tx_bytes_per_s": 1234.0 * 1024,
        "pcie_rx_bytes_per_s": 5678.0 * 1024,
        "nvlink_crc_flit_errors": 4.0,  # summed over 18 links
        "nvlink_crc_data_errors": 2.0,
        "nvlink_replay_errors": 18.0,
        "nvlink_recovery_errors": 0.0,
        "recovery_action": 0.0,
        "vgpu_license_status": 0.0,  # no vGPU licensing on bare metal
        "nvlink_links_down": 0.0,  # 18 links, all up; this double has no fabric call: absent
    }
    assert "xid" not in r0.values  # the sampler fills it from events
    assert "nvlink_bandwidth_mbps" not in r0.values  # a rate: needs a second read


def test_shared_calls_are_made_once_per_read() -> None:
    fake = two_gpus()
    backend(fake).read()
    mem_calls = [c for c in fake.log if c == ("nvmlDeviceGetMemoryInfo", 0)]
    rows_calls = [c for c in fake.log if c == ("nvmlDeviceGetRemappedRows", 0)]
    assert len(mem_calls) == 1 and len(rows_calls) == 1


def test_memory_falls_back_to_v1_on_a_driver_without_v2() -> None:
    fake = two_gpus()
    del fake._gpus[0].values[("nvmlDeviceGetMemoryInfo_v2",)]  # pynvml: NVML_ERROR_FUNCTION_NOT_FOUND
    r0, r1 = backend(fake).read()
    assert (r0.values["fb_used_mib"], r0.values["fb_free_mib"]) == (40000.0, 41559.0)  # v1: used holds reserved
    assert "fb_reserved_mib" not in r0.values
    assert r1.values["fb_reserved_mib"] == 529.0


def test_nvlink_bandwidth_is_dcgms_rate_between_reads() -> None:
    fake = two_gpus()
    fake._gpus[1].values.pop(("field", pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX))  # a PCIe-only board
    b = backend(fake)
    b.read()
    rx = ("field", pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
    kind, kib = fake._gpus[0].values[rx]
    fake._gpus[0].values[rx] = (kind, kib + 30_000_000)  # 30 GiB more in 10 s
    fake.now_us += 10_000_000
    r0, r1 = b.read()
    assert r0.values["nvlink_bandwidth_mbps"] == pytest.approx(3_000.0)  # 3e6 KiB/s / 1000, as DCGM
    assert "nvlink_bandwidth_mbps" not in r1.values
    fake._gpus[0].values[rx] = (kind, 5)  # the driver reloaded: counters restart
    fake.now_us += 10_000_000
    r0, _ = b.read()
    assert "nvlink_bandwidth_mbps" not in r0.values


def test_vgpu_license_status_follows_the_vgpu_feature() -> None:
    fake = two_gpus()
    vgpu = pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU
    fake._gpus[0].values[("nvmlDeviceGetGridLicensableFeatures",)] = (1, [(vgpu, 1)])
    fake._gpus[1].values[("nvmlDeviceGetGridLicensableFeatures",)] = (1, [(vgpu, 0)])
    r0, r1 = backend(fake).read()
    assert (r0.values["vgpu_license_status"], r1.values["vgpu_license_status"]) == (1.0, 0.0)


def test_field_values_use_the_union_member_of_their_type() -> None:
    fake = two_gpus()
    fake._gpus[0].values[("field", pynvml.NVML_FI_DEV_MEMORY_TEMP)] = (
        pynvml.NVML_VALUE_TYPE_DOUBLE,
        51.5,
    )
    fake._gpus[0].values[("field", pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)] = (
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG,
        2,
    )
    r0, _ = backend(fake).read()
    assert r0.values["memory_temp_c"] == 51.5
    assert r0.values["recovery_action"] == 2.0


def test_not_supported_fields_are_absent_without_error_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = two_gpus()
    vals = fake._gpus[1].values
    # A PCIe consumer board: no NVLink, no memory temperature, no row remapping, no ECC.
    for key in list(vals):
        if key[0] in ("nvlink", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEccErrors"):
            del vals[key]
    del vals[("field", pynvml.NVML_FI_DEV_MEMORY_TEMP)]
    b = backend(fake)
    caplog.set_level(logging.DEBUG, logger="collector.backends.nvml")
    r0, r1 = b.read()
    b.read()
    assert not r1.lost and r1.error is None
    gone = {
        "memory_temp_c",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "row_remap_pending",
        "row_remap_failure",
        "ecc_sbe_volatile",
        "ecc_dbe_volatile",
        "ecc_sbe_aggregate",
        "ecc_dbe_aggregate",
        "nvlink_crc_flit_errors",
        "nvlink_crc_data_errors",
        "nvlink_replay_errors",
        "nvlink_recovery_errors",
    }
    assert set(r0.values) - set(r1.values) == gone
    assert r1.values["gpu_temp_c"] == 41.0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    per_field = [r.getMessage() for r in caplog.records if "field memory_temp_c" in r.getMessage()]
    assert per_field == ["GPU 1 field memory_temp_c: not available: Not Supported"]


def test_nvlink_links_are_probed_once() -> None:
    fake = two_gpus()
    for key in list(fake._gpus[1].values):
        if key[0] == "nvlink":
            del fake._gpus[1].values[key]
    b = backend(fake)
    b.read()
    first = sum(1 for c in fake.log if c == ("nvmlDeviceGetNvLinkErrorCounter", 1))
    assert first == 4 * pynvml.NVML_NVLINK_MAX_LINKS
    fake.log.clear()
    b.read()
    assert ("nvmlDeviceGetNvLinkErrorCounter", 1) not in fake.log
    # GPU 0 keeps reading exactly its 18 links per counter.
    assert sum(1 for c in fake.log if c == ("nvmlDeviceGetNvLinkErrorCounter", 0)) == 4 * 18


def test_other_errors_make_the_field_absent_and_warn_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = two_gpus()
    fake._gpus[0].errors["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_UNKNOWN
    fake._gpus[0].values[("field", pynvml.NVML_FI_DEV_MEMORY_TEMP)] = (
        "error",
        pynvml.NVML_ERROR_UNKNOWN,
    )
    b = backend(fake)
    caplog.set_level(logging.WARNING, logger="collector.backends.nvml")
    for _ in range(3):
        r0, r1 = b.read()
    assert "power_w" not in r0.values and "memory_temp_c" not in r0.values
    assert r0.values["gpu_temp_c"] == 41.0 and not r0.lost
    assert r1.values["power_w"] == 312.456
    warnings = sorted(r.getMessage() for r in caplog.records)
    assert warnings == [
        "GPU 0 field memory_temp_c: read failed: Unknown Error",
        "GPU 0 field power_w: read failed: Unknown Error",
    ]


def test_gpu_lost_mid_run_is_flagged_and_others_keep_reporting() -> None:
    fake = two_gpus()
    b = backend(fake)
    assert not any(r.lost for r in b.read())
    fake.lose(1)
    r0, r1 = b.read()
    assert r1.lost and r1.values == {}
    assert r1.error == f"GPU 1 ({UUIDS[1]}) is lost: GPU is lost"
    assert not r0.lost and r0.values["power_w"] == 312.456
    # Lost stays lost, and the GPU is not called again.
    calls = fake.calls_on(1)
    r0, r1 = b.read()
    assert r1.lost and fake.calls_on(1) == calls
    assert r0.values["gpu_temp_c"] == 41.0


def test_gpu_lost_in_the_middle_of_a_read_reports_no_partial_values() -> None:
    fake = two_gpus()
    b = backend(fake)
    fake._gpus[0].lost_after_calls = fake._gpus[0].calls + 5
    r0, r1 = b.read()
    assert r0.lost and r0.values == {}
    assert fake._gpus[0].calls == fake._gpus[0].lost_after_calls + 1  # stopped at the loss
    assert not r1.lost and set(r1.values) == set(build_readers(pynvml)) - {
        "nvlink_bandwidth_mbps",  # a rate: 2nd read
        "gpu_fabric_state",  # this double has no fabric: absent
    }


# --- start-up failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "is the NVIDIA driver installed?"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "is the nvidia kernel module loaded?"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "reboot the node"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "/dev/nvidia*"),
    ],
)
def test_nvml_init_failure_is_one_clear_line(code: int, hint: str) -> None:
    with pytest.raises(BackendUnavailable) as exc:
        backend(FakeNvml([], init_error=code))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"NVML could not be loaded ({pynvml.NVMLError(code)}): ")
    assert hint in msg and msg.endswith("use --backend sim to try a simulated fleet")
    assert isinstance(exc.value.__cause__, pynvml.NVMLError)


def test_real_pynvml_without_a_driver_is_backend_unavailable() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")
    with pytest.raises(BackendUnavailable, match="--backend sim"):
        NvmlBackend("node-01", watch_xid=False)


# --- XID events ----------------------------------------------------------------------------


def test_xid_events_arrive_from_the_watcher_and_drain_once() -> None:
    fake = two_gpus()
    b = backend(fake, watch_xid=True)
    try:
        assert fake.registered == {0, 1}
        t0 = time.time()
        fake.queue_xid(1, 79)
        fake.queue_xid(0, 48)
        events = drain_until(b, 2)
        assert [(e.gpu_uuid, e.xid) for e in events] == [(UUIDS[1], 79), (UUIDS[0], 48)]
        assert all(t0 <= e.timestamp <= time.time() for e in events)
        assert b.drain_xid_events() == []
    finally:
        b.close()


def test_sampler_fills_xid_from_nvml_events() -> None:
    fake = two_gpus()
    b = backend(fake, watch_xid=True)
    try:
        fake.queue_xid(0, 63)
        deadline = time.monotonic() + DEADLINE_S
        while not b._events and time.monotonic() < deadline:
            time.sleep(0.01)
        snap = Sampler(b, 10.0).sample_once()
        assert snap.readings[0].values["xid"] == 63.0
        assert snap.readings[1].values["xid"] == 0.0
        assert snap.xid_counts[UUIDS[0]] == {63: 1}
    finally:
        b.close()


def test_close_stops_the_watcher_frees_the_event_set_and_shuts_nvml_down() -> None:
    fake = two_gpus()
    b = backend(fake, watch_xid=True)
    thread = b._thread
    assert thread is not None and thread.is_alive() and thread.daemon
    b.close()
    assert not thread.is_alive()
    assert fake.event_set_freed and fake.initialized == 0
    b.close()  # idempotent
    assert fake.initialized == 0


def test_gpu_without_xid_support_is_skipped_and_others_still_deliver() -> None:
    fake = two_gpus()
    fake._gpus[1].errors["nvmlDeviceRegisterEvents"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    b = backend(fake, watch_xid=True)
    try:
        assert fake.registered == {0}
        fake.queue_xid(1, 13)  # never reaches the event set
        fake.queue_xid(0, 31)
        assert [(e.gpu_uuid, e.xid) for e in drain_until(b, 1)] == [(UUIDS[0], 31)]
    finally:
        b.close()


def test_watcher_survives_gpu_is_lost_from_the_wait_and_falls_back_without_v2() -> None:
    fake = two_gpus(hidden=("nvmlEventSetWait_v2",))
    b = backend(fake, watch_xid=True)
    try:
        fake.queue_wait_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        fake.queue_xid(0, 94)
        assert [(e.gpu_uuid, e.xid) for e in drain_until(b, 1)] == [(UUIDS[0], 94)]
        assert b._thread is not None and b._thread.is_alive()
    finally:
        b.close()


def test_no_watcher_when_disabled() -> None:
    fake = two_gpus()
    b = backend(fake, watch_xid=False)
    assert b._thread is None and fake.registered == set()
    assert b.drain_xid_events() == []
    b.close()
    assert fake.initialized == 0


# --- real hardware (scripts/device-check.sh) -----------------------------------------------


@pytest.mark.gpu
def test_real_nvml_reads_every_gpu() -> None:
    b = NvmlBackend("device-check")
    try:
        infos = b.gpus()
        assert infos and all(i.uuid.startswith("GPU-") for i in infos)
        for r in b.read():
            assert not r.lost, r.error
            assert 0 < r.values["gpu_temp_c"] < 120
            assert r.values["power_w"] > 0
            # nvmlMemory_v2 (driver r510+) keeps the reserved memory out of used; v1 has no reserved.
            parts = r.values["fb_used_mib"] + r.values["fb_free_mib"] + r.values.get("fb_reserved_mib", 0.0)
            assert r.values["fb_total_mib"] == pytest.approx(parts, abs=1024)
            assert r.values["pcie_tx_bytes_per_s"] == r.values["pcie_tx_kbps"] * 1024
        assert b.drain_xid_events() == []
    finally:
        b.close()


def test_older_pynvml_without_recovery_action_just_lacks_that_field() -> None:
    fake = two_gpus(hidden=("NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",))
    r0, _ = backend(fake).read()
    assert "recovery_action" not in r0.values and r0.values["memory_temp_c"] == 52.0


def test_pynvml_missing_a_needed_constant_is_unavailable_and_shuts_nvml_down() -> None:
    fake = two_gpus(hidden=("NVML_FI_DEV_MEMORY_TEMP",))
    with pytest.raises(BackendUnavailable, match="nvidia-ml-py lacks NVML_FI_DEV_MEMORY_TEMP"):
        backend(fake)
    assert fake.initialized == 0

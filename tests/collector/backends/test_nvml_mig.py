"""MIG under NvmlBackend against FakeNvml: instances, their memory, and NVML's own error codes."""

from __future__ import annotations

import logging

import pynvml
import pytest

from collector.backends.base import MigInstance
from collector.backends.nvml import NvmlBackend
from collector.backends.nvml_mig import MIG_FIELDS, profile_from_name
from tests.collector.backends.fake_nvml import MAX_MIG_DEVICES, MIB, FakeGpu, FakeMig, FakeNvml

UUIDS = ["GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-1111-1111-1111-111111111111"]
MIG_A = "MIG-11111111-aaaa-5aaa-aaaa-aaaaaaaaaaaa"
MIG_B = "MIG-22222222-bbbb-5bbb-bbbb-bbbbbbbbbbbb"
MIG_B2 = "MIG-33333333-cccc-5ccc-cccc-cccccccccccc"
ENABLE, DISABLE = pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_DISABLE


def mig_h100() -> FakeGpu:
    """GPU 0 split into a 1g.10gb (GPU instance 9) and a 3g.40gb (GPU instance 2) holding two compute
    instances (MIG devices 2 and 4); slots 1, 3, 5 and 6 are empty."""
    gpu = FakeGpu(UUIDS[0], mig_mode=ENABLE)
    gpu.mig = [
        FakeMig(MIG_A, 9, "1g.10gb", (9856 * MIB, 9000 * MIB, 856 * MIB)),
        None,
        FakeMig(MIG_B, 2, "3g.40gb", (40192 * MIB, 30192 * MIB, 10000 * MIB)),
        None,
        FakeMig(MIG_B2, 2, "1c.3g.40gb", (40192 * MIB, 30192 * MIB, 10000 * MIB)),
    ]
    # A MIG-enabled GPU answers no utilisation ("not currently supported" on MIG-enabled GPUs).
    del gpu.values[("nvmlDeviceGetUtilizationRates",)]
    return gpu


def backend(fake: FakeNvml) -> NvmlBackend:
    return NvmlBackend("node-01", nvml=fake, watch_xid=False)  # type: ignore[arg-type]


def test_fake_answers_mig_calls_with_nvmls_error_codes() -> None:
    fake = FakeNvml([mig_h100(), FakeGpu(UUIDS[1])])
    fake.nvmlInit()
    h0, h1 = fake.handle(0), fake.handle(1)
    assert fake.nvmlDeviceGetMigMode(h0) == [ENABLE, ENABLE]
    assert fake.nvmlDeviceGetMaxMigDeviceCount(h0) == MAX_MIG_DEVICES
    # A GPU without MIG: "If device doesn't support MIG mode"; and "Returns zero if MIG is not supported".
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetMigMode(h1)
    assert fake.nvmlDeviceGetMaxMigDeviceCount(h1) == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(h1, 0)
    # An empty slot: "NVML_ERROR_NOT_FOUND if no valid MIG device was found at index"; past the end: invalid.
    with pytest.raises(pynvml.NVMLError_NotFound):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(h0, 1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(h0, MAX_MIG_DEVICES)
    mig = fake.nvmlDeviceGetMigDeviceHandleByIndex(h0, 0)
    assert isinstance(mig, pynvml.c_nvmlDevice_t)
    assert fake.nvmlDeviceGetGpuInstanceId(mig) == 9
    assert fake.nvmlDeviceGetUUID(mig) == MIG_A
    assert fake.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    assert fake.nvmlDeviceGetMemoryInfo(mig).used == 856 * MIB
    with pytest.raises(pynvml.NVMLError_NotSupported):  # a GPU handle is not a MIG device
        fake.nvmlDeviceGetGpuInstanceId(h1)
    fake._gpus[0].mig_mode = DISABLE  # MIG switched off: the old handle no longer names a device
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetGpuInstanceId(mig)


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "1g.5gb"),
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "3g.20gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me"),
        ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "3g.40gb"),  # a compute instance of a 3g GPU instance
        ("NVIDIA H100 80GB HBM3", ""),
    ],
)
def test_profile_comes_from_the_mig_device_name(name: str, profile: str) -> None:
    assert profile_from_name(name) == profile


def test_mig_instances_are_read_per_gpu_instance_with_their_memory() -> None:
    b = backend(FakeNvml([mig_h100(), FakeGpu(UUIDS[1])]))
    r0, r1 = b.read()
    assert [m.instance for m in r0.mig] == [
        MigInstance(2, "3g.40gb", MIG_B),  # the first MIG device of GPU instance 2 speaks for it
        MigInstance(9, "1g.10gb", MIG_A),
    ]
    assert r0.mig[0].values == {"fb_total_mib": 40192.0, "fb_free_mib": 30192.0, "fb_used_mib": 10000.0}
    assert r0.mig[1].values == {"fb_total_mib": 9856.0, "fb_free_mib": 9000.0, "fb_used_mib": 856.0}
    assert all(set(m.values) == set(MIG_FIELDS) for m in r0.mig)
    # Health stays with the physical GPU; utilisation is absent there under MIG, as NVML says.
    assert r0.values["ecc_dbe_aggregate"] == 1.0 and r0.values["gpu_temp_c"] == 41.0
    assert "gpu_util_pct" not in r0.values
    assert r1.mig == [] and r1.values["gpu_util_pct"] == 87.0


def test_a_gpu_without_mig_is_asked_once_and_a_disabled_one_every_read() -> None:
    no_mig = FakeGpu(UUIDS[0])
    disabled = FakeGpu(UUIDS[1], mig_mode=DISABLE)
    fake = FakeNvml([no_mig, disabled])
    b = backend(fake)
    for _ in range(3):
        r0, r1 = b.read()
        assert r0.mig == [] and r1.mig == []
    assert fake.log.count(("nvmlDeviceGetMigMode", 0)) == 1  # NOT_SUPPORTED does not change
    assert fake.log.count(("nvmlDeviceGetMigMode", 1)) == 3  # MIG can be switched on (with a GPU reset)
    assert ("nvmlDeviceGetMaxMigDeviceCount", 1) not in fake.log


def test_instances_follow_mig_reconfiguration_between_reads() -> None:
    gpu = mig_h100()
    b = backend(FakeNvml([gpu]))
    assert [m.instance.gpu_instance_id for m in b.read()[0].mig] == [2, 9]
    gpu.mig[0] = None  # instance 9 destroyed, another created in a free slot
    gpu.mig.append(FakeMig("MIG-44444444-dddd-5ddd-dddd-dddddddddddd", 13, "2g.20gb"))
    (r,) = b.read()
    assert [(m.instance.gpu_instance_id, m.instance.profile) for m in r.mig] == [(2, "3g.40gb"), (13, "2g.20gb")]
    gpu.mig_mode = DISABLE
    assert b.read()[0].mig == []


def test_one_instance_failing_a_read_loses_that_field_only_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    gpu = mig_h100()
    assert gpu.mig[0] is not None
    gpu.mig[0].errors["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_UNKNOWN
    b = backend(FakeNvml([gpu]))
    caplog.set_level(logging.WARNING, logger="collector.backends.nvml")
    for _ in range(3):
        (r,) = b.read()
    by_gi = {m.instance.gpu_instance_id: m for m in r.mig}
    assert by_gi[9].values == {} and by_gi[2].values["fb_used_mib"] == 10000.0
    assert [rec.getMessage() for rec in caplog.records] == [
        "GPU 0 field fb_free_mib of MIG instance 9: Unknown Error",
        "GPU 0 field fb_used_mib of MIG instance 9: Unknown Error",
        "GPU 0 field fb_total_mib of MIG instance 9: Unknown Error",
    ]


def test_listing_failure_gives_no_instances_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    gpu = mig_h100()
    gpu.errors["nvmlDeviceGetMaxMigDeviceCount"] = pynvml.NVML_ERROR_UNKNOWN
    b = backend(FakeNvml([gpu]))
    caplog.set_level(logging.WARNING, logger="collector.backends.nvml")
    for _ in range(2):
        (r,) = b.read()
        assert r.mig == [] and not r.lost and r.values["gpu_temp_c"] == 41.0
    assert [rec.getMessage() for rec in caplog.records] == ["GPU 0 field MIG instances: listing failed: Unknown Error"]


def test_gpu_lost_while_listing_instances_is_lost() -> None:
    gpu = mig_h100()
    gpu.errors["nvmlDeviceGetMigMode"] = pynvml.NVML_ERROR_GPU_IS_LOST
    fake = FakeNvml([gpu, FakeGpu(UUIDS[1])])
    r0, r1 = backend(fake).read()
    assert r0.lost and r0.values == {} and r0.mig == []
    assert r0.error == f"GPU 0 ({UUIDS[0]}) is lost: GPU is lost"
    assert not r1.lost


def test_nvidia_ml_py_without_mig_calls_reads_as_before() -> None:
    fake = FakeNvml([mig_h100()], hidden=("nvmlDeviceGetMigMode",))
    (r,) = backend(fake).read()
    assert r.mig == [] and r.values["gpu_temp_c"] == 41.0 and "fb_used_mib" in r.values


# --- real hardware (scripts/device-check.sh) -----------------------------------------------


@pytest.mark.gpu
def test_real_nvml_lists_mig_instances_as_the_mig_mode_says() -> None:
    """A GPU without MIG or with MIG off reports none; one with MIG on, each GPU instance with its memory."""
    b = NvmlBackend("device-check", watch_xid=False)
    try:
        for r, gpu in zip(b.read(), b._gpus, strict=True):
            assert not r.lost, r.error
            try:
                mode = pynvml.nvmlDeviceGetMigMode(gpu.handle)[0]
            except pynvml.NVMLError_NotSupported:
                mode = None
            if mode != ENABLE:
                assert r.mig == []
                continue
            assert r.mig, "MIG is on but no GPU instance was found (none created?)"
            for m in r.mig:
                assert m.instance.uuid.startswith("MIG-") and m.instance.profile, m.instance
                assert m.values["fb_total_mib"] == pytest.approx(
                    m.values["fb_used_mib"] + m.values["fb_free_mib"], abs=64
                )
    finally:
        b.close()

"""The node agent's GPU reset (collector.remedy): refused unless allowed and safe, carried out by nvidia-smi."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pynvml
import pytest
from prometheus_client.registry import CollectorRegistry

from collector.backends.base import GpuInfo, ResetFacts, Resettable
from collector.backends.nvml import NvmlBackend
from collector.backends.nvml_reset import NvidiaSmi, NvmlReset, run_command
from collector.backends.sim import SIM_PID, SimBackend
from collector.remedy import NOT_ALLOWED, Resetter, individual_reset_blocker, resettable
from collector.run import build_sampling
from core import catalog
from tests.collector.backends.fake_nvml import FakeGpu, FakeNvml
from tests.collector.backends.fake_reset import IN_USE_EXPLANATION, FakeNvidiaSmi, reset_gpu

UUIDS = ["GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-1111-1111-1111-111111111111"]
SMI = "/opt/nvidia/bin/nvidia-smi"
COMPUTE = ("nvmlDeviceGetComputeRunningProcesses",)
GRAPHICS = ("nvmlDeviceGetGraphicsRunningProcesses",)
REMAP = ("nvmlDeviceGetRemappedRows",)
RECOVERY = ("field", pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)


def faulty_h100s() -> FakeNvml:
    """Two H100s on NVSwitches; GPU 0 has a pending row remap, volatile ECC counts and asks for a reset."""
    gpus = [FakeGpu(UUIDS[0], pci_bus_id="00000000:18:00.0"), FakeGpu(UUIDS[1], pci_bus_id="00000000:2A:00.0")]
    v = gpus[0].values
    v[REMAP] = (3, 1, 1, 0)
    v[("nvmlDeviceGetTotalEccErrors", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)] = 40
    v[("nvmlDeviceGetTotalEccErrors", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)] = 1
    v[RECOVERY] = (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET)
    return FakeNvml(gpus)


def nvml_resetter(
    fake: FakeNvml, *, allow: bool = True, run: object = None
) -> tuple[Resetter, NvmlBackend, FakeNvidiaSmi]:
    backend = NvmlBackend("node-01", nvml=fake, watch_xid=False)  # type: ignore[arg-type]
    smi = FakeNvidiaSmi(fake)
    access = NvmlReset(backend, NvidiaSmi(SMI, 30.0, run or smi))  # type: ignore[arg-type]
    return Resetter(access, allow=allow), backend, smi


def exported(registry: CollectorRegistry, name: str, gpu: str = "0") -> float | None:
    """The value of series `name` of GPU `gpu` as /metrics serves it."""
    for family in registry.collect():
        for s in family.samples:
            if s.name == name and s.labels.get("gpu") == gpu:
                return float(s.value)
    return None


# --- the documented NVLink rule (nvidia-smi(1), -r/--gpu-reset) ------------------------------------------


@pytest.mark.parametrize(
    ("generation", "nvlink", "nvswitch", "alone"),
    [
        ("pre-ampere", False, False, True),  # PCIe only: the GPU alone
        ("pre-ampere", True, False, False),  # V100 NVLink: all peers in one command
        ("pre-ampere", True, True, False),  # DGX-2: all peers, with or without Fabric Manager
        ("ampere", True, False, True),  # direct NVLink, Ampere+: each GPU individually
        ("ampere", True, True, False),  # HGX A100: only with Fabric Manager, which NVML does not tell
        ("hopper+", True, True, True),  # HGX H100 and later: no Fabric Manager needed
        ("unknown", True, True, False),
        ("unknown", False, False, True),
    ],
)
def test_individual_reset_follows_nvidia_smis_nvlink_rule(
    generation: str, nvlink: bool, nvswitch: bool, alone: bool
) -> None:
    facts = ResetFacts(processes=(), generation=generation, nvlink=nvlink, nvswitch=nvswitch)  # type: ignore[arg-type]
    assert (individual_reset_blocker(facts) is None) == alone


# --- the NVML backend with the test double and a stand-in nvidia-smi ---------------------------------------


def test_reset_is_refused_while_a_compute_process_runs_and_nvidia_smi_never_runs() -> None:
    fake = faulty_h100s()
    fake.gpu(0).values[COMPUTE] = [4242, 4243]
    resetter, _, smi = nvml_resetter(fake)
    out = resetter.reset(UUIDS[0])
    assert (out.result, out.reason) == ("refused", "2 process(es) on the GPU (pid 4242, 4243)")
    assert (out.gpu_uuid, out.gpu_index) == (UUIDS[0], 0)
    assert smi.calls == [] and fake.gpu(0).resets == 0


def test_reset_is_refused_while_a_graphics_process_runs() -> None:
    fake = faulty_h100s()
    fake.gpu(1).values[GRAPHICS] = [777]
    resetter, _, smi = nvml_resetter(fake)
    out = resetter.reset(1)
    assert (out.result, out.reason) == ("refused", "1 process(es) on the GPU (pid 777)")
    assert smi.calls == []


def test_reset_when_idle_clears_pending_remap_volatile_ecc_and_recovery_action_as_the_collector_reads_them() -> None:
    fake = faulty_h100s()
    resetter, backend, smi = nvml_resetter(fake)
    sampling = build_sampling(backend, catalog.FIELDS, 10.0)
    sampling.sampler.sample_once()
    reg = sampling.registry
    assert exported(reg, "DCGM_FI_DEV_ROW_REMAP_PENDING") == 1.0
    assert exported(reg, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL") == 40.0
    assert exported(reg, "DCGM_FI_DEV_GPU_RECOVERY_ACTION") == 1.0  # NVML_GPU_RECOVERY_ACTION_GPU_RESET

    out = resetter.reset(UUIDS[0])

    assert out.result == "done", out.reason
    assert out.reason == "GPU 00000000:18:00.0 was successfully reset. All done."
    assert out.duration_s >= 0.0
    assert smi.calls == [([SMI, "--gpu-reset", "-i", UUIDS[0]], 30.0)]  # an argument list, the UUID, the timeout
    sampling.sampler.sample_once()
    assert exported(reg, "DCGM_FI_DEV_ROW_REMAP_PENDING") == 0.0
    assert exported(reg, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL") == 0.0
    assert exported(reg, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") == 0.0
    assert exported(reg, "DCGM_FI_DEV_GPU_RECOVERY_ACTION") == 0.0  # none
    assert exported(reg, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL") == 17.0  # the lifetime counts stay
    assert exported(reg, "DCGM_FI_DEV_ROW_REMAP_PENDING", gpu="1") == 0.0 and fake.gpu(1).resets == 0


def test_a_gpu_off_the_bus_is_refused_without_running_nvidia_smi() -> None:
    fake = faulty_h100s()
    resetter, backend, smi = nvml_resetter(fake)
    fake.lose(0)
    out = resetter.reset(UUIDS[0])
    assert out.result == "refused"
    assert out.reason.startswith("the GPU has fallen off the bus, a reset cannot reach it")
    assert smi.calls == []
    backend.read()  # the backend now knows it lost: still refused, from its own record
    assert resetter.reset(0).result == "refused"


def test_without_allow_reset_everything_is_refused_before_nvml_is_asked() -> None:
    fake = faulty_h100s()
    resetter, _, smi = nvml_resetter(fake, allow=False)
    before = len(fake.log)
    out = resetter.reset(UUIDS[0])
    assert (out.result, out.reason, out.gpu_uuid) == ("refused", NOT_ALLOWED, "")
    assert smi.calls == [] and len(fake.log) == before
    assert "--allow-reset" in NOT_ALLOWED


def test_a_pre_ampere_nvlink_gpu_is_refused_since_its_peers_must_be_reset_with_it() -> None:
    fake = faulty_h100s()
    fake.gpu(0).values[("nvmlDeviceGetArchitecture",)] = pynvml.NVML_DEVICE_ARCH_VOLTA
    resetter, _, smi = nvml_resetter(fake)
    out = resetter.reset(0)
    assert out.result == "refused" and "all its NVLink peers" in out.reason
    assert smi.calls == []


def test_an_ampere_gpu_with_direct_nvlink_alone_is_reset() -> None:
    fake = faulty_h100s()
    g = fake.gpu(0)
    g.values[("nvmlDeviceGetArchitecture",)] = pynvml.NVML_DEVICE_ARCH_AMPERE
    g.values[("nvmlDeviceGetNvLinkRemoteDeviceType",)] = [pynvml.NVML_NVLINK_DEVICE_TYPE_GPU] * 12
    g.values[("nvmlDeviceGetNvLinkState",)] = [pynvml.NVML_FEATURE_ENABLED] * 12
    resetter, _, _ = nvml_resetter(fake)
    assert resetter.reset(0).result == "done"
    g.values[("nvmlDeviceGetNvLinkRemoteDeviceType",)] = [pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH] * 12  # an HGX A100
    assert "Fabric Manager" in resetter.reset(0).reason


def test_a_process_that_starts_after_the_check_makes_nvidia_smi_refuse_and_the_reset_failed() -> None:
    fake = faulty_h100s()
    smi = FakeNvidiaSmi(fake)

    def racing(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        fake.gpu(0).values[COMPUTE] = [5150]  # a job lands between our check and the reset
        return smi(argv, timeout_s)

    resetter, _, _ = nvml_resetter(fake, run=racing)
    out = resetter.reset(0)
    assert out.result == "failed"
    assert "exited 255" in out.reason and "GPU 00000000:18:00.0: In use by another client" in out.reason
    assert fake.gpu(0).values[REMAP][2] == 1  # nothing was reset


def test_nvidia_smis_lost_answer_is_a_failed_reset_naming_the_bus() -> None:
    fake = faulty_h100s()
    smi = FakeNvidiaSmi(fake)

    def falls_off(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        fake.lose(0)
        return smi(argv, timeout_s)

    resetter, _, _ = nvml_resetter(fake, run=falls_off)
    out = resetter.reset(0)
    assert out.result == "failed" and out.reason.startswith("the GPU is lost")
    assert "GPU is lost.  Reboot the system" not in out.reason  # squeezed onto one line
    assert "GPU is lost. Reboot the system to recover this GPU" in out.reason


# --- a real process: argument list, timeout, missing binary --------------------------------------------------


def fake_smi_script(tmp_path: Path, body: str) -> Path:
    """An executable stand-in for nvidia-smi (in a folder whose name has a space: no shell may split it)."""
    folder = tmp_path / "nvidia bin"
    folder.mkdir()
    path = folder / "nvidia-smi"
    path.write_text(f"#!{sys.executable}\nimport json, sys, time\n{body}\n")
    path.chmod(0o755)
    return path


def test_nvidia_smi_runs_as_an_argument_list_without_a_shell(tmp_path: Path) -> None:
    record = tmp_path / "argv.json"
    script = fake_smi_script(
        tmp_path,
        f"json.dump(sys.argv[1:], open({str(record)!r}, 'w'))\nprint('GPU 00000000:18:00.0 was successfully reset.')",
    )
    said = NvidiaSmi(str(script), 20.0).reset("GPU-$(touch pwned);x")
    assert said == "GPU 00000000:18:00.0 was successfully reset."
    assert json.loads(record.read_text()) == ["--gpu-reset", "-i", "GPU-$(touch pwned);x"]
    assert not (Path.cwd() / "pwned").exists()


def test_a_reset_past_its_timeout_is_failed_not_waited_for(tmp_path: Path) -> None:
    script = fake_smi_script(tmp_path, "time.sleep(30)")
    fake = faulty_h100s()
    backend = NvmlBackend("node-01", nvml=fake, watch_xid=False)  # type: ignore[arg-type]
    resetter = Resetter(NvmlReset(backend, NvidiaSmi(str(script), 0.5, run_command)), allow=True)
    out = resetter.reset(0)
    assert out.result == "failed"
    assert out.reason == f"'{script}' --gpu-reset -i {UUIDS[0]} did not finish within 0.5s"
    assert 0.5 <= out.duration_s < 10.0


def test_a_missing_nvidia_smi_is_a_failed_reset(tmp_path: Path) -> None:
    fake = faulty_h100s()
    backend = NvmlBackend("node-01", nvml=fake, watch_xid=False)  # type: ignore[arg-type]
    resetter = Resetter(NvmlReset(backend, NvidiaSmi(str(tmp_path / "none"), 5.0)), allow=True)
    out = resetter.reset(0)
    assert out.result == "failed" and out.reason.startswith(f"cannot run {tmp_path / 'none'}")


# --- the test double itself: NVML's own errors --------------------------------------------------------------


def test_the_double_refuses_a_busy_reset_with_nvmls_in_use_and_a_lost_one_with_gpu_is_lost() -> None:
    fake = faulty_h100s()
    fake.gpu(0).values[COMPUTE] = [1]
    with pytest.raises(pynvml.NVMLError_InUse):
        reset_gpu(fake, 0)
    fake.lose(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        reset_gpu(fake, 1)
    out = FakeNvidiaSmi(fake)(["nvidia-smi", "--gpu-reset", "-i", "0"], 5.0)
    assert out.returncode == 255 and IN_USE_EXPLANATION in out.stdout
    assert FakeNvidiaSmi(fake)(["nvidia-smi", "--gpu-reset", "-i", UUIDS[1]], 5.0).returncode == 15
    assert FakeNvidiaSmi(fake)(["nvidia-smi", "-r"], 5.0).returncode == 2


# --- the simulator ----------------------------------------------------------------------------------------


def test_the_simulated_backend_resets_like_the_real_one() -> None:
    sim = SimBackend(gpus_per_node=2, seed=3)
    assert isinstance(sim, Resettable) and resettable(sim) is sim
    sim.read()
    sim.fleet.remap_pending[0], sim.fleet.sbe_vol[0], sim.fleet.sbe_agg[0] = 1.0, 40.0, 40.0  # a weak row, remapped
    assert sim.fleet.values()["recovery_action"][0] == 1.0
    resetter = Resetter(sim, allow=True)
    sim.fleet.util[0] = 80.0
    busy = resetter.reset(0)
    assert (busy.result, busy.reason) == ("refused", f"1 process(es) on the GPU (pid {SIM_PID})")
    sim.fleet.util[0] = 0.0
    assert resetter.reset(sim.gpus()[0].uuid).result == "done"
    values = sim.fleet.values()
    assert values["row_remap_pending"][0] == 0.0 and values["recovery_action"][0] == 0.0
    assert values["ecc_sbe_volatile"][0] == 0.0 and values["ecc_sbe_aggregate"][0] > 0
    sim.fleet.lost[1] = True
    assert resetter.reset(1).reason.startswith("the GPU has fallen off the bus")


def test_backends_that_cannot_reset_are_refused_with_a_reason() -> None:
    out = Resetter(resettable(object()), allow=True).reset(0)
    assert (out.result, out.reason) == ("refused", "this backend cannot reset GPUs (nvml and sim can)")
    assert Resetter(SimBackend(gpus_per_node=1), allow=True).reset("GPU-nope").reason == "no GPU GPU-nope on this node"


def test_the_outcome_is_a_plain_record() -> None:
    out = Resetter(None, allow=False).reset("GPU-x")
    assert out.to_dict() == {
        "gpu": "GPU-x", "result": "refused", "reason": NOT_ALLOWED, "duration_s": out.duration_s,
        "gpu_uuid": "", "gpu_index": None,
    }  # fmt: skip
    assert isinstance(GpuInfo(0, "u", "m", "h"), GpuInfo)


# --- real hardware (scripts/device-check.sh runs `pytest -m gpu`): the refusal path only ------------------


@pytest.mark.gpu
def test_real_gpus_reset_refusal_path_never_resets() -> None:
    """On a real GPU: NVML answers every question a reset asks, a refusing resetter touches nothing, and an
    allowed one reaches only a runner that records (nvidia-smi is never run; no GPU setting changes)."""
    backend = NvmlBackend("device-check", watch_xid=False)
    ran: list[list[str]] = []

    def never(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        ran.append(list(argv))
        return subprocess.CompletedProcess(list(argv), 255, "", "not run: a test never resets a real GPU")

    try:
        access = NvmlReset(backend, NvidiaSmi("nvidia-smi", 5.0, never))
        for info in backend.gpus():
            facts = access.reset_facts(info)
            assert facts.generation != "unknown", facts
            print(f"GPU {info.index} {info.model_name}: {facts}; alone: {individual_reset_blocker(facts) or 'yes'}")
            refused = Resetter(access, allow=False).reset(info.uuid)
            assert (refused.result, refused.reason) == ("refused", NOT_ALLOWED)
            out = Resetter(access, allow=True).reset(info.uuid)
            safe = not facts.processes and individual_reset_blocker(facts) is None
            assert out.result == ("failed" if safe else "refused"), out
        assert all(argv[1:3] == ["--gpu-reset", "-i"] for argv in ran)
    finally:
        backend.close()


def test_collect_builds_a_refusing_resetter_unless_allowed_with_nvidia_smi_from_the_settings() -> None:
    from core.settings import Settings
    from gpuhealth.cli.collect import _reset_line, _resetter

    fake = faulty_h100s()
    backend = NvmlBackend("node-01", nvml=fake, watch_xid=False)  # type: ignore[arg-type]
    off = _resetter(backend, False, Settings())
    assert off.reset(0).reason == NOT_ALLOWED and _reset_line(off) == ""
    on = _resetter(backend, True, Settings(nvidia_smi=SMI, reset_timeout="45s"))
    assert isinstance(on.backend, NvmlReset) and (on.backend.smi.path, on.backend.smi.timeout_s) == (SMI, 45.0)
    assert "allowed on idle GPUs (/opt/nvidia/bin/nvidia-smi --gpu-reset, 45s at most)" in _reset_line(on)

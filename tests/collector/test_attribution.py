"""Workload labels: dcgm-exporter's HPC job mapping files, merging sources, and the series they label."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from collector.attribution import HPC_JOB_LABEL, POD_LABELS, AttributionError, HpcJobAttributor, merge
from collector.backends.base import MigInstance, MigReading
from collector.exporter import MIG_LABELS, render
from collector.sampler import Sampler
from tests.collector.helpers import FakeClock, ScriptedBackend, gpu_labels, registry


def test_label_names_are_dcgm_exporters() -> None:
    assert POD_LABELS == ("pod", "namespace", "container")
    assert HPC_JOB_LABEL == "hpc_job"
    assert MIG_LABELS == ("GPU_I_PROFILE", "GPU_I_ID")


# --- the HPC job mapping directory ---------------------------------------------------------------------


def test_mapping_files_name_gpus_and_mig_instances_and_hold_job_ids(tmp_path: Path) -> None:
    b = ScriptedBackend(3)
    (tmp_path / "0").write_text("4711\n")
    (tmp_path / "1").write_text("12\n\n13\n12\n")  # two jobs share GPU 1; blank lines and repeats ignored
    (tmp_path / "2.7").write_text("99")  # GPU 2's MIG instance 7, no trailing newline
    (tmp_path / "9").write_text("5\n")  # no GPU 9 here
    (tmp_path / "README").write_text("not a mapping file")
    (tmp_path / "0.tmp").write_text("1")  # a prolog's half-written file
    (tmp_path / "3").mkdir()  # a directory is not a mapping file
    u = [i.uuid for i in b.infos]
    assert HpcJobAttributor(tmp_path).lookup(b.read()) == {
        (u[0], None): [{"hpc_job": "4711"}],
        (u[1], None): [{"hpc_job": "12"}, {"hpc_job": "13"}],
        (u[2], 7): [{"hpc_job": "99"}],
    }


def test_an_empty_mapping_file_or_directory_means_no_job(tmp_path: Path) -> None:
    b = ScriptedBackend(2)
    assert HpcJobAttributor(tmp_path).lookup(b.read()) == {}
    (tmp_path / "0").write_text("")
    assert HpcJobAttributor(tmp_path).lookup(b.read()) == {}


def test_a_missing_directory_is_an_attribution_error(tmp_path: Path) -> None:
    with pytest.raises(AttributionError, match="does not exist"):
        HpcJobAttributor(tmp_path / "gone").lookup(ScriptedBackend(1).read())


def test_merge_joins_sources_on_one_device_and_drops_repeats() -> None:
    pods = {("GPU-a", None): [{"pod": "p", "namespace": "n", "container": "c"}] * 2}
    jobs = {("GPU-a", None): [{"hpc_job": "1"}, {"hpc_job": "2"}], ("GPU-b", 3): [{"hpc_job": "3"}]}
    assert merge([pods, jobs, {("GPU-c", None): []}]) == {
        ("GPU-a", None): (
            {"pod": "p", "namespace": "n", "container": "c", "hpc_job": "1"},
            {"pod": "p", "namespace": "n", "container": "c", "hpc_job": "2"},
        ),
        ("GPU-b", 3): ({"hpc_job": "3"},),
    }


# --- series --------------------------------------------------------------------------------------------


def test_hpc_job_labels_one_series_per_job_and_the_other_gpus_stay_plain(tmp_path: Path) -> None:
    b = ScriptedBackend(2)
    b.events = []
    (tmp_path / "0").write_text("12\n13\n")
    s = Sampler(b, 10.0, clock=FakeClock(), attributors=[HpcJobAttributor(tmp_path)])
    s.sample_once()
    reg = registry(s, health=True)
    for job in ("12", "13"):
        assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 0, hpc_job=job)) == 40.0
        assert reg.get_sample_value("DCGM_FI_DEV_XID_ERRORS", gpu_labels(b, 0, hpc_job=job)) == 0.0
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 0)) is None
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 1)) == 41.0
    assert reg.get_sample_value("gpuhealth_collector_success", {"collector": "hpc_job"}) == 1.0
    assert reg.get_sample_value("gpuhealth_gpus") == 2.0, "GPUs are counted once, not per job"
    # The job ends: its epilog removes the file, and the next sample has no job label.
    (tmp_path / "0").unlink()
    s.sample_once()
    reg = registry(s, health=True)
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 0)) == 40.0
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 0, hpc_job="12")) is None


def test_missing_mapping_directory_is_no_labels_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    b = ScriptedBackend(1)
    s = Sampler(b, 10.0, clock=FakeClock(), attributors=[HpcJobAttributor(tmp_path / "maps")])
    caplog.set_level(logging.INFO, logger="collector.sampler")
    for _ in range(3):
        snap = s.sample_once()
        assert snap.status["sample"].success and not snap.status["hpc_job"].success
        assert snap.workloads == {}
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert s.health() == (True, "ok: 1 GPU(s)")
    (tmp_path / "maps").mkdir()
    (tmp_path / "maps" / "0").write_text("8\n")
    assert s.sample_once().workloads == {(b.infos[0].uuid, None): ({"hpc_job": "8"},)}


def test_an_attributor_that_raises_anything_costs_only_its_labels() -> None:
    class Broken:
        name = "broken"
        source = "nowhere"

        def lookup(self, readings: object) -> dict:
            raise ValueError("a bug")

    b = ScriptedBackend(1)
    snap = Sampler(b, 10.0, clock=FakeClock(), attributors=[Broken()]).sample_once()
    assert snap.status["sample"].success and snap.status["broken"].error == "a bug"
    assert snap.readings[0].values["gpu_temp_c"] == 40.0


def test_mig_instances_export_per_instance_fields_under_gpu_i_labels(tmp_path: Path) -> None:
    b = ScriptedBackend(1)
    b.values[0].update({"fb_used_mib": 20000.0, "ecc_dbe_volatile": 0.0})
    b.mig[0] = [
        MigReading(MigInstance(1, "3g.40gb", "MIG-a"), {"fb_used_mib": 19000.0, "fb_free_mib": 21000.0}),
        MigReading(MigInstance(9, "1g.10gb", "MIG-b"), {"fb_used_mib": 1000.0, "fb_free_mib": float("nan")}),
    ]
    (tmp_path / "0.9").write_text("77\n")  # a Slurm job on GPU instance 9
    s = Sampler(b, 10.0, clock=FakeClock(), attributors=[HpcJobAttributor(tmp_path)])
    s.sample_once()
    reg = registry(s, health=True)
    gi1 = gpu_labels(b, 0, GPU_I_PROFILE="3g.40gb", GPU_I_ID="1")
    gi9 = gpu_labels(b, 0, GPU_I_PROFILE="1g.10gb", GPU_I_ID="9", hpc_job="77")
    assert reg.get_sample_value("DCGM_FI_DEV_FB_USED", gpu_labels(b, 0)) == 20000.0  # the GPU's own series
    assert reg.get_sample_value("DCGM_FI_DEV_FB_USED", gi1) == 19000.0
    assert reg.get_sample_value("DCGM_FI_DEV_FB_FREE", gi1) == 21000.0
    assert reg.get_sample_value("DCGM_FI_DEV_FB_USED", gi9) == 1000.0
    assert reg.get_sample_value("DCGM_FI_DEV_FB_FREE", gi9) is None  # NaN: no sample
    # Health stays on the physical GPU.
    assert reg.get_sample_value("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu_labels(b, 0)) == 0.0
    assert reg.get_sample_value("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gi1) is None
    assert reg.get_sample_value("gpuhealth_gpu_lost", gi1) is None
    text = render(reg.collect()).decode()
    assert 'GPU_I_ID="9",GPU_I_PROFILE="1g.10gb"' in text and 'hpc_job="77"' in text


def test_a_lost_gpu_exports_no_instance_series() -> None:
    b = ScriptedBackend(1)
    b.mig[0] = [MigReading(MigInstance(1, "7g.80gb"), {"fb_used_mib": 1.0})]
    b.lost = {0}
    s = Sampler(b, 10.0, clock=FakeClock())
    s.sample_once()
    assert "GPU_I_ID" not in render(registry(s, health=True).collect()).decode()


def test_collect_options_choose_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from collector.podresources import client
    from core.settings import Settings
    from gpuhealth.cli.backend import attributors_from

    kubelet = tmp_path / "kubelet.sock"
    monkeypatch.setattr(client, "DEFAULT_SOCKET", kubelet)
    assert attributors_from(None, None, Settings()) == []  # not a Kubernetes node: off
    kubelet.touch()
    (found,) = attributors_from(None, None, Settings())  # the kubelet's socket is there: on
    assert isinstance(found, client.PodResourcesAttributor) and found.socket == kubelet
    assert attributors_from("", None, Settings()) == []  # turned off
    assert attributors_from(None, None, Settings(pod_resources_socket="")) == []
    pods, jobs = attributors_from("/run/k.sock", tmp_path / "maps", Settings())
    assert (pods.name, pods.source, jobs.name, jobs.source) == (
        "podresources", "/run/k.sock", "hpc_job", str(tmp_path / "maps"),
    )  # fmt: skip
    (jobs,) = attributors_from("", None, Settings(hpc_job_mapping_dir=str(tmp_path)))
    assert isinstance(jobs, HpcJobAttributor) and jobs.directory == tmp_path

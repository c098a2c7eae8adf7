"""NVLink per link and the fabric: NvmlLinks on the NVML double, and the series collector.nvlink exports."""

from __future__ import annotations

import pynvml
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from collector.backends.nvml import NvmlBackend
from collector.backends.nvml_links import NvmlLinks, links_of, read_fabric, read_links
from collector.backends.sim import SimBackend
from collector.nvlink import NvlinkCollector
from collector.run import build_sampling
from core import nvlink
from core.catalog import FIELDS
from tests.collector.backends.fake_links import CLUSTER, FABRIC, FakeFabricNvml, fabric, no_nvlink_values, nvswitch_gpu
from tests.collector.backends.fake_nvml import FakeGpu

p = pynvml
FLIT, DATA = p.NVML_NVLINK_ERROR_DL_CRC_FLIT, p.NVML_NVLINK_ERROR_DL_CRC_DATA
REPLAY, RECOVERY = p.NVML_NVLINK_ERROR_DL_REPLAY, p.NVML_NVLINK_ERROR_DL_RECOVERY


def open_fake(gpus: list[FakeGpu], **kw: object) -> tuple[FakeFabricNvml, NvmlBackend, NvmlLinks]:
    fake = FakeFabricNvml(gpus, **kw)  # type: ignore[arg-type]
    b = NvmlBackend("node-01", nvml=fake, watch_xid=False)  # type: ignore[arg-type]
    return fake, b, NvmlLinks(b.gpus, b.device)


def scrape(links: NvmlLinks) -> tuple[NvlinkCollector, CollectorRegistry]:
    reg = CollectorRegistry(auto_describe=False)
    col = NvlinkCollector(links.read)
    reg.register(col)
    return col, reg


def test_each_link_is_read_with_its_four_counters() -> None:
    _, b, _ = open_fake([nvswitch_gpu(0)])
    nvml, handle = b.device(0)
    links = read_links(nvml, handle)
    assert [r.link for r in links] == list(range(18))  # links 18..35 answer InvalidArgument: absent
    assert all(r.up for r in links)
    assert links[3].counters == {
        "NVML_NVLINK_ERROR_DL_CRC_FLIT": 4,
        "NVML_NVLINK_ERROR_DL_CRC_DATA": 0,
        "NVML_NVLINK_ERROR_DL_REPLAY": 1,
        "NVML_NVLINK_ERROR_DL_RECOVERY": 0,
    }
    assert links[0].counters["NVML_NVLINK_ERROR_DL_CRC_DATA"] == 2


def test_per_link_series_carry_the_link_label() -> None:
    gpu = nvswitch_gpu(0)
    gpu.values[("nvmlDeviceGetNvLinkState",)][5] = p.NVML_FEATURE_DISABLED  # link 5 is down
    _, _, links = open_fake([gpu])
    col, reg = scrape(links)
    base = {"gpu": "0", "UUID": gpu.uuid, "Hostname": "node-01"}
    assert reg.get_sample_value("gpuhealth_nvlink_link_up", {**base, "link": "5"}) == 0.0
    assert reg.get_sample_value("gpuhealth_nvlink_link_up", {**base, "link": "4"}) == 1.0
    assert reg.get_sample_value("gpuhealth_nvlink_link_up", {**base, "link": "18"}) is None
    assert reg.get_sample_value("gpuhealth_nvlink_crc_flit_errors_total", {**base, "link": "3"}) == 4.0
    assert reg.get_sample_value("gpuhealth_nvlink_crc_data_errors_total", {**base, "link": "0"}) == 2.0
    assert reg.get_sample_value("gpuhealth_nvlink_replay_errors_total", {**base, "link": "17"}) == 1.0
    assert reg.get_sample_value("gpuhealth_nvlink_recovery_errors_total", {**base, "link": "0"}) == 0.0
    text = generate_latest(reg).decode()
    assert "# TYPE gpuhealth_nvlink_crc_flit_errors_total counter" in text
    assert col.status["nvlink"].success


def test_links_are_found_once_then_only_the_known_ones_are_asked() -> None:
    fake, _, links = open_fake([nvswitch_gpu(0)])
    links.read()
    first = sum(1 for c in fake.log if c[0] == "nvmlDeviceGetNvLinkState")
    links.read()
    second = sum(1 for c in fake.log if c[0] == "nvmlDeviceGetNvLinkState") - first
    assert (first, second) == (p.NVML_NVLINK_MAX_LINKS, 18)


def test_a_gpu_without_nvlink_or_fabric_has_no_series() -> None:
    _, _, links = open_fake([FakeGpu(uuid="GPU-pcie", values=no_nvlink_values())])
    col, reg = scrape(links)
    text = generate_latest(reg).decode()
    assert "gpuhealth_nvlink_" not in text and "gpuhealth_fabric_" not in text
    assert col.status == {}


def test_a_counter_a_link_does_not_keep_is_left_out() -> None:
    gpu = nvswitch_gpu(0)
    gpu.values[("nvlink", RECOVERY)] = [None] * 18  # NotSupported on every link (Blackwell dropped some)
    _, b, _ = open_fake([gpu])
    links = read_links(*b.device(0))
    assert "NVML_NVLINK_ERROR_DL_RECOVERY" not in links[0].counters
    assert links[0].counters["NVML_NVLINK_ERROR_DL_REPLAY"] == 1


def test_fabric_registered_well() -> None:
    _, b, links = open_fake([nvswitch_gpu(0)])
    got = read_fabric(*b.device(0))
    assert got is not None
    assert (got.state, got.status, got.clique_id, got.cluster_uuid) == (3, 0, 32766, CLUSTER)
    _, reg = scrape(links)
    base = {"gpu": "0", "UUID": b.gpus()[0].uuid, "Hostname": "node-01"}
    assert reg.get_sample_value("gpuhealth_fabric_state", base) == 3.0
    assert reg.get_sample_value("gpuhealth_fabric_status", base) == 0.0
    ids = {"clique_id": "32766", "cluster_uuid": CLUSTER}
    assert reg.get_sample_value("gpuhealth_fabric_info", {**base, **ids}) == 1.0


def test_fabric_states_not_started_in_progress_and_failed() -> None:
    gpus = [nvswitch_gpu(i) for i in range(3)]
    gpus[0].values[FABRIC] = fabric(p.NVML_GPU_FABRIC_STATE_NOT_STARTED, p.NVML_ERROR_NOT_READY)  # FM stopped
    gpus[1].values[FABRIC] = fabric(p.NVML_GPU_FABRIC_STATE_IN_PROGRESS, p.NVML_ERROR_NOT_READY)
    gpus[2].values[FABRIC] = fabric(p.NVML_GPU_FABRIC_STATE_COMPLETED, p.NVML_ERROR_INSUFFICIENT_RESOURCES)
    _, _, links = open_fake(gpus)
    got = [g.fabric for g in links.read()]
    assert [(f.state, f.status) for f in got if f] == [
        (1, p.NVML_ERROR_NOT_READY),
        (2, p.NVML_ERROR_NOT_READY),
        (3, p.NVML_ERROR_INSUFFICIENT_RESOURCES),
    ]


def test_fabric_state_not_supported_is_absent() -> None:
    gpu = nvswitch_gpu(0)
    gpu.values[FABRIC] = fabric(p.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)
    _, b, _ = open_fake([gpu])
    assert read_fabric(*b.device(0)) is None


def test_fabric_falls_back_to_the_unversioned_call_on_an_older_driver() -> None:
    gpu = nvswitch_gpu(0)
    gpu.errors["nvmlDeviceGetGpuFabricInfoV"] = p.NVML_ERROR_FUNCTION_NOT_FOUND
    fake, b, _ = open_fake([gpu])
    got = read_fabric(*b.device(0))
    assert got is not None and got.state == 3
    assert ("nvmlDeviceGetGpuFabricInfo", 0) in fake.log


def test_a_pynvml_without_fabric_calls_reads_no_fabric() -> None:
    _, b, _ = open_fake([nvswitch_gpu(0)], hidden=("nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV"))
    assert read_fabric(*b.device(0)) is None


def test_a_lost_gpu_is_left_out_and_an_nvml_error_fails_the_collector() -> None:
    fake, _, links = open_fake([nvswitch_gpu(0), nvswitch_gpu(1)])
    fake.lose(0)
    assert [g.info.index for g in links.read()] == [1]
    fake.gpu(1).errors["nvmlDeviceGetNvLinkState"] = p.NVML_ERROR_UNKNOWN
    col, reg = scrape(links)
    assert "gpuhealth_nvlink_" not in generate_latest(reg).decode()
    assert not col.status["nvlink"].success
    assert "NVLink links of GPU 1" in (col.status["nvlink"].error or "")


def test_the_nvml_collector_exports_links_and_the_sim_backend_none() -> None:
    _, b, _ = open_fake([nvswitch_gpu(0)])
    reg = build_sampling(b, FIELDS, 1.0).registry
    labels = {"gpu": "0", "UUID": b.gpus()[0].uuid, "Hostname": "node-01", "link": "0"}
    assert reg.get_sample_value("gpuhealth_nvlink_link_up", labels) == 1.0
    assert not hasattr(SimBackend, "device")  # sim, replay and dcgm: no link reader, no series
    assert links_of(object()) is None


def test_every_exported_family_is_in_the_table() -> None:
    _, _, links = open_fake([nvswitch_gpu(0)])
    _, reg = scrape(links)
    names = {s.name for fam in reg.collect() for s in fam.samples}
    assert names == nvlink.LINK_METRICS


@pytest.mark.gpu
def test_real_nvml_reads_links_and_fabric() -> None:
    """On a real GPU: the calls' names and structs match the installed nvidia-ml-py and driver.
    A PCIe GPU has no links and no fabric; an SXM one has links; an NVSwitch one a fabric state 1..3."""
    b = NvmlBackend("device-check", watch_xid=False)
    try:
        for g in NvmlLinks(b.gpus, b.device).read():
            assert all(0 <= r.link < pynvml.NVML_NVLINK_MAX_LINKS for r in g.links)
            assert all(v >= 0 for r in g.links for v in r.counters.values())
            assert g.fabric is None or g.fabric.state in (1, 2, 3)
    finally:
        b.close()


# --- the catalogue fields: links down and the fabric's state, one number per GPU (issue 58) ---------


def test_catalogue_fields_count_links_down_and_fold_a_failed_registration_into_state_4() -> None:
    gpus = [nvswitch_gpu(i) for i in range(4)]
    gpus[0].values[("nvmlDeviceGetNvLinkState",)] = [p.NVML_FEATURE_ENABLED] * 16 + [p.NVML_FEATURE_DISABLED] * 2
    gpus[1].values[FABRIC] = fabric(p.NVML_GPU_FABRIC_STATE_NOT_STARTED, p.NVML_ERROR_NOT_READY)  # FM stopped
    gpus[2].values[FABRIC] = fabric(p.NVML_GPU_FABRIC_STATE_COMPLETED, p.NVML_ERROR_INSUFFICIENT_RESOURCES)
    _, b, _ = open_fake(gpus)
    got = [(r.values.get("nvlink_links_down"), r.values.get("gpu_fabric_state")) for r in b.read()]
    assert got == [(2.0, 3.0), (0.0, 1.0), (0.0, 4.0), (0.0, 3.0)]
    assert [r.values.get("nvlink_links_down") for r in b.read()] == [2.0, 0.0, 0.0, 0.0]  # the known links


def test_catalogue_fields_are_absent_without_nvlink_or_fabric() -> None:
    _, b, _ = open_fake([FakeGpu(uuid="GPU-pcie", values=no_nvlink_values())])
    (r,) = b.read()
    assert "nvlink_links_down" not in r.values and "gpu_fabric_state" not in r.values

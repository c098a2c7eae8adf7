"""DcgmBackend's NVLink links, fabric and NVSwitches over the fake bindings (fake_dcgm.py).

An HGX H100 as DCGM shows it: GPU 0 with 18 links to NVSwitches, one of them down, registered with the
fabric; GPU 1 an H100 PCIe without NVLink (every per-link field DCGM_INT64_NOT_SUPPORTED, every link
state NotSupported, the Fabric Manager status DcgmFMStatusNotSupported); two NVSwitches (entity ids 8
and 9, as DCGM numbers them by physical id).
"""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from collector.backends.base import BackendError
from collector.backends.dcgm_links import LINK_FIELDS, fabric_reading, link_states, raw_value
from collector.backends.nvml_links import FabricReading, LinkReading
from collector.nvswitch import SwitchInfo, list_switches
from collector.run import build_sampling
from core import nvlink
from core.catalog import FIELDS
from tests.collector.backends.fake_dcgm import (
    DCGM_INT64_NOT_SUPPORTED,
    DCGM_STR_NOT_SUPPORTED,
    LS_DISABLED,
    LS_DOWN,
    LS_NOT_SUPPORTED,
    LS_UP,
    NOT_SUPPORTED,
    Engine,
    Sample,
    dcgmvalue,
    make,
)

CLUSTER = "b8f3c2a1-5d4e-4f60-9a7b-0c1d2e3f4a5b"
FLIT = "NVML_NVLINK_ERROR_DL_CRC_FLIT"
REPLAY = "NVML_NVLINK_ERROR_DL_REPLAY"
RECOVERY = "NVML_NVLINK_ERROR_DL_RECOVERY"


def _id(counter: str, link: int) -> int:
    return next(fid for fid, (c, n) in LINK_FIELDS.items() if (c, n) == (counter, link))


def hgx() -> Engine:
    engine = Engine()
    engine.link_states = {0: [LS_UP] * 17 + [LS_DOWN], 1: []}
    counters = {fid: 0 for fid in LINK_FIELDS}
    counters[_id(REPLAY, 3)] = 7
    counters[_id(FLIT, 17)] = 2
    counters[_id(RECOVERY, 17)] = DCGM_INT64_NOT_SUPPORTED  # a counter this link does not keep
    engine.latest[0] |= counters | {170: 3, 171: 0, 172: CLUSTER, 173: 32766}
    engine.latest[1] |= {fid: DCGM_INT64_NOT_SUPPORTED for fid in LINK_FIELDS}
    engine.latest[1] |= {170: 0, 171: DCGM_INT64_NOT_SUPPORTED, 172: DCGM_STR_NOT_SUPPORTED, 173: 0}
    pci = {866: 0, 868: 0, 869: 0}
    engine.switches = {
        8: {856: 0, 857: 12028, 858: 41, 867: 0x05, **pci, 878: "NVSWITCH-8"},
        9: {856: 1004, 857: 0, 858: 44, 867: 0x06, **pci, 878: DCGM_STR_NOT_SUPPORTED},
    }
    engine.switch_links = {8: [LS_DISABLED, LS_UP, LS_UP, LS_DOWN], 9: [LS_UP]}
    return engine


# --- the field ids and DCGM's structures ------------------------------------------------------------


def test_link_field_ids_are_dcgm_fields_h_for_18_links_of_four_counters() -> None:
    assert len(LINK_FIELDS) == 72 and len(set(LINK_FIELDS.values())) == 72
    # dcgm_fields.h: L0 400, L6 451, L12 406, L15 481 (CRC flit); recovery L15-L17 491-493, 490 unused.
    assert [LINK_FIELDS[i] for i in (400, 451, 406, 481)] == [(FLIT, 0), (FLIT, 6), (FLIT, 12), (FLIT, 15)]
    assert LINK_FIELDS[410] == ("NVML_NVLINK_ERROR_DL_CRC_DATA", 0) and LINK_FIELDS[474] == (RECOVERY, 11)
    assert LINK_FIELDS[493] == (RECOVERY, 17) and 490 not in LINK_FIELDS
    assert {c for c, _ in LINK_FIELDS.values()} == set(nvlink.COUNTERS)
    assert not {409, 419, 429, 439} & set(LINK_FIELDS)  # the totals stay catalogue fields


def test_link_status_keeps_up_and_down_links_only() -> None:
    engine = hgx()
    engine.link_states[0] = [LS_UP, LS_DISABLED, LS_DOWN, LS_NOT_SUPPORTED, LS_UP]
    states = link_states(engine.link_status())
    assert states.gpus == {0: {0: True, 2: False, 4: True}, 1: {}}
    assert states.switches == {8: {1: True, 2: True, 3: False}, 9: {0: True}}


def test_blank_strings_and_samples_are_absent() -> None:
    assert raw_value(Sample(CLUSTER), dcgmvalue) == CLUSTER
    assert raw_value(Sample(DCGM_STR_NOT_SUPPORTED), dcgmvalue) is None
    assert raw_value(Sample("<<<NULL>>>"), dcgmvalue) is None
    assert raw_value(Sample(None), dcgmvalue) is None  # a value whose status was not DCGM_ST_OK
    assert raw_value(Sample(DCGM_INT64_NOT_SUPPORTED), dcgmvalue) is None
    assert raw_value(Sample(7), dcgmvalue) == 7.0


def test_fabric_from_the_fabric_manager_fields() -> None:
    assert fabric_reading({170: 3.0, 171: 0.0, 172: CLUSTER.upper(), 173: 32766.0}) == FabricReading(
        3, 0, 32766, CLUSTER
    )
    # Failure (4): NVML's COMPLETED with an error status; the status is DCGM's dcgmReturn_t of it.
    assert fabric_reading({170: 4.0, 171: -8.0}) == FabricReading(3, -8, 0, "")
    assert fabric_reading({170: 4.0}) == FabricReading(3, -3, 0, "")
    assert fabric_reading({170: 1.0}) == FabricReading(1, 0, 0, "")  # Fabric Manager not started
    for no_fabric in ({170: 0.0}, {170: 5.0}, {170: 6.0}, {}):  # not supported, unrecognized, NVML too old
        assert fabric_reading(no_fabric) is None


# --- the backend ----------------------------------------------------------------------------------


def test_links_counters_and_fabric_per_gpu() -> None:
    b = make(hgx())
    g0, g1 = b.read_links()
    assert [r.link for r in g0.links] == list(range(18))
    assert [r.link for r in g0.links if not r.up] == [17]
    assert g0.links[3] == LinkReading(3, True, dict.fromkeys(nvlink.COUNTERS, 0) | {REPLAY: 7})
    assert g0.links[17].counters == {FLIT: 2, "NVML_NVLINK_ERROR_DL_CRC_DATA": 0, REPLAY: 0}  # no recovery
    assert g0.fabric == FabricReading(3, 0, 32766, CLUSTER)
    assert g1.links == [] and g1.fabric is None  # the PCIe GPU: DCGM's blanks, no series


def test_catalogue_fields_count_links_down_and_the_fabric_state() -> None:
    engine = hgx()
    b = make(engine)
    r0, r1 = b.read()
    assert (r0.values["nvlink_links_down"], r0.values["gpu_fabric_state"]) == (1.0, 3.0)
    assert "nvlink_links_down" not in r1.values and "gpu_fabric_state" not in r1.values
    engine.latest[0] |= {170: 4, 171: -8}  # the registration failed
    assert b.read()[0].values["gpu_fabric_state"] == 4.0
    few = [f for f in FIELDS if f.name == "gpu_temp_c"]
    engine.status_calls = 0
    assert make(engine, fields=few).read()[0].values == {"gpu_temp_c": 45.0, "xid": 0.0}
    assert engine.status_calls == 0  # fields not asked for: DCGM not asked either


def test_link_status_not_supported_leaves_the_fabric() -> None:
    engine = hgx()
    engine.link_status_error = NOT_SUPPORTED
    b = make(engine)
    g0, _ = b.read_links()
    assert g0.links == [] and g0.fabric is not None
    r0, _ = b.read()
    assert "nvlink_links_down" not in r0.values and r0.values["gpu_fabric_state"] == 3.0


def test_a_failing_link_status_fails_the_link_read_but_not_the_sample() -> None:
    engine = hgx()
    b = make(engine)
    engine.link_status_error = -21  # the host engine went away between reads
    try:
        b.read_links()
    except BackendError as err:
        assert "reading NVLink links from DCGM" in str(err)
    else:
        raise AssertionError("a failing DCGM read of the links must raise BackendError")
    r0, _ = b.read()
    assert r0.values["gpu_temp_c"] == 45.0 and "nvlink_links_down" not in r0.values


def test_a_failing_link_status_is_said_once_until_it_recovers(caplog: pytest.LogCaptureFixture) -> None:
    engine = hgx()
    b = make(engine)
    engine.link_status_error = -21
    for _ in range(3):
        b.read()
    engine.link_status_error = None
    assert b.read()[0].values["nvlink_links_down"] == 1.0
    engine.link_status_error = -21
    b.read()
    said = [r for r in caplog.records if "nvlink_links_down and gpu_fabric_state absent" in r.getMessage()]
    assert len(said) == 2  # once per outage, not at every sample


def test_a_refused_watch_costs_only_the_counters() -> None:
    engine = hgx()
    engine.refuse_watch = {400}
    g0, _ = make(engine).read_links()
    assert len(g0.links) == 18 and all(r.counters == {} for r in g0.links) and g0.fabric is None


# --- NVSwitches ------------------------------------------------------------------------------------


def test_switches_are_dcgms_switch_entities_with_their_pci_ids() -> None:
    engine = hgx()
    b = make(engine)
    expected = [SwitchInfo("8", "00000000:05:00.0", "NVSWITCH-8"), SwitchInfo("9", "00000000:06:00.0")]
    assert b.switches() == expected and list_switches(b) == expected
    assert sorted(engine.switch_watches[0]) == [856, 857, 858, 866, 867, 868, 869, 878]
    s8, s9 = b.read_switches()
    assert s8.values == {
        "DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS": 0.0,
        "DCGM_FI_DEV_NVSWITCH_NON_FATAL_ERRORS": 12028.0,
        "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT": 41.0,
    }
    assert s8.links == {1: True, 2: True, 3: False} and s9.values["DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS"] == 1004.0


def test_a_switch_without_pci_fields_is_listed_without_a_bus_id() -> None:
    engine = hgx()
    del engine.switches[9][867]
    assert make(engine).switches()[1] == SwitchInfo("9", "")


def test_no_switches_where_dcgm_cannot_see_them() -> None:
    engine = hgx()
    engine.switch_support = False  # DCGM without its NVSwitch library answers NOT_SUPPORTED
    b = make(engine)
    assert b.switches() == [] and b.read_switches() == [] and engine.switch_watches == []


# --- the exporter ------------------------------------------------------------------------------------


def test_the_dcgm_backend_exports_links_fabric_and_switches() -> None:
    b = make(hgx())
    sampling = build_sampling(b, FIELDS, 1.0)
    sampling.sampler.sample_once()
    reg = sampling.registry
    text = generate_latest(reg).decode()  # one scrape: the collectors' statuses follow it
    gpu0 = {"gpu": "0", "UUID": "GPU-dcgm-0", "Hostname": "node-01"}
    assert reg.get_sample_value("gpuhealth_nvlink_link_up", gpu0 | {"link": "17"}) == 0.0
    assert reg.get_sample_value("gpuhealth_nvlink_replay_errors_total", gpu0 | {"link": "3"}) == 7.0
    assert reg.get_sample_value("gpuhealth_fabric_state", gpu0) == 3.0
    sw9 = {"nvswitch": "9", "Hostname": "node-01"}
    assert reg.get_sample_value("DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS", sw9) == 1004.0
    assert (
        reg.get_sample_value("gpuhealth_nvswitch_link_up", {"nvswitch": "8", "Hostname": "node-01", "link": "3"}) == 0.0
    )
    assert reg.get_sample_value("gpuhealth_collector_success", {"collector": "nvswitch"}) == 1.0
    assert 'gpu="1"' not in "\n".join(line for line in text.splitlines() if line.startswith("gpuhealth_nvlink_"))
    names = {s.name for fam in reg.collect() for s in fam.samples}
    assert names >= nvlink.METRICS  # every series of core.nvlink's table, the switches' included

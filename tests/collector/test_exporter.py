from __future__ import annotations

import gzip
import math
import socket
import threading
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from collector import exporter
from collector.backends.base import XidEvent
from collector.backends.sim import SimBackend
from collector.exporter import ExporterServer, GpuCollector, SelfCollector, accepts_gzip, render
from collector.kernel_log import FleetKernelLogs, LogXids, simulated_kernel_logs
from collector.nvlink import NvlinkCollector
from collector.sampler import Sampler
from core import catalog
from core.labels import HOSTNAME
from simulator.fleet import FaultMode, FaultSpec
from tests.collector.helpers import FakeClock, ScriptedBackend, gpu_labels, registry

GOLDEN = Path(__file__).parent / "golden"


def test_values_under_dcgm_names_and_labels() -> None:
    b = ScriptedBackend(2)
    b.values[0].update({"ecc_sbe_volatile": 7.0, "pcie_replay_count": 3.0})
    s = Sampler(b, 10.0, clock=FakeClock())
    s.sample_once()
    reg = registry(s)
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 0)) == 40.0
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 1)) == 41.0
    assert reg.get_sample_value("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu_labels(b, 0)) == 7.0
    assert reg.get_sample_value("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu_labels(b, 1)) is None
    assert reg.get_sample_value("DCGM_FI_DEV_XID_ERRORS", gpu_labels(b, 0)) == 0.0
    assert reg.get_sample_value("gpuhealth_gpus") == 2.0
    assert reg.get_sample_value("gpuhealth_gpu_lost", gpu_labels(b, 1)) == 0.0


def test_newer_hostname_label_spelling() -> None:
    b = ScriptedBackend(1)
    s = Sampler(b, 10.0, clock=FakeClock())
    s.sample_once()
    reg = registry(s, host_label="hostname")
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 0, "hostname")) == 40.0


def test_missing_nan_and_lost_give_fewer_samples_never_errors() -> None:
    b = ScriptedBackend(3)
    b.values[0]["power_w"] = math.nan
    b.lost = {2}
    s = Sampler(b, 10.0, clock=FakeClock())
    s.sample_once()
    reg = registry(s)
    assert reg.get_sample_value("DCGM_FI_DEV_POWER_USAGE", gpu_labels(b, 0)) is None
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 2)) is None
    assert reg.get_sample_value("gpuhealth_gpu_lost", gpu_labels(b, 2)) == 1.0
    assert reg.get_sample_value("gpuhealth_gpus") == 2.0
    text = render(reg.collect()).decode()
    assert "DCGM_FI_DEV_POWER_USAGE" not in text, "a family with no samples is not rendered"


def test_xid_counter_per_code() -> None:
    b = ScriptedBackend(1)
    u = b.infos[0].uuid
    b.events = [XidEvent(u, 48, 0.0), XidEvent(u, 48, 1.0), XidEvent(u, 92, 2.0)]
    s = Sampler(b, 10.0, clock=FakeClock())
    s.sample_once()
    reg = registry(s)
    assert reg.get_sample_value("gpuhealth_xid_errors_total", {**gpu_labels(b, 0), "xid": "48"}) == 2.0
    assert reg.get_sample_value("gpuhealth_xid_errors_total", {**gpu_labels(b, 0), "xid": "92"}) == 1.0
    assert reg.get_sample_value("DCGM_FI_DEV_XID_ERRORS", gpu_labels(b, 0)) == 92.0


def test_render_keeps_dcgm_counter_names_and_parses_back() -> None:
    b = ScriptedBackend(2)
    b.values[0]["pcie_replay_count"] = 5.0
    b.events = [XidEvent(b.infos[1].uuid, 79, 0.0)]
    b.infos[1] = type(b.infos[1])(**{**b.infos[1].__dict__, "model_name": 'odd "name"\\x\n'})
    s = Sampler(b, 10.0, clock=FakeClock())
    s.sample_once()
    text = render(registry(s).collect()).decode()
    assert "# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter\n" in text
    assert "# TYPE gpuhealth_xid_errors_total counter\n" in text
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER_total" not in text
    parsed = {
        (s_.name, tuple(sorted(s_.labels.items()))): s_.value
        for fam in text_string_to_metric_families(text)
        for s_ in fam.samples
    }
    want = gpu_labels(b, 1)
    key = ("DCGM_FI_DEV_GPU_TEMP", tuple(sorted(want.items())))
    assert parsed[key] == 41.0, "escaped label values must round-trip"


def test_families_built_once_per_snapshot() -> None:
    b = ScriptedBackend(1)
    s = Sampler(b, 10.0, clock=FakeClock())
    col = GpuCollector(lambda: s.latest, catalog.select())
    assert list(col.collect()) == []
    s.sample_once()
    first = list(col.collect())
    assert next(iter(col.collect())) is first[0]
    b.values[0]["gpu_temp_c"] = 90.0
    s.sample_once()
    again = list(col.collect())
    assert again[0] is not first[0]
    assert again[0].samples[0].value == 90.0


def test_self_collector() -> None:
    b = ScriptedBackend(1)
    clock = FakeClock()
    s = Sampler(b, 10.0, clock=clock)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SelfCollector(s))
    assert reg.get_sample_value("gpuhealth_collector_success", {"collector": "sample"}) == 0.0
    s.sample_once()
    clock.t += 4.0
    assert reg.get_sample_value("gpuhealth_collector_success", {"collector": "sample"}) == 1.0
    assert reg.get_sample_value("gpuhealth_collector_success", {"collector": "xid"}) == 1.0
    assert reg.get_sample_value("gpuhealth_sample_age_seconds") == 4.0
    assert reg.get_sample_value("gpuhealth_collector_duration_seconds", {"collector": "sample"}) >= 0
    b.fail_with = RuntimeError("boom")
    s.sample_once()
    assert reg.get_sample_value("gpuhealth_collector_success", {"collector": "sample"}) == 0.0


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def test_http_endpoints() -> None:
    b = ScriptedBackend(2)
    s = Sampler(b, 10.0)
    reg = registry(s)
    srv = ExporterServer(reg, s.health, "127.0.0.1", 0)
    srv.start()
    try:
        base = f"http://127.0.0.1:{srv.port}"
        code, _, body = _get(base + "/healthz")
        assert (code, body) == (503, "no sample taken yet\n")
        s.sample_once()
        code, ctype, body = _get(base + "/metrics")
        assert code == 200 and ctype.startswith("text/plain; version=0.0.4")
        assert body.count("DCGM_FI_DEV_GPU_TEMP{") == 2
        assert _get(base + "/healthz")[:3:2] == (200, "ok: 2 GPU(s)\n")
        assert _get(base + "/nope")[0] == 404
    finally:
        srv.stop()


def test_golden_metrics_of_simulated_node(golden, tmp_path: Path) -> None:
    """The whole per-GPU /metrics text of the sim backend at a fixed seed, on a node with an NVLink fabric
    (failing at 18 s: Fabric Manager stops) and a kernel log (GPU 3's XID 79), as `collect` exports it
    (collector.run.build_sampling) less its own timings."""
    b = SimBackend(
        nodes=1, gpus_per_node=8, seed=7, step_s=10.0, kernel_log=tmp_path / "kmsg",
        faults=[FaultSpec(3, FaultMode.OFFBUS, 0.001), FaultSpec(1, FaultMode.ECC, 0.01),
                FaultSpec(5, FaultMode.FABRIC, 0.005)],
    )  # fmt: skip
    logs = simulated_kernel_logs(b)
    s = Sampler(b, 10.0, clock=FakeClock(), augment=(LogXids(logs),))
    for _ in range(3):
        s.sample_once()
    reg = registry(s, fields=catalog.select())
    reg.register(FleetKernelLogs(logs, lambda: s.latest.xid_counts if s.latest else {}, HOSTNAME))
    reg.register(NvlinkCollector(b.read_links))
    golden(GOLDEN / "sim_metrics.txt", render(reg.collect()).decode())


@pytest.mark.parametrize("gpus", [1, 16])
def test_sim_node_sizes(gpus: int) -> None:
    s = Sampler(SimBackend(gpus_per_node=gpus, seed=1), 10.0, clock=FakeClock())
    s.sample_once()
    reg = registry(s)
    assert reg.get_sample_value("gpuhealth_gpus") == gpus


def test_render_with_fresh_label_dicts_per_family() -> None:
    """Label dicts freed between families must not lend their escaped text to new ones."""
    from prometheus_client.core import GaugeMetricFamily

    class Fresh:
        def collect(self):
            for k in range(100):
                fam = GaugeMetricFamily(f"m{k}", "h", labels=["gpu"])
                fam.add_metric([str(k)], float(k))
                yield fam

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Fresh())
    lines = [ln for ln in render(reg.collect()).decode().splitlines() if not ln.startswith("#")]
    assert lines == [f'm{k}{{gpu="{k}"}} {float(k)}' for k in range(100)]


def test_stop_without_start_returns() -> None:
    srv = ExporterServer(CollectorRegistry(), lambda: (True, "ok"), "127.0.0.1", 0)
    srv.stop()


def test_driver_version_label_on_every_series_of_a_gpu_unless_blank() -> None:
    """dcgm-exporter's `DCGM_FI_DRIVER_VERSION, label` row: the label on all of a GPU's series."""
    b = ScriptedBackend(2)
    b.infos[0] = type(b.infos[0])(**{**b.infos[0].__dict__, "driver_version": "570.124.06"})
    b.events = [XidEvent(b.infos[0].uuid, 48, 0.0)]
    s = Sampler(b, 10.0, clock=FakeClock())
    s.sample_once()
    with_label = {**gpu_labels(b, 0), "DCGM_FI_DRIVER_VERSION": "570.124.06"}
    reg = registry(s)
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", with_label) == 40.0
    assert reg.get_sample_value("gpuhealth_xid_errors_total", {**with_label, "xid": "48"}) == 1.0
    assert reg.get_sample_value("gpuhealth_gpu_lost", with_label) == 0.0
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 1)) == 41.0  # no driver version: no label
    bare = CollectorRegistry(auto_describe=False)
    bare.register(GpuCollector(lambda: s.latest, catalog.select(), label_fields=()))  # a counters file without it
    assert bare.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 0)) == 40.0


@pytest.mark.parametrize(
    ("header", "gzipped"),
    [
        ("gzip", True),
        ("deflate, gzip;q=0.5", True),
        ("x-gzip", True),
        ("*", True),
        ("gzip;q=0, *", False),
        ("identity", False),
        ("deflate, br", False),
        ("", False),
        (None, False),
        ("gzip;q=nonsense", False),
    ],
)
def test_accept_encoding(header: str | None, gzipped: bool) -> None:
    assert accepts_gzip(header) is gzipped


def test_metrics_gzip_only_when_asked() -> None:
    s = Sampler(SimBackend(gpus_per_node=8, seed=1), 10.0, clock=FakeClock())
    s.sample_once()
    srv = ExporterServer(registry(s, fields=catalog.select()), s.health, "127.0.0.1", 0)
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:  # urllib sends no Accept-Encoding
            plain_headers, plain = r.headers, r.read()
        ask = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(ask, timeout=5) as r:
            gz_headers, packed = r.headers, r.read()
    finally:
        srv.stop()
    assert plain_headers["Content-Encoding"] is None and plain_headers["Vary"] == "Accept-Encoding"
    assert gz_headers["Content-Encoding"] == "gzip" and gz_headers["Vary"] == "Accept-Encoding"
    assert int(gz_headers["Content-Length"]) == len(packed) < len(plain) / 5
    assert gzip.decompress(packed) == plain  # one snapshot: the same text either way


def test_silent_and_slow_connections_are_closed_after_the_head_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: each silent connection held a thread of the endpoint for good (1,001 of them: 1,001 threads)."""
    monkeypatch.setattr(exporter, "HEADER_TIMEOUT_S", 1.0, raising=False)
    srv = ExporterServer(CollectorRegistry(), lambda: (True, "ok"), "127.0.0.1", 0)
    srv.start()
    threads = threading.active_count()
    try:
        with ExitStack() as stack:
            silent = [stack.enter_context(socket.create_connection(("127.0.0.1", srv.port))) for _ in range(50)]
            slow = stack.enter_context(socket.create_connection(("127.0.0.1", srv.port)))
            started = time.monotonic()
            assert _get(f"http://127.0.0.1:{srv.port}/healthz")[0] == 200, "the others are served meanwhile"
            cut_off_s = None
            for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100:  # in time for any per-read timeout
                try:
                    slow.sendall(bytes([byte]))
                except OSError:
                    cut_off_s = time.monotonic() - started
                    break
                time.sleep(0.1)
            assert cut_off_s is not None and cut_off_s < 3.0, "a head sent a byte at a time has the same deadline"
            for sock in silent:
                sock.settimeout(5)
                assert sock.recv(1) == b"", "closed by the endpoint, not by the client's timeout"
        deadline = time.monotonic() + 5
        while threading.active_count() > threads and time.monotonic() < deadline:
            time.sleep(0.05)
        assert threading.active_count() <= threads, "their threads are gone"
    finally:
        srv.stop()

"""`import_history` and `gpuhealth history import` against a fake Prometheus (httpx.MockTransport)."""

from __future__ import annotations

import itertools
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from core import catalog, history
from core.history import HistoryError
from core.labels import HOSTNAME
from core.prom_import import MAX_POINTS, SkippedSeries, import_history
from gpuhealth.cli.history import history_app, parse_time

URL = "http://prom.test:9090"
START = datetime(2026, 1, 1, tzinfo=UTC)
HOUR_MS = 3_600_000
H100 = "NVIDIA H100 80GB HBM3"


def gpu_labels(i: int, host_label: str = HOSTNAME, **extra: str) -> dict[str, str]:
    return {
        "gpu": str(i), "UUID": f"GPU-{i}", "device": f"nvidia{i}", "modelName": H100,
        host_label: "node-a", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0", **extra,
    }  # fmt: skip


@dataclass
class FakePrometheus:
    """Enough of Prometheus's HTTP API for the importer: label values and query_range."""

    series: dict[str, list[tuple[dict[str, str], dict[int, float]]]] = field(default_factory=dict)
    """metric name -> [(labels, {time ms: value})]"""
    requests: list[httpx.Request] = field(default_factory=list)
    fail: Callable[[httpx.Request], httpx.Response | None] = lambda _req: None

    def add(self, metric: str, labels: dict[str, str], points: dict[int, float]) -> None:
        self.series.setdefault(metric, []).append((labels, points))

    def handler(self, req: httpx.Request) -> httpx.Response:
        self.requests.append(req)
        failed = self.fail(req)
        if failed is not None:
            return failed
        q = req.url.params
        if req.url.path == "/api/v1/label/__name__/values":
            return ok(sorted(self.series))
        if req.url.path == "/api/v1/query_range":
            start, end, step = (round(float(q[k]) * 1000) for k in ("start", "end", "step"))
            if (end - start) // step + 1 > MAX_POINTS:
                return error(400, "bad_data", "exceeded maximum resolution of 11,000 points per timeseries")
            m = re.fullmatch(r"max by \((?P<by>[^)]*)\) \((?P<name>\w+)\)", q["query"])
            assert m, q["query"]
            by = [s.strip() for s in m["by"].split(",")]
            grouped: dict[tuple[tuple[str, str], ...], dict[int, float]] = {}
            for labels, points in self.series.get(m["name"], []):
                key = tuple((k, v) for k, v in sorted(labels.items()) if k in by)
                acc = grouped.setdefault(key, {})
                for t in range(start, end + 1, step):
                    if t in points:
                        acc[t] = max(acc.get(t, -math.inf), points[t])
            result = [
                {"metric": dict(k), "values": [[t / 1000, _fmt(v)] for t, v in sorted(pts.items())]}
                for k, pts in grouped.items()
                if pts
            ]
            return ok({"resultType": "matrix", "result": result})
        return httpx.Response(404, text="404 page not found")

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handler))

    def ranges(self, metric: str) -> list[tuple[int, int, int]]:
        """(start ms, end ms, points) of every query_range asked for `metric`, in order."""
        out = []
        for r in self.requests:
            if r.url.path.endswith("query_range") and r.url.params["query"].endswith(f"({metric})"):
                s, e, st = (round(float(r.url.params[k]) * 1000) for k in ("start", "end", "step"))
                out.append((s, e, (e - s) // st + 1))
        return out


def _fmt(v: float) -> str:
    return "NaN" if math.isnan(v) else ("+Inf" if v == math.inf else repr(float(v)))


def ok(data: Any) -> httpx.Response:
    return httpx.Response(200, json={"status": "success", "data": data})


def error(status: int, kind: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"status": "error", "errorType": kind, "error": message})


def t_ms(hour: int) -> int:
    return int(START.timestamp() * 1000) + hour * HOUR_MS


def fleet(hours: int = 25) -> FakePrometheus:
    """Two GPUs with hourly temperature and SBE counts, plus a power limit (not a history column)."""
    p = FakePrometheus()
    for i in range(2):
        p.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(i), {t_ms(h): 40.0 + i + h / 4 for h in range(hours)})
        p.add("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", gpu_labels(i), {t_ms(h): float(h * i) for h in range(hours)})
        p.add("DCGM_FI_DEV_POWER_MGMT_LIMIT", gpu_labels(i), {t_ms(h): 700.0 for h in range(hours)})
    p.add("up", {"instance": "x"}, {t_ms(0): 1.0})
    return p


def test_chunks_queries_and_joins_per_gpu() -> None:
    prom = fleet(25)
    calls: list[tuple[int, int]] = []
    frame = import_history(
        URL, START, START + timedelta(hours=24), 3600, chunk_points=10,
        progress=lambda done, total: calls.append((done, total)), client=prom.client(),
    )  # fmt: skip
    ranges = prom.ranges("DCGM_FI_DEV_GPU_TEMP")
    assert [n for _, _, n in ranges] == [10, 10, 5], "25 steps in chunks of at most 10"
    assert all(b[0] == a[1] + HOUR_MS for a, b in itertools.pairwise(ranges)), "no gap, no overlap"
    assert calls[-1] == (9, 9) and len(calls) == 9, "3 metrics on the server x 3 chunks"
    assert len(frame) == 50 and sorted(frame["gpu_uuid"].unique()) == ["GPU-0", "GPU-1"]
    assert list(frame.columns[:5]) == list(catalog.IDENTITY_COLUMNS)
    for c in catalog.HISTORY_COLUMNS:
        assert c in frame.columns, "the fixed history columns are always there"
    assert "power_limit_w" in frame.columns, "other catalogue fields found on the server are imported"
    assert frame["memory_temp_c"].isna().all()
    g1 = frame[frame["gpu_uuid"] == "GPU-1"].reset_index(drop=True)
    assert g1["timestamp"].tolist() == [pd.Timestamp(START) + pd.Timedelta(hours=h) for h in range(25)]
    assert g1["gpu_temp_c"].tolist() == pytest.approx([41.0 + h / 4 for h in range(25)])
    assert g1["ecc_sbe_volatile"].tolist() == [float(h) for h in range(25)]
    assert (g1["gpu_index"] == 1).all() and (g1["hostname"] == "node-a").all()
    assert (g1["model_name"] == H100).all()
    assert history.validate(frame).equals(frame)


def test_rows_come_in_time_order(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="core.history"):
        frame = import_history(URL, START, START + timedelta(hours=5), 3600, client=fleet(6).client())
    assert frame["timestamp"].is_monotonic_increasing
    assert "out of time order" not in caplog.text  # a fleet-mode pull every minute would log it each time


def test_dcgm_exporter_labels_and_duplicate_series() -> None:
    prom = FakePrometheus()
    # dcgm-exporter >= 2026: lowercase hostname; a pod label that changed half-way: two
    # series of one GPU, which max by (...) folds back into one.
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(0, "hostname", pod="a"), {t_ms(h): 50.0 for h in range(3)})
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(0, "hostname", pod="b"), {t_ms(h): 60.0 for h in range(2, 5)})
    # Only Prometheus's instance label names the host; no gpu label either.
    only_instance = {"UUID": "GPU-9", "device": "nvidia3", "modelName": H100, "instance": "10.0.0.9:9400"}
    prom.add("DCGM_FI_DEV_GPU_TEMP", only_instance, {t_ms(0): 30.0})
    prom.add("DCGM_FI_DEV_GPU_TEMP", {"instance": "agg"}, {t_ms(0): 1.0})  # no UUID: not a GPU
    frame = import_history(URL, START, START + timedelta(hours=4), 3600, client=prom.client())
    g0 = frame[frame["gpu_uuid"] == "GPU-0"]
    assert g0["gpu_temp_c"].tolist() == [50.0, 50.0, 60.0, 60.0, 60.0]
    assert (g0["hostname"] == "node-a").all()
    (g9,) = frame[frame["gpu_uuid"] == "GPU-9"].itertuples()
    assert (g9.hostname, g9.gpu_index, g9.gpu_temp_c) == ("10.0.0.9", 3, 30.0)
    assert len(frame) == 6


BAD_SERIES = [
    pytest.param({"gpu": "\u00b2"}, "bad_index", id="gpu-superscript-two"),  # isdigit() yes, int() no
    pytest.param({"gpu": "2147483648", "device": "nvidia7"}, "index_out_of_range", id="gpu-past-int32"),
    pytest.param({"gpu": "9" * 25}, "index_out_of_range", id="gpu-past-int64"),
    pytest.param({"gpu": "", "device": "nvidia" + "9" * 20}, "index_out_of_range", id="device-past-int64"),
    pytest.param({"Hostname": "h" * 300}, "label_too_long", id="hostname-300"),
    pytest.param({"modelName": "m" * 256}, "label_too_long", id="model-256"),
    pytest.param({"UUID": "GPU-" + "u" * 61}, "label_too_long", id="uuid-65"),
    pytest.param({"Hostname": "node-\x00b"}, "nul_byte", id="hostname-nul"),
    pytest.param({"UUID": "GPU-\x00"}, "nul_byte", id="uuid-nul"),
]


@pytest.mark.parametrize(("odd", "reason"), BAD_SERIES)
def test_a_series_with_an_odd_label_is_skipped_and_every_other_gpu_imported(odd: dict[str, str], reason: str) -> None:
    """Issue 55.2: one such series stopped every import (ValueError, OverflowError, a frame refused whole)."""
    prom = fleet(3)
    bad = gpu_labels(5) | {"UUID": "GPU-5"} | odd
    prom.add("DCGM_FI_DEV_GPU_TEMP", bad, {t_ms(h): 50.0 for h in range(3)})
    prom.add("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", bad, {t_ms(h): 0.0 for h in range(3)})
    skipped: list[SkippedSeries] = []
    frame = import_history(URL, START, START + timedelta(hours=2), 3600, client=prom.client(), on_skip=skipped.append)
    assert sorted(frame["gpu_uuid"].unique()) == ["GPU-0", "GPU-1"] and len(frame) == 6
    assert [s.reason for s in skipped] == [reason], "one series, named once, though two metrics carry it"
    assert ("UUID", bad["UUID"]) in skipped[0].labels
    name = skipped[0].name()
    assert "\x00" not in name and len(name) < 400, "a name safe for a log line"


def test_a_series_with_an_infinite_value_is_skipped() -> None:
    prom = fleet(3)
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(5), {t_ms(0): math.inf, t_ms(1): 50.0})
    prom.add("DCGM_FI_DEV_POWER_USAGE", gpu_labels(5), {t_ms(0): 1e39})  # a gauge past float32
    skipped: list[SkippedSeries] = []
    frame = import_history(URL, START, START + timedelta(hours=2), 3600, client=prom.client(), on_skip=skipped.append)
    assert sorted(s.reason for s in skipped) == ["bad_value", "bad_value"]
    assert sorted(frame["gpu_uuid"].unique()) == ["GPU-0", "GPU-1"], "GPU-5 had no usable series left"


def test_skipped_series_are_logged_without_a_callback(caplog: pytest.LogCaptureFixture) -> None:
    prom = fleet(3)
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(5) | {"gpu": "\u00b2"}, {t_ms(0): 50.0})
    with caplog.at_level(logging.WARNING, logger="core.prom_import"):
        frame = import_history(URL, START, START + timedelta(hours=2), 3600, client=prom.client())
    assert len(frame) == 6
    assert caplog.text.count("bad_index") == 1 and "GPU-5" in caplog.text


def test_gpu_without_index_labels_is_unknown() -> None:
    prom = FakePrometheus()
    nameless = {k: v for k, v in gpu_labels(3).items() if k not in ("gpu", "device")}
    prom.add("DCGM_FI_DEV_GPU_TEMP", nameless, {t_ms(0): 30.0})
    frame = import_history(URL, START, START, 3600, client=prom.client())
    assert frame["gpu_index"].tolist() == [-1]


def test_columns_limit_what_is_queried() -> None:
    prom = fleet(3)
    frame = import_history(
        URL, START, START + timedelta(hours=2), 3600, columns=["gpu_temp_c", "memory_temp_c"],
        client=prom.client(),
    )  # fmt: skip
    assert history.metric_columns(frame) == ["gpu_temp_c", "memory_temp_c"]
    asked = {r.url.params["query"] for r in prom.requests if r.url.path.endswith("query_range")}
    assert asked == {"max by (UUID, gpu, device, modelName, Hostname, hostname, instance) (DCGM_FI_DEV_GPU_TEMP)"}, (
        "a column the server lacks is not queried"
    )
    with pytest.raises(HistoryError, match="unknown field"):
        import_history(URL, START, START, 60, columns=["gpu_temp_c", "nope"], client=prom.client())


def test_prometheus_error_json_is_one_line() -> None:
    prom = fleet(3)
    prom.fail = lambda req: (
        error(422, "execution", "query processing would load too many samples\ninto memory")
        if req.url.path.endswith("query_range")
        else None
    )
    with pytest.raises(HistoryError) as info:
        import_history(URL, START, START + timedelta(hours=2), 3600, client=prom.client())
    msg = str(info.value)
    assert URL in msg and "HTTP 422" in msg and "execution: query processing would load too many" in msg
    assert "\n" not in msg


def test_chunks_stay_within_prometheus_points_limit() -> None:
    prom = fleet(3)  # the fake refuses > 11,000 points per query, as Prometheus does
    with pytest.raises(HistoryError, match=r"chunk_points must be 1\.\.11000"):
        import_history(URL, START, START, 60, chunk_points=20_000, client=prom.client())
    frame = import_history(
        URL, START, START + timedelta(days=30), 60, columns=["gpu_temp_c"], chunk_points=MAX_POINTS,
        client=prom.client(),
    )  # fmt: skip
    assert [n for _, _, n in prom.ranges("DCGM_FI_DEV_GPU_TEMP")] == [11_000] * 3 + [43_201 - 33_000]
    assert len(frame) == 6, "3 hourly samples of 2 GPUs, found at their minutes"


def test_not_prometheus_is_named() -> None:
    prom = FakePrometheus()
    prom.fail = lambda req: httpx.Response(200, text="<html>Grafana</html>", headers={"content-type": "text/html"})
    with pytest.raises(HistoryError, match=r"not a Prometheus API answer .*HTTP 200, text/html"):
        import_history(URL, START, START, 60, client=prom.client())


def test_connection_refused_names_the_url() -> None:
    def refuse(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=req)

    client = httpx.Client(transport=httpx.MockTransport(refuse))
    with pytest.raises(HistoryError, match=r"^Prometheus at http://prom.test:9090: cannot connect \(.*refused"):
        import_history(URL, START, START, 60, client=client)


def test_no_series_at_all() -> None:
    prom = FakePrometheus()
    prom.add("up", {"instance": "x"}, {t_ms(0): 1.0})
    with pytest.raises(HistoryError, match="no GPU series found between 2026-01-01T00:00:00Z and 2026-01-02T00:00:00Z"):
        import_history(URL, START, START + timedelta(days=1), 3600, client=prom.client())
    prom = fleet(3)  # series exist, but not in the asked span
    with pytest.raises(HistoryError, match="no GPU series found"):
        import_history(URL, START + timedelta(days=9), START + timedelta(days=10), 3600, client=prom.client())


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"end": START - timedelta(hours=1)}, "start 2026-01-01T00:00:00Z is after end"),
        ({"step_s": 0.0}, "step must be at least 1ms"),
    ],
)
def test_bad_arguments(kw: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"url": URL, "start": START, "end": START, "step_s": 60.0, **kw}
    with pytest.raises(HistoryError, match=re.escape(message)):
        import_history(**args, client=fleet(1).client())


# --- gpuhealth history import ------------------------------------------------------------

cli = typer.Typer()
cli.add_typer(history_app, name="history")
runner = CliRunner()


def test_parse_time() -> None:
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert parse_time("now", now) == now
    assert parse_time("now-7d", now) == now - timedelta(days=7)
    assert parse_time("now - 90m", now) == now - timedelta(minutes=90)
    assert parse_time("2026-01-31T12:00:00Z") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert parse_time("2026-01-31") == datetime(2026, 1, 31, tzinfo=UTC), "naive times are UTC"
    assert parse_time("2026-01-31T14:00:00+02:00") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    with pytest.raises(ValueError, match="invalid time 'yesterday'"):
        parse_time("yesterday")
    with pytest.raises(ValueError, match="invalid duration"):
        parse_time("now-soon")


@pytest.fixture
def fake_prometheus(monkeypatch: pytest.MonkeyPatch) -> FakePrometheus:
    """Every httpx.Client made during the test talks to a fake Prometheus."""
    prom = fleet(25)
    real = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: real(transport=httpx.MockTransport(prom.handler), **kw))
    return prom


def test_cli_imports_to_a_file(fake_prometheus: FakePrometheus, tmp_path: Path) -> None:
    out = tmp_path / "h.parquet"
    result = runner.invoke(
        cli,
        ["history", "import", "--prometheus", URL, "--start", "2026-01-01T00:00:00Z",
         "--end", "2026-01-02T00:00:00Z", "--step", "1h", "--out", str(out),
         "--columns", "gpu_temp_c,ecc_sbe_volatile"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        f"gpuhealth history import: 50 rows, 2 GPUs, 2026-01-01T00:00:00Z .. 2026-01-02T00:00:00Z, 2 columns -> {out}"
    )
    frame = history.read(out)
    assert len(frame) == 50 and history.metric_columns(frame) == ["gpu_temp_c", "ecc_sbe_volatile"]
    assert np.isclose(frame["gpu_temp_c"].iloc[-1], 41.0 + 24 / 4)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--step", "often"], "invalid duration 'often'"),
        (["--start", "last tuesday"], "invalid time 'last tuesday'"),
        (["--out", "h.json"], "h.json: use one of .parquet, .pq, .csv, .csv.gz"),
        (["--columns", "gpu_temp_c,bogus"], "unknown field(s): bogus"),
        (["--start", "2026-02-01", "--end", "2026-01-01"], "is after end"),
    ],
)
def test_cli_errors_are_one_line(fake_prometheus: FakePrometheus, tmp_path: Path, args: list[str], needle: str) -> None:
    base = ["history", "import", "--prometheus", URL, "--out", str(tmp_path / "h.parquet")]
    result = runner.invoke(cli, [*base, *args])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], result.stderr
    assert result.stdout == ""


def test_cli_connection_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def refuse(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=req)

    real = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: real(transport=httpx.MockTransport(refuse), **kw))
    result = runner.invoke(cli, ["history", "import", "--prometheus", URL, "--out", str(tmp_path / "h.csv")])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: Prometheus at {URL}: cannot connect ([Errno 111] Connection refused)"
    assert not (tmp_path / "h.csv").exists()


def test_the_fabric_and_rail_fields_are_imported_under_the_collectors_names() -> None:
    """Fleet mode: the three columns of the fabric and rail findings (issue 58) from `gpuhealth collect`'s series."""
    prom = fleet(3)
    for i in range(2):
        prom.add("gpuhealth_gpu_fabric_state", gpu_labels(i), {t_ms(h): 1.0 if h == 2 else 3.0 for h in range(3)})
        prom.add("gpuhealth_nvlink_links_down", gpu_labels(i), {t_ms(h): 0.0 for h in range(3)})
        prom.add("gpuhealth_ib_rail_link_downed_total", gpu_labels(i), {t_ms(h): 4.0 * h for h in range(3)})
    frame = import_history(URL, START, START + timedelta(hours=2), 3600, client=prom.client())
    gpu0 = frame[frame["gpu_uuid"] == "GPU-0"]
    assert gpu0["gpu_fabric_state"].tolist() == [3.0, 3.0, 1.0]
    assert gpu0["ib_rail_link_downed"].tolist() == [0.0, 4.0, 8.0] and gpu0["nvlink_links_down"].sum() == 0.0

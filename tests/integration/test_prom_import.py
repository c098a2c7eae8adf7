"""The history round trip through a real Prometheus: frame -> OpenMetrics -> promtool backfill -> import.

A simulated history is written with `write_openmetrics`, turned into TSDB blocks by
`promtool tsdb create-blocks-from openmetrics`, served by the system's Prometheus, and
pulled back with `import_history` (and `gpuhealth history import`). What comes back
must be the frame that went in.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from core import history
from core.history import HistoryError
from core.openmetrics import write_openmetrics
from core.prom_import import import_history
from gpuhealth.cli.history import history_app
from simulator.fleet import FaultMode, FaultSpec, FleetSim
from tests.integration.conftest import Service, free_port, require_tool, start_service

pytestmark = pytest.mark.integration

NODES, GPUS, STEPS = 2, 4, 72
HOUR = 3600.0
LOST_GPU = 5
"""Falls off the bus (XID 79) after 40 simulated hours: its rows end early."""
BACKFILL_DEADLINE_S = 120.0


def simulated_history() -> pd.DataFrame:
    """2 nodes x 4 GPUs x 72 hourly samples, an ECC fault ripening and a GPU that drops out."""
    fleet = FleetSim(nodes=NODES, gpus_per_node=GPUS, seed=11)
    fleet.inject(FaultSpec(1, FaultMode.ECC, hours=60))
    fleet.inject(FaultSpec(LOST_GPU, FaultMode.OFFBUS, hours=40))
    parts = []
    for _ in range(STEPS):
        fleet.step(HOUR)
        live = ~fleet.lost  # a lost GPU reports nothing
        values = {k: v[live] for k, v in fleet.values().items()}
        gpus = [g for g, ok in zip(fleet.gpus, live, strict=True) if ok]
        parts.append(
            pd.DataFrame(
                {
                    "timestamp": pd.to_datetime(np.full(len(gpus), fleet.time), unit="s", utc=True),
                    "hostname": [g.node for g in gpus],
                    "gpu_uuid": [g.uuid for g in gpus],
                    "gpu_index": [g.index for g in gpus],
                    "model_name": [g.model.name for g in gpus],
                    **values,
                }
            )
        )
    frame = history.validate(pd.concat(parts, ignore_index=True))
    # The live fleet reports xid as DCGM does (the last code seen); the history holds the
    # codes of each interval. Those survive export (as the gauge) and import unchanged.
    frame["xid"] = history.xid_from_last_seen(frame, frame["xid"]).astype(frame["xid"].dtype)
    assert (frame["xid"] > 0).any(), "the ECC fault must raise XIDs for the round trip to check them"
    # A sensor that stopped answering for a while: NaN must stay NaN, not become a row of zeros.
    frame.loc[frame["timestamp"] < frame["timestamp"].min() + pd.Timedelta(hours=6), "memory_temp_c"] = np.nan
    return frame


@pytest.fixture(scope="module")
def original() -> pd.DataFrame:
    return simulated_history()


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory, original: pd.DataFrame) -> Iterator[Service]:
    """Prometheus serving TSDB blocks backfilled from the simulated history (no scrape jobs)."""
    promtool = require_tool("promtool")
    prometheus = require_tool("prometheus")
    work = tmp_path_factory.mktemp("prom-import")
    om = work / "history.om"
    assert write_openmetrics(original, om) > 0
    tsdb = work / "tsdb"
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
        capture_output=True,
        text=True,
        timeout=BACKFILL_DEADLINE_S,
    )
    assert done.returncode == 0, f"promtool backfill failed:\n{done.stdout}\n{done.stderr}"
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    cmd = [
        prometheus,
        f"--config.file={config}",
        f"--storage.tsdb.path={tsdb}",
        # The simulated history is in early 2026: keep it whatever today's date is.
        "--storage.tsdb.retention.time=100y",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    svc = start_service("prometheus", cmd, f"http://127.0.0.1:{port}", "/-/ready", work / "prometheus.log")
    yield svc
    svc.stop()


def span(frame: pd.DataFrame) -> tuple[pd.Timestamp, pd.Timestamp]:
    return frame["timestamp"].min(), frame["timestamp"].max()


def assert_same_history(imported: pd.DataFrame, original: pd.DataFrame, min_columns: int = 30) -> None:
    """Same GPUs, same rows, same identity, equal values wherever the import has a column."""
    key = ["gpu_uuid", "timestamp"]
    assert set(imported["gpu_uuid"]) == set(original["gpu_uuid"])
    assert len(imported) == len(original)
    a = imported.sort_values(key, ignore_index=True)
    b = original.sort_values(key, ignore_index=True)
    for col in ["timestamp", "hostname", "gpu_uuid", "gpu_index", "model_name"]:
        assert a[col].tolist() == b[col].tolist(), col
    compared = 0
    for col in history.metric_columns(a):
        if col not in b.columns:
            assert a[col].isna().all(), f"{col} came from nowhere"
            continue
        # float32 tolerance: gauges are float32 in the frame, float64 in Prometheus
        np.testing.assert_allclose(
            a[col].to_numpy(np.float64), b[col].to_numpy(np.float64), rtol=1e-7, equal_nan=True, err_msg=col
        )
        compared += int(a[col].notna().any())
    assert compared >= min_columns, "the columns with data made the round trip"


def test_round_trip_through_prometheus(backfilled: Service, original: pd.DataFrame) -> None:
    start, end = span(original)
    calls: list[tuple[int, int]] = []
    imported = import_history(
        backfilled.url,
        start.to_pydatetime(),
        end.to_pydatetime(),
        HOUR,
        progress=lambda done, total: calls.append((done, total)),
    )
    assert_same_history(imported, original)
    assert calls and calls[-1][0] == calls[-1][1]
    rows = original.groupby("gpu_uuid").size()
    assert (rows < STEPS).sum() == 1, "the scenario has one GPU whose rows end early"
    assert imported.groupby("gpu_uuid").size().to_dict() == rows.to_dict()


def test_small_chunks_give_the_same_history(backfilled: Service, original: pd.DataFrame) -> None:
    start, end = span(original)
    cols = ["gpu_temp_c", "ecc_sbe_aggregate", "xid", "memory_temp_c"]
    imported = import_history(
        backfilled.url, start.to_pydatetime(), end.to_pydatetime(), HOUR, columns=cols, chunk_points=10
    )
    assert history.metric_columns(imported) == cols
    assert_same_history(imported, original[[*history.IDENTITY_COLUMNS, *cols]], min_columns=len(cols))


def test_cli_import_writes_the_same_history(backfilled: Service, original: pd.DataFrame, tmp_path: Path) -> None:
    start, end = span(original)
    app = typer.Typer()
    app.add_typer(history_app, name="history")
    out = tmp_path / "imported.parquet"
    result = CliRunner().invoke(
        app,
        ["history", "import", "--prometheus", backfilled.url, "--start", start.isoformat(),
         "--end", end.isoformat(), "--step", "1h", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"{len(original):,} rows, {NODES * GPUS} GPUs" in result.stdout
    assert_same_history(history.read(out), original)


def test_nothing_in_the_span(backfilled: Service, original: pd.DataFrame) -> None:
    start = original["timestamp"].max() + pd.Timedelta(days=30)
    with pytest.raises(HistoryError, match="no GPU series found between"):
        import_history(backfilled.url, start.to_pydatetime(), (start + pd.Timedelta(days=1)).to_pydatetime(), HOUR)


def test_connection_refused() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(HistoryError, match=f"^Prometheus at {url}: cannot connect"):
        import_history(url, pd.Timestamp("2026-01-01", tz="UTC").to_pydatetime(), pd.Timestamp(
            "2026-01-02", tz="UTC").to_pydatetime(), HOUR)  # fmt: skip

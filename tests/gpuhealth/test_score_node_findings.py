"""`gpuhealth score` applies the fabric and rail node findings, as the service's rounds do (issue 58)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from gpuhealth.cli import app
from simulator.config import SimConfig
from simulator.run import simulate


def test_score_demotes_the_node_whose_fabric_is_not_ready_and_only_from_its_cutoff(tmp_path: Path) -> None:
    frame, _ = simulate(SimConfig(nodes=2, gpus_per_node=2, seed=3), days=1, interval_s=3600)
    late = frame["timestamp"] >= frame["timestamp"].max()
    frame["gpu_fabric_state"] = np.where((frame["hostname"] == "sim-node-01") & late, 1.0, 3.0)
    hist = tmp_path / "h.parquet"
    frame.to_parquet(hist)
    runner = CliRunner()
    now = runner.invoke(app, ["score", "--history", str(hist)])
    assert now.exit_code == 0, now.output
    by_host = {(r["hostname"], r["decision"]) for r in json.loads(now.output)}
    assert by_host == {("sim-node-00", "ok"), ("sim-node-01", "demote")}
    reasons = [x for r in json.loads(now.output) for x in r["reasons"] if x.startswith("fabric not ready")]
    assert len(reasons) == 2 and "2 of 2 GPUs of sim-node-01" in reasons[0]
    before = frame["timestamp"].max() - np.timedelta64(2, "h")
    naive = before.tz_localize(None).isoformat()  # an --at without a zone is UTC, as scoring takes it
    earlier = runner.invoke(app, ["score", "--history", str(hist), "--at", naive])
    assert earlier.exit_code == 0, earlier.output
    assert {r["decision"] for r in json.loads(earlier.output)} == {"ok"}

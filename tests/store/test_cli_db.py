"""`gpuhealth db …` on a SQLite file and against an unreachable PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
from alembic.script import ScriptDirectory

from core import history
from store import Store
from store.engine import alembic_config

HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()


def _gpuhealth(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuhealth.cli", "db", *args], capture_output=True, text=True, timeout=120
    )


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_db_upgrade_creates_a_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    proc = _gpuhealth("upgrade", "--db", f"sqlite:///{db}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"sqlite:///{db}: schema at revision {HEAD}"
    store = Store.open(f"sqlite:///{db}", upgrade=False)
    try:
        assert store.revision() == HEAD
    finally:
        store.close()


def test_db_upgrade_unreachable_postgres() -> None:
    line = _one_line_error(_gpuhealth("upgrade", "--db", "postgresql+psycopg://gh:pw@127.0.0.1:5/x"))
    assert line == "error: cannot reach the database at postgresql+psycopg://gh:***@127.0.0.1:5/x: connection refused"


def test_db_upgrade_missing_directory(tmp_path: Path) -> None:
    line = _one_line_error(_gpuhealth("upgrade", "--db", f"sqlite:///{tmp_path}/nope/g.db"))
    assert line.endswith(f"directory {tmp_path}/nope does not exist")


def test_db_import_then_prune(tmp_path: Path, sim_history: pd.DataFrame) -> None:
    hfile = history.write(sim_history, tmp_path / "h.parquet")
    ffile = tmp_path / "f.csv"
    uuid = str(sim_history["gpu_uuid"].iloc[0])
    # A time in nanoseconds (as the independent generator writes them): the store keeps microseconds,
    # and importing the file again must still find the label already there.
    ffile.write_text(
        f"gpu_uuid,failed_at,mode\n{uuid},2026-01-02T00:00:00Z,ecc\n{uuid},2026-01-03T04:05:06.123456789Z,pcie\n"
    )
    url = f"sqlite:///{tmp_path / 'g.db'}"
    for expected in (len(sim_history), 0):  # importing again adds nothing
        proc = _gpuhealth("import", "--history", str(hfile), "--failures", str(ffile), "--db", url)
        assert proc.returncode == 0, proc.stderr
        assert f": {expected} new samples of {len(sim_history)}, 2 failure labels" in proc.stdout
        assert "Warning" not in proc.stderr, proc.stderr
    proc = _gpuhealth("prune", "--db", url, "--retention", "1d")  # the simulated days are long past
    assert proc.returncode == 0, proc.stderr
    assert f"removed {len(sim_history)} raw samples" in proc.stdout
    store = Store.open(url)
    try:
        assert store.counts()["samples"] == 0
        failures = store.labels.failures()
        assert len(failures) == 2 and all(f["hostname"] is not None for f in failures)
        assert {f["failed_at"].replace(tzinfo=None).isoformat() for f in failures} == {
            "2026-01-02T00:00:00", "2026-01-03T04:05:06.123456"}  # fmt: skip
    finally:
        store.close()
    line = _one_line_error(_gpuhealth("prune", "--db", url, "--retention", "forever"))
    assert "invalid duration 'forever'" in line


def test_db_import_checks_the_gpu_index_as_upsert_does(tmp_path: Path) -> None:
    """Issue 55.3: `db import` stored -1 (and -5) where a sighting refuses any index below 0; -1 is "unknown"."""
    t0 = pd.Timestamp("2026-01-05T00:00:00Z")
    rows = [{"timestamp": t0, "hostname": "n1", "gpu_uuid": f"GPU-{i}", "gpu_index": i, "model_name": "H100",
             "gpu_temp_c": 40.0} for i in (-1, -5, 3)]  # fmt: skip
    hfile = history.write(pd.DataFrame(rows), tmp_path / "h.csv")
    url = f"sqlite:///{tmp_path / 'g.db'}"
    proc = _gpuhealth("import", "--history", str(hfile), "--db", url)
    assert proc.returncode == 0, proc.stderr
    assert ": 2 new samples of 3" in proc.stdout
    assert "GPU 'GPU--5': the GPU index -5 is outside" in proc.stderr
    store = Store.open(url)
    try:
        assert {g["uuid"]: g["gpu_index"] for g in store.gpus.find()[0]} == {"GPU--1": None, "GPU-3": 3}
    finally:
        store.close()

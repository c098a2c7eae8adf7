"""`gpuhealth collect --collectors FILE`: a dcgm-exporter counters CSV, and how it combines with --fields."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from core import catalog
from core.settings import Settings
from gpuhealth.cli.backend import BackendFlags, select_fields

DEFAULT_CSV = Path(__file__).resolve().parents[1] / "data" / "dcgm-exporter-default-counters.csv"


def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "counters.csv"
    path.write_text(text)
    return path


def test_without_a_file_fields_and_default_labels_as_before() -> None:
    fields, labels = select_fields(BackendFlags(fields="gpu_temp_c,power_w"), Settings())
    assert [f.name for f in fields] == ["gpu_temp_c", "power_w"]
    assert labels == catalog.default_labels()
    assert select_fields(BackendFlags(), Settings())[0] == catalog.select()


def test_the_file_alone_chooses_fields_and_labels(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _csv(
        tmp_path,
        "# mine\nDCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_EXP_P2P_STATUS, counter, p\nDCGM_FI_DEV_SM_OCCUPANCY, gauge, o\n",
    )
    with caplog.at_level(logging.WARNING):
        fields, labels = select_fields(BackendFlags(collectors=path), Settings())
    assert [f.name for f in fields] == ["gpu_temp_c"] and labels == ()  # no label row: no driver label
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"counters file {path}: 2 field(s) gpuhealth does not export, skipped: "
        "DCGM_EXP_P2P_STATUS, DCGM_FI_DEV_SM_OCCUPANCY"
    ]


def test_fields_add_to_the_file_in_catalogue_order(tmp_path: Path) -> None:
    path = _csv(tmp_path, "DCGM_FI_DEV_POWER_USAGE, gauge, p\nDCGM_FI_DRIVER_VERSION, label, Driver Version\n")
    fields, labels = select_fields(BackendFlags(collectors=path, fields="ecc_dbe_volatile,gpu_temp_c"), Settings())
    assert [f.name for f in fields] == ["gpu_temp_c", "power_w", "ecc_dbe_volatile"]
    assert [lf.dcgm_name for lf in labels] == ["DCGM_FI_DRIVER_VERSION"]


def test_settings_name_the_file_and_a_set_fields_setting_adds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _csv(tmp_path, "DCGM_FI_DEV_POWER_USAGE, gauge, p\n")
    monkeypatch.setenv("GPUHEALTH_COLLECTORS", str(path))
    assert [f.name for f in select_fields(BackendFlags(), Settings())[0]] == ["power_w"]
    monkeypatch.setenv("GPUHEALTH_FIELDS", "xid")
    assert [f.name for f in select_fields(BackendFlags(), Settings())[0]] == ["power_w", "xid"]


def test_dcgm_exporters_default_file_selects_a_subset_of_our_defaults() -> None:
    fields, labels = select_fields(BackendFlags(collectors=DEFAULT_CSV), Settings())
    assert set(fields) < set(catalog.select()) and len(fields) == 25
    assert labels == catalog.default_labels()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("# head\nDCGM_FI_DEV_GPU_TEMP, gauge\n", "counters.csv line 2: expected 3 values"),
        ("DCGM_FI_DEV_GPU_TEMP, gague, t\n", "counters.csv line 1: unknown type 'gague'"),
    ],
)
def test_collect_with_a_malformed_file_is_one_error_line(tmp_path: Path, text: str, needle: str) -> None:
    path = _csv(tmp_path, text)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuhealth.cli", "collect", "--backend", "sim", "--collectors", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert needle in lines[0]

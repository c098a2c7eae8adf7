from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core import catalog
from core.catalog import FIELDS, CatalogError, Category, validate

ROOT = Path(__file__).resolve().parents[2]


def test_catalogue_covers_reference_fields() -> None:
    assert len(FIELDS) >= 35
    by_dcgm = {f.dcgm_name: f for f in FIELDS if f.dcgm_name}
    # A sample of REFERENCE.md's table with its DCGM ids.
    for name, fid in [
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 310), ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 313),
        ("DCGM_FI_DEV_RETIRED_PENDING", 392), ("DCGM_FI_DEV_ROW_REMAP_PENDING", 396),
        ("DCGM_FI_DEV_XID_ERRORS", 230), ("DCGM_FI_DEV_GPU_RECOVERY_ACTION", 1523),
        ("DCGM_FI_DEV_MEMORY_TEMP", 140), ("DCGM_FI_DEV_SHUTDOWN_TEMP", 159),
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 112), ("DCGM_FI_DEV_THERMAL_VIOLATION", 241),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202), ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", 236),
        ("DCGM_FI_DEV_POWER_USAGE", 155), ("DCGM_FI_DEV_FB_USED", 252),
        # dcgm_fields.h (NVIDIA/DCGM 72fa3fe; 449 is now an alias of DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL)
        ("DCGM_FI_DEV_FB_RESERVED", 253), ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", 1009), ("DCGM_FI_PROF_PCIE_RX_BYTES", 1010),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", 526),
    ]:  # fmt: skip
        assert by_dcgm[name].dcgm_id == fid
    cats = {f.category for f in FIELDS}
    assert {Category.ECC, Category.PCIE, Category.NVLINK, Category.THERMAL, Category.XID} <= cats


def test_history_columns_are_catalogue_names() -> None:
    names = {f.name for f in FIELDS}
    assert set(catalog.HISTORY_COLUMNS) <= names


def test_metric_names() -> None:
    assert catalog.BY_NAME["gpu_temp_c"].metric_name == "DCGM_FI_DEV_GPU_TEMP"
    plain = catalog.Field("x_count", None, None, None, "n", "counter", Category.PROBE, "h")
    assert plain.metric_name == "gpuhealth_x_count_total"
    gauge = dataclasses.replace(plain, kind="gauge")
    assert gauge.metric_name == "gpuhealth_x_count"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "GPU-Temp"}, "snake_case"),
        ({"name": "timestamp"}, "identity column"),
        ({"dcgm_name": "GPU_TEMP"}, "is not DCGM_FI_"),
        ({"dcgm_id": None}, "together"),
        ({"kind": "histogram"}, "neither gauge nor counter"),
        ({"help": " "}, "help and unit"),
        ({"category": "misc"}, "unknown category"),
    ],
)
def test_validation_rejects_bad_entries(change: dict[str, object], message: str) -> None:
    bad = dataclasses.replace(FIELDS[0], **change)  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match=message):
        validate((bad, *FIELDS[1:]))


def test_validation_rejects_duplicates_and_missing_columns() -> None:
    dup = dataclasses.replace(FIELDS[1], dcgm_id=FIELDS[0].dcgm_id)
    with pytest.raises(CatalogError, match="already used"):
        validate((FIELDS[0], dup, *FIELDS[2:]))
    without_xid = tuple(f for f in FIELDS if f.name != "xid")
    with pytest.raises(CatalogError, match="lacks history columns: xid"):
        validate(without_xid)
    with pytest.raises(CatalogError, match="at least 35"):
        validate(FIELDS[:10])


def test_select() -> None:
    default = catalog.select()
    assert all(f.default for f in default) and len(default) < len(FIELDS)
    assert catalog.select("all") == FIELDS
    assert [f.name for f in catalog.select("gpu_temp_c, power_w")] == ["gpu_temp_c", "power_w"]
    with pytest.raises(CatalogError, match="unknown field\\(s\\): nope"):
        catalog.select("gpu_temp_c,nope")


def test_metrics_doc_is_generated_and_current() -> None:
    text = catalog.metrics_markdown()
    for f in FIELDS:
        assert f"| `{f.name}` | `{f.metric_name}` |" in text
    assert (ROOT / "docs" / "metrics.md").read_text() == text, "run `make generate`"


def test_label_fields_are_checked_against_fields() -> None:
    driver = catalog.LABELS[0]
    assert (driver.dcgm_name, driver.dcgm_id) == ("DCGM_FI_DRIVER_VERSION", 1)
    assert catalog.BY_DCGM_NAME["DCGM_FI_DRIVER_VERSION"] is driver
    with pytest.raises(CatalogError, match="already used by 'gpu_temp_c'"):
        catalog.validate_labels((dataclasses.replace(driver, dcgm_id=150),), FIELDS)
    with pytest.raises(CatalogError, match="DCGM_FI_\\* name"):
        catalog.validate_labels((dataclasses.replace(driver, dcgm_name="DRIVER"),), FIELDS)

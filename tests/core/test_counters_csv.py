"""dcgm-exporter's counters CSV read as a selection of catalogue fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import catalog, counters_csv
from core.counters_csv import CountersFileError

DATA = Path(__file__).resolve().parents[1] / "data"


def test_dcgm_exporters_default_file_is_all_known() -> None:
    picked = counters_csv.read(DATA / "dcgm-exporter-default-counters.csv")
    assert picked.unknown == [] and picked.retyped == []
    assert [lf.dcgm_name for lf in picked.labels] == ["DCGM_FI_DRIVER_VERSION"]
    assert len(picked.fields) == 25
    assert all(f.default for f in picked.fields), "dcgm-exporter's defaults are ours too"


def test_format_comments_blanks_spaces_quotes_and_catalogue_order() -> None:
    text = (
        "# Format\n"
        "\n"
        "DCGM_FI_DEV_POWER_USAGE,   gauge, Power draw (in W).\n"
        "   # an indented comment\n"
        'DCGM_FI_DEV_DEC_UTIL ,     gauge, "Decoder utilization, (in %)."\n'
        "DCGM_FI_DEV_GPU_TEMP,gauge,GPU temperature (in C).\n"
        "DCGM_FI_DEV_GPU_TEMP, gauge, listed twice\n"
    )
    rows = counters_csv.parse_rows(text)
    assert [(r.line, r.dcgm_name, r.kind) for r in rows][:2] == [
        (3, "DCGM_FI_DEV_POWER_USAGE", "gauge"),
        (5, "DCGM_FI_DEV_DEC_UTIL", "gauge"),
    ]
    assert rows[1].help == "Decoder utilization, (in %)."
    picked = counters_csv.select(rows)
    assert [f.name for f in picked.fields] == ["gpu_temp_c", "power_w", "dec_util_pct"]  # catalogue order
    assert picked.labels == ()


def test_unknown_fields_are_listed_once_and_types_that_differ_are_reported() -> None:
    text = (
        "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock\n"
        "DCGM_EXP_XID_ERRORS_COUNT, counter, reported XIDs\n"
        "DCGM_FI_PROF_SM_OCCUPANCY, gauge, occupancy\n"
        "DCGM_EXP_XID_ERRORS_COUNT, counter, again\n"
        "DCGM_FI_PROF_PCIE_TX_BYTES, counter, the older file's type\n"
        "DCGM_FI_DEV_SERIAL, label, Device Serial Number\n"
    )
    picked = counters_csv.select(counters_csv.parse_rows(text))
    assert picked.unknown == ["DCGM_EXP_XID_ERRORS_COUNT", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_DEV_SERIAL"]
    assert picked.retyped == ["DCGM_FI_PROF_PCIE_TX_BYTES (file: counter, exported: gauge)"]
    assert [f.name for f in picked.fields] == ["sm_clock_mhz", "pcie_tx_bytes_per_s"]


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("DCGM_FI_DEV_GPU_TEMP, gauge", "line 3: expected 3 values (DCGM field, type, help), got 2"),
        ("DCGM_FI_DEV_GPU_TEMP, gauge, help, more", "line 3: expected 3 values"),
        ("DCGM_FI_DEV_GPU_TEMP, gauges, help", "line 3: unknown type 'gauges'"),
        (", gauge, help", "line 3: the DCGM field name is empty"),
        ('DCGM_FI_DEV_GPU_TEMP, gauge, "unclosed', "line 3: not CSV"),
    ],
)
def test_a_malformed_line_is_one_line_naming_its_number(line: str, needle: str) -> None:
    with pytest.raises(CountersFileError) as info:
        counters_csv.parse_rows(f"# head\nDCGM_FI_DEV_SM_CLOCK, gauge, ok\n{line}\n", "my.csv")
    message = str(info.value)
    assert message.startswith("my.csv line 3:") and needle in message and "\n" not in message


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(CountersFileError, match=r"cannot read counters file .*nope\.csv"):
        counters_csv.read(tmp_path / "nope.csv")


def test_every_label_field_is_a_gpu_info_attribute() -> None:
    from collector.backends.base import GpuInfo

    for lf in catalog.LABELS:
        assert lf.name in GpuInfo.__dataclass_fields__, lf.name

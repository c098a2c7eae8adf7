from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from core import catalog, history
from core.openmetrics import write_openmetrics
from simulator.fleet import FleetSim
from tests.simulator.frames import stepped_history

T0 = pd.Timestamp("2026-01-01T00:00:00Z")
H100 = "NVIDIA H100 80GB HBM3"


def small_frame() -> pd.DataFrame:
    """Two GPUs, rows out of order, a NaN, a huge counter, a non-catalogue column, a sub-second time."""
    return history.validate(
        pd.DataFrame(
            {
                "timestamp": [T0 + pd.Timedelta(hours=1), T0, T0, T0 + pd.Timedelta(seconds=3600.25)],
                "hostname": ["node-b", "node-b", "node-a", "node-a"],
                "gpu_uuid": ["GPU-b", "GPU-b", "GPU-a", "GPU-a"],
                "gpu_index": [1, 1, 0, 0],
                "model_name": H100,
                "gpu_temp_c": [45.3, 44.0, np.nan, 51.0],
                "ecc_sbe_volatile": [3.0, 2.0, 12345678901.0, 1e300],  # validate refuses infinities
                "not_a_field": [1.0, 2.0, 3.0, 4.0],
                "pcie_replay_count": np.nan,
            }
        )
    )


A = 'gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"'
B = 'gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-b"'
EXPECTED = f"""\
# HELP DCGM_FI_DEV_GPU_TEMP GPU core temperature in degrees C.
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{{A}}} 51 1767229200.250
DCGM_FI_DEV_GPU_TEMP{{{B}}} 44 1767225600
DCGM_FI_DEV_GPU_TEMP{{{B}}} 45.3 1767229200
# HELP DCGM_FI_DEV_ECC_SBE_VOL_TOTAL Single-bit (corrected) ECC errors since the driver was loaded.
# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL gauge
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{A}}} 1.2345678901e+10 1767225600
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{A}}} 1e+300 1767229200.250
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{B}}} 2 1767225600
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{B}}} 3 1767229200
# EOF
"""


def test_writes_families_by_catalogue_name_in_series_and_time_order() -> None:
    out = io.StringIO()
    n = write_openmetrics(small_frame(), out)
    assert out.getvalue() == EXPECTED
    assert n == 4, "two families with two series each; the all-NaN column is left out"


def test_paths_and_binary_files_get_the_same_text(tmp_path: Path) -> None:
    frame = small_frame()
    write_openmetrics(frame, tmp_path / "a.om")
    write_openmetrics(frame, str(tmp_path / "b.om"))
    raw = io.BytesIO()
    write_openmetrics(frame, raw)
    with (tmp_path / "c.om").open("w") as fh:
        write_openmetrics(frame, fh)
    for name in ("a.om", "b.om", "c.om"):
        assert (tmp_path / name).read_text() == EXPECTED
    assert raw.getvalue().decode() == EXPECTED


def test_hostname_label_can_be_lowercase() -> None:
    out = io.StringIO()
    write_openmetrics(small_frame(), out, hostname_label="hostname")
    assert 'hostname="node-a"' in out.getvalue() and "Hostname" not in out.getvalue()


def test_hostname_label_must_be_a_label_name() -> None:
    with pytest.raises(ValueError, match="invalid label name 'host name'"):
        write_openmetrics(small_frame(), io.StringIO(), hostname_label="host name")


def test_label_values_are_escaped() -> None:
    frame = small_frame().assign(model_name='say "hi"\\ now')
    out = io.StringIO()
    write_openmetrics(frame, out)
    (fam, *_) = text_string_to_metric_families(out.getvalue())
    assert fam.samples[0].labels["modelName"] == 'say "hi"\\ now'


def test_simulated_fleet_parses_as_openmetrics_with_every_value() -> None:
    frame = stepped_history(FleetSim(nodes=2, gpus_per_node=2, seed=1), 5, 600.0)
    out = io.StringIO()
    n = write_openmetrics(frame, out)
    families = {f.name: f for f in text_string_to_metric_families(out.getvalue())}
    columns = [c for c in history.metric_columns(frame) if frame[c].notna().any()]
    assert set(families) == {catalog.BY_NAME[c].metric_name for c in columns}
    assert n == sum(frame.loc[frame[c].notna(), "gpu_uuid"].nunique() for c in columns)
    for c in columns:
        fam = families[catalog.BY_NAME[c].metric_name]
        assert fam.type == "gauge"
        got = {(s.labels["UUID"], float(s.timestamp.sec)): s.value for s in fam.samples}
        want = frame.loc[frame[c].notna()]
        assert len(got) == len(want)
        for uuid, ts, v in zip(want["gpu_uuid"], want["timestamp"], want[c], strict=True):
            # float32 gauges are written as their shortest float32 text: equal after the cast back
            assert np.asarray(got[(uuid, ts.timestamp())], dtype=frame[c].dtype) == v


@pytest.mark.parametrize("suffix", [".om", ".txt"])
def test_empty_frame_is_just_eof(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"empty{suffix}"
    assert write_openmetrics(history.empty(), path) == 0
    assert path.read_text() == "# EOF\n"

"""predictor.probes: GPUs more than 10 % below their same-model peers are slow."""

from __future__ import annotations

import pandas as pd
import pytest

from predictor.probes import probe_features, slow_gpus

T0 = pd.Timestamp("2026-03-01T00:00:00Z")


def row(uuid: str, value: float | None, model: str = "NVIDIA H100 80GB HBM3", hours: float = 0.0,
        test: str = "gemm", status: str = "pass") -> dict[str, object]:  # fmt: skip
    return {
        "gpu_uuid": uuid, "ran_at": T0 + pd.Timedelta(hours=hours), "test": test, "status": status,
        "value": value, "unit": "TFLOP/s", "details": {"model_name": model},
    }  # fmt: skip


def test_a_gpu_fifteen_percent_slow_is_flagged_with_a_reason() -> None:
    df = pd.DataFrame([row("a", 400), row("b", 410), row("c", 395), row("d", 340), row("e", 370)])
    out = slow_gpus(df).set_index("gpu_uuid")
    assert out.loc["d", "slow"] and not out.loc[["a", "b", "c"], "slow"].any()
    assert out.loc["d", "ratio_to_peers"] == pytest.approx(340 / 397.5)
    assert out.loc["d", "reason"] == "GEMM 340 TFLOP/s is 14% below the median of 4 same-model peers (398 TFLOP/s)"
    assert not out.loc["e", "slow"]  # 370 / 400 = 7.5 % below: within the band


def test_peers_are_per_model_and_need_two() -> None:
    df = pd.DataFrame([row("a", 400), row("b", 300), row("h1", 900, "NVIDIA H200"), row("h2", 1000, "NVIDIA H200"),
                       row("h3", 700, "NVIDIA H200")])  # fmt: skip
    out = slow_gpus(df).set_index("gpu_uuid")
    assert out.loc[["a", "b"], "ratio_to_peers"].isna().all() and not out.loc[["a", "b"], "slow"].any()
    assert out.loc["h3", "slow"] and not out.loc["h1", "slow"]


def test_only_the_latest_usable_result_counts_and_errors_are_ignored() -> None:
    df = pd.DataFrame([
        row("a", 400), row("b", 400), row("c", 300, hours=0), row("c", 398, hours=5),
        row("d", None, status="error", hours=6), row("d", 401, hours=1),
        row("e", 1.0, test="pcie"), row("f", 500, hours=-24 * 30),
    ])  # fmt: skip
    out = slow_gpus(df).set_index("gpu_uuid")
    assert set(out.index) == {"a", "b", "c", "d"}  # f is older than a week, e has no gemm
    assert not out["slow"].any()
    at_first = slow_gpus(df, at=T0 + pd.Timedelta(hours=0.5)).set_index("gpu_uuid")
    assert at_first.loc["c", "slow"]


def test_model_name_column_and_empty_input() -> None:
    df = pd.DataFrame([row("a", 400), row("b", 400), row("c", 100)]).drop(columns="details")
    df["model_name"] = "NVIDIA A100-SXM4-80GB"
    assert slow_gpus(df).set_index("gpu_uuid").loc["c", "slow"]
    assert slow_gpus(df.iloc[:0]).empty
    assert list(slow_gpus(pd.DataFrame()).columns)[:3] == ["gpu_uuid", "model_name", "value"]


def test_probe_features_join_slow_and_memtest() -> None:
    df = pd.DataFrame([row("a", 400), row("b", 400), row("c", 300),
                       row("c", 3.0, test="memtest"), row("a", 0.0, test="memtest")])  # fmt: skip
    f = probe_features(df).set_index("gpu_uuid")
    assert f.loc["c", "probe_slow"] == 1.0 and f.loc["a", "probe_slow"] == 0.0
    assert f.loc["c", "probe_memtest_errors"] == 3.0 and f.loc["a", "probe_memtest_errors"] == 0.0

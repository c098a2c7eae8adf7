"""Node findings: a node whose GPUs run hot together is suspected of a cooling problem."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest

from predictor.node import (
    FINDING_COLUMNS,
    NODE_HEAT_REASON,
    NodeHeat,
    cooling_suspected,
    held_reason,
    is_node_heat_reason,
    node_findings,
    node_reason,
)

CUTOFF = pd.Timestamp("2026-03-01", tz="UTC")


def node_frame(own_z: Sequence[float], host: str = "node-a", cutoff: pd.Timestamp = CUTOFF) -> pd.DataFrame:
    """One node's GPU rows with the node columns computed from each GPU's temp_excess_own_z, as the
    features contract defines them (median, count >= 2, count, difference)."""
    z = pd.Series(own_z, dtype=np.float64)
    med = float(z.median())
    return pd.DataFrame(
        {
            "gpu_uuid": [f"GPU-{host}-{i}" for i in range(len(z))],
            "hostname": host,
            "gpu_index": range(len(z)),
            "model_name": "NVIDIA H100 80GB HBM3",
            "cutoff": cutoff,
            "last_seen": cutoff,
            "temp_excess_own_z": z,
            "node_heat_z": med,
            "node_hot_gpus": float((z >= 2).sum()),
            "node_gpus": float(len(z)),
            "temp_excess_vs_node_z": z - med,
        }
    )


HOT_NODE = [4.1, 3.8, 4.5, 3.2, 4.0, 3.6, 0.2, -0.1]
"""6 of 8 GPUs hot, median 3.7 σ: a node finding."""
ONE_HOT_GPU = [6.0, 0.1, -0.3, 0.4, 0.0, 0.2, -0.2, 0.3]


def test_a_node_with_six_of_eight_gpus_hot_is_suspected() -> None:
    out = node_findings(node_frame(HOT_NODE))
    assert list(out.columns) == list(FINDING_COLUMNS)
    assert len(out) == 1
    row = out.iloc[0]
    assert (row["hostname"], row["cutoff"], bool(row["suspected"])) == ("node-a", CUTOFF, True)
    assert (row["hot_gpus"], row["gpus"]) == (6, 8)
    assert row["heat_z"] == pytest.approx(3.7)


def test_one_hot_gpu_is_no_node_finding() -> None:
    out = node_findings(node_frame(ONE_HOT_GPU))
    assert out["suspected"].tolist() == [False]


@pytest.mark.parametrize(
    ("own_z", "heat_z", "why"),
    [
        ([3.5, 3.4, 3.6, 3.3, 0.1, 0.0, -0.2, 0.2], None, "4 of 8 hot, but the median is 1.75 σ"),
        ([9.0, 9.0, 9.0, 0.1, 0.0, -0.2, 0.2, 0.1], 5.0, "3 of 8 hot: under half, whatever the median says"),
        ([5.0], None, "a one-GPU node: one hot GPU is the GPU's finding"),
        ([5.0, 0.0], 5.0, "1 of 2 hot: fewer than 2"),
    ],
)
def test_thresholds_keep_a_node_quiet(own_z: list[float], heat_z: float | None, why: str) -> None:
    f = node_frame(own_z)
    if heat_z is not None:
        f["node_heat_z"] = heat_z  # what the contract's median would not give: one condition at a time
    assert node_findings(f)["suspected"].tolist() == [False], why


def test_exactly_half_and_exactly_three_sigma_suspect() -> None:
    f = node_frame([3.0, 3.0, 0.0, 0.0])  # median 1.5: move it to the boundary by hand
    f["node_heat_z"] = 3.0
    out = node_findings(f)
    assert out["suspected"].tolist() == [True]
    assert (out["hot_gpus"].iat[0], out["gpus"].iat[0]) == (2, 4)


def test_nodes_and_cutoffs_are_found_apart() -> None:
    later = CUTOFF + pd.Timedelta(hours=1)
    f = pd.concat(
        [
            node_frame(HOT_NODE, "node-a"),
            node_frame(ONE_HOT_GPU, "node-b"),
            node_frame(ONE_HOT_GPU, "node-a", later),
        ],
        ignore_index=True,
    )
    out = node_findings(f)
    got = {(h, c): bool(s) for h, c, s in zip(out["hostname"], out["cutoff"], out["suspected"], strict=True)}
    assert got == {("node-a", CUTOFF): True, ("node-a", later): False, ("node-b", CUTOFF): False}


@pytest.mark.parametrize("missing", ["node_heat_z", "node_hot_gpus", "node_gpus", "hostname"])
def test_missing_columns_give_no_findings(missing: str) -> None:
    out = node_findings(node_frame(HOT_NODE).drop(columns=[missing]))
    assert len(out) == 0
    assert list(out.columns) == list(FINDING_COLUMNS)


def test_nan_z_scores_never_suspect() -> None:
    f = node_frame(HOT_NODE)
    f["node_heat_z"] = np.nan
    assert node_findings(f)["suspected"].tolist() == [False]
    f = node_frame(HOT_NODE)
    f["node_gpus"] = np.nan
    assert node_findings(f)["suspected"].tolist() == [False]


def test_a_row_without_the_node_values_does_not_hide_the_others() -> None:
    f = node_frame(HOT_NODE)
    f.loc[0, ["node_heat_z", "node_hot_gpus", "node_gpus"]] = np.nan  # one GPU's row lacks them
    assert node_findings(f)["suspected"].tolist() == [True]


def test_a_frame_without_cutoff_is_one_cutoff() -> None:
    out = node_findings(node_frame(HOT_NODE).drop(columns=["cutoff"]))
    assert out["suspected"].tolist() == [True]
    assert out["cutoff"].isna().all()


def test_categorical_hostnames() -> None:
    f = pd.concat([node_frame(HOT_NODE, "node-a"), node_frame(ONE_HOT_GPU, "node-b")], ignore_index=True)
    f["hostname"] = f["hostname"].astype("category")
    out = node_findings(f)
    assert dict(zip(out["hostname"], out["suspected"], strict=True)) == {"node-a": True, "node-b": False}


@pytest.mark.parametrize(
    "kwargs",
    [{"hot_share": 0.0}, {"hot_share": 1.5}, {"min_hot": 0}, {"heat_z": float("nan")}, {"stands_out_z": -1.0}],
)
def test_invalid_settings_raise(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="node heat settings"):
        NodeHeat(**kwargs)  # type: ignore[arg-type]


def test_settings_change_the_finding() -> None:
    f = node_frame(HOT_NODE)
    assert node_findings(f, NodeHeat(heat_z=4.0))["suspected"].tolist() == [False]
    assert node_findings(f, NodeHeat(hot_share=0.8))["suspected"].tolist() == [False]


def test_reasons_name_the_node_and_are_recognised() -> None:
    text = node_reason("node-a", 3.7, 6, 8)
    assert text == (
        "node-wide heat: check cooling (6 of 8 GPUs of node-a run hot, the node's median 3.7 σ above their own 30 days)"
    )
    assert is_node_heat_reason(text) and text.startswith(NODE_HEAT_REASON)
    assert not is_node_heat_reason("risk 0.82 (thermal 0.80): temperature above its power")
    assert held_reason(0.4, 1.2, NodeHeat()) == (
        "thermal demote held at watch: the GPU runs as hot as its node (its own excess against the node's: +0.4 σ; "
        "memory-core spread against its own 30 days: +1.2 σ; a demote needs +3.0 σ in either)"
    )
    unknown = held_reason(float("nan"), float("nan"), NodeHeat())
    assert unknown.count("not known") == 2


def test_cooling_suspected_per_host() -> None:
    records = [
        ("node-a", ["risk 0.4", node_reason("node-a", 3.7, 6, 8)]),
        ("node-a", []),
        ("node-b", ["risk 0.9 (thermal 0.9)"]),
    ]
    assert cooling_suspected(records) == {"node-a": True, "node-b": False}

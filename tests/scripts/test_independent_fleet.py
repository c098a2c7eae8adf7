"""The independent fleet generator (scripts/independent_fleet.py): a valid history, failures that
end their GPU, replacements, confounders, and no code shared with the simulator or the model."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from core import history

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "independent_fleet.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("independent_fleet", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["independent_fleet"] = mod
    spec.loader.exec_module(mod)
    return mod


gen = _load()


@pytest.fixture(scope="module")
def small() -> tuple[pd.DataFrame, pd.DataFrame]:
    # 6 nodes x 8 GPUs x 60 days at 20 times its usual failure rate: several of each mode
    return gen.generate(5, nodes=6, gpus_per_node=8, days=60, failures_per_1000_gpu_days=18.0)


def test_it_shares_no_code_with_the_simulator_or_the_model() -> None:
    tree = ast.parse(SCRIPT.read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names = {n.names[0].name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "core"}
    assert imported - {"__future__", "argparse", "sys", "uuid", "dataclasses", "pathlib", "numpy", "pandas"} == {"core"}
    assert names == {"history"}, "only the history frame's reader and writer"


def test_a_valid_history_the_same_for_a_seed(small: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    fleet, labels = small
    assert history.validate(fleet).shape == fleet.shape
    again, _ = gen.generate(5, nodes=2, gpus_per_node=2, days=3)
    twice, _ = gen.generate(5, nodes=2, gpus_per_node=2, days=3)
    other, _ = gen.generate(6, nodes=2, gpus_per_node=2, days=3)
    pd.testing.assert_frame_equal(again, twice)
    assert not again["gpu_temp_c"].equals(other["gpu_temp_c"])
    assert set(labels["mode"]) == set(history.FAILURE_MODES)


def test_a_failed_gpu_stops_before_its_failure_and_a_new_one_takes_the_slot(
    small: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path
) -> None:
    fleet, labels = small
    path = tmp_path / "failures.csv"
    labels.to_csv(path, index=False)
    read = history.read_failures(path)
    assert len(read) == len(labels)
    last = fleet.groupby("gpu_uuid", observed=True)["timestamp"].max()
    for row in read.itertuples():
        assert last[row.gpu_uuid] < row.failed_at <= last[row.gpu_uuid] + pd.Timedelta(hours=1)
        slot = fleet[(fleet["gpu_uuid"] == row.gpu_uuid)][["hostname", "gpu_index"]].iloc[0]
        same = fleet[(fleet["hostname"] == slot["hostname"]) & (fleet["gpu_index"] == slot["gpu_index"])]
        after = same[same["timestamp"] > row.failed_at]
        if len(after):  # repaired within the span: a new GPU, 2-7 days later
            assert row.gpu_uuid not in set(after["gpu_uuid"])
            gap = after["timestamp"].min() - row.failed_at
            assert pd.Timedelta(days=1) < gap < pd.Timedelta(days=8)


def test_healthy_gpus_carry_the_confounders(small: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    fleet, labels = small
    healthy = fleet[~fleet["gpu_uuid"].isin(labels["gpu_uuid"])]
    per_gpu = healthy.groupby("gpu_uuid", observed=True)
    sbe_hour = per_gpu["ecc_sbe_aggregate"].apply(lambda s: s.diff().max())
    assert (sbe_hour > 20).any(), "bursts of corrected errors on GPUs that never fail"
    replay_hour = per_gpu["pcie_replay_count"].apply(lambda s: s.diff().max())
    assert (replay_hour > 50).any(), "replay bursts on links that never fail"
    # node-wide heat: at some hour every GPU of a node runs well above its own median at once
    med = healthy.groupby("gpu_uuid", observed=True)["gpu_temp_c"].transform("median")
    hot = (healthy["gpu_temp_c"] - med > 8).groupby([healthy["hostname"], healthy["timestamp"].dt.floor("h")],
                                                      observed=True).mean()  # fmt: skip
    assert (hot == 1.0).any()


def test_failures_show_their_precursors(small: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    fleet, labels = small
    by = fleet.set_index("gpu_uuid")
    grew = {"ecc": 0, "pcie": 0}
    for row in labels.itertuples():
        if row.mode not in grew:
            continue
        g = by.loc[[row.gpu_uuid]]
        col = "ecc_sbe_aggregate" if row.mode == "ecc" else "pcie_replay_count"
        grew[row.mode] += bool(np.nansum(np.diff(g[col].to_numpy()[-24:])) > 50)
    assert grew["ecc"] > 0 and grew["pcie"] > 0

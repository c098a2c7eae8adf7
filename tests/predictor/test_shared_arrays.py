"""A saved model's trees share their empty arrays: one file in the archive, the same predictions."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor

from predictor.features import build_features
from predictor.model import RiskModel
from predictor.score import default_model_path
from predictor.shared_arrays import share_empty_arrays, tree_predictors
from simulator.fleet import SimConfig
from simulator.run import simulate


def empty_bitsets(archive: bytes) -> int:
    """Files of the archive holding an empty bitset array, (0, 8) uint32."""
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        arrays = (np.load(io.BytesIO(z.read(n))) for n in z.namelist() if n.endswith(".npy"))
        return sum(a.shape == (0, 8) and a.dtype == np.uint32 for a in arrays)


@pytest.fixture(scope="module")
def features() -> pd.DataFrame:
    frame, _ = simulate(SimConfig(nodes=2, gpus_per_node=8, seed=5, random_failures=True), 8)
    return build_features(frame, pd.date_range(frame["timestamp"].max() - pd.Timedelta(days=3), periods=4, freq="1D"))


def test_the_shipped_model_holds_one_empty_array_per_kind() -> None:
    """predictor/models/default.skops was saved with its trees' empty bitsets shared."""
    assert empty_bitsets(default_model_path().read_bytes()) == 1


def test_a_model_saved_with_each_trees_own_empty_arrays_stores_one(features: pd.DataFrame) -> None:
    model = RiskModel.load(default_model_path())
    want = model.predict(features)
    every = list(tree_predictors(model.heads))
    assert len(every) > 100
    for t in every:  # as training makes them: an empty array of its own in each tree
        t.binned_left_cat_bitsets = np.zeros((0, 8), dtype=np.uint32)
        t.raw_left_cat_bitsets = np.zeros((0, 8), dtype=np.uint32)
    archive = model.to_bytes()
    assert len({id(t.raw_left_cat_bitsets) for t in every} | {id(t.binned_left_cat_bitsets) for t in every}) == 1
    assert empty_bitsets(archive) == 1
    again = RiskModel.from_bytes(archive)
    pd.testing.assert_frame_equal(again.predict(features), want, check_exact=True)
    assert len({id(t.raw_left_cat_bitsets) for t in tree_predictors(again.heads)}) == 1


def test_only_empty_arrays_of_trees_are_shared() -> None:
    a, b = np.zeros((0, 8), dtype=np.uint32), np.zeros((0, 8), dtype=np.uint32)
    full = np.ones(3)
    t1, t2 = TreePredictor.__new__(TreePredictor), TreePredictor.__new__(TreePredictor)
    t1.__dict__.update(x=a, y=full, z=np.zeros(0))
    t2.__dict__.update(x=b, y=full.copy(), z=np.zeros(0, dtype=np.int64))
    other = {"empty": np.zeros((0, 8), dtype=np.uint32)}
    assert share_empty_arrays([t1, {"k": (t2,)}, other]) == 4
    assert t1.x is t2.x and t1.y is full and t2.y is not full
    assert t1.z is not t2.z  # another dtype: an array of its own
    assert other["empty"] is not a

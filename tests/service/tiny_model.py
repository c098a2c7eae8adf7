"""A small risk model made in a second, for tests that store, load and swap models (not for its scores)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import sklearn
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.dummy import DummyClassifier
from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits

from predictor.features import FEATURES
from predictor.model import MODES, ColumnSelector, RiskModel, head_features, make_head


def tiny_model(tag: str = "tiny", seed: int = 0, rows: int = 300) -> RiskModel:
    """Heads of the real kind (so the archive loads under the trusted-type checks) fitted on random rows."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(rng.random((rows, len(FEATURES))), columns=list(FEATURES))
    heads = {}
    with threadpool_limits(limits=1, user_api="openmp"):  # the trees' threads spin on a busy 2-core box
        for mode in MODES:
            y = (rng.random(rows) < 0.2).astype(int)
            head = make_head(mode, seed).set_params(trees__max_iter=5)  # small and quick: only its kind matters
            heads[mode] = CalibratedClassifierCV(head, method="isotonic", cv=2).fit(X, y)
    meta = {
        "sklearn_version": sklearn.__version__,
        "tag": tag,
        "data_hash": f"tiny-{tag}",
        "validation": {
            m: {"average_precision": float("nan"), "brier": 0.01, "positives": 0, "rows": rows} for m in MODES
        },
    }
    return RiskModel(heads=heads, meta=meta)


def constant_model(risky: tuple[str, ...] = (), like: RiskModel | None = None, tag: str = "constant") -> RiskModel:
    """A model whose heads in `risky` (modes) always say 1.0 and the others 0."""
    X = pd.DataFrame(np.zeros((2, len(FEATURES))), columns=list(FEATURES))
    heads = {
        m: Pipeline(
            [
                ("select", ColumnSelector(head_features(m))),
                ("constant", DummyClassifier(strategy="constant", constant=int(m in risky))),
            ]
        ).fit(X, [0, 1])
        for m in MODES
    }
    meta = {**(like.meta if like is not None else {"sklearn_version": sklearn.__version__}), "tag": tag}
    return RiskModel(heads=heads, meta=meta)


def silent_model(like: RiskModel | None = None, tag: str = "silent") -> RiskModel:
    """A model whose risk is always 0 (only the rules alert): worse than any model that catches something."""
    return constant_model((), like, tag)


class AgeSchedule(ClassifierMixin, BaseEstimator):
    """A head whose risk follows the GPU's age: `steps` [(age in days, risk from then on), ...]
    ascending; 0 before the first. For tests whose risk must rise and fall over the rounds."""

    def __init__(self, steps: tuple[tuple[float, float], ...] = ()) -> None:
        self.steps = steps

    def fit(self, X: pd.DataFrame, y: object = None) -> AgeSchedule:
        self.classes_ = np.asarray([0, 1])
        return self

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        age = X["age_days"].to_numpy(dtype=np.float64)
        p = np.zeros(len(X))
        for at, risk in self.steps:
            p = np.where(age >= at, risk, p)
        return np.c_[1.0 - p, p]


def schedule_model(steps: tuple[tuple[float, float], ...], mode: str = "ecc") -> RiskModel:
    """A model whose `mode` head follows `AgeSchedule(steps)` and whose other heads say 0."""
    X = pd.DataFrame(np.zeros((2, len(FEATURES))), columns=list(FEATURES))
    quiet = constant_model()
    heads = {m: AgeSchedule(steps).fit(X) if m == mode else quiet.heads[m] for m in MODES}
    return RiskModel(heads=heads, meta={"sklearn_version": sklearn.__version__, "tag": "schedule"})

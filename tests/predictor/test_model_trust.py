"""What a model file may hold: the allow-list matches the shipped model, and a gadget chain is refused."""

from __future__ import annotations

import contextlib
import importlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sklearn
import skops.io as sio
from numpy.testing._private.utils import runstring  # exec()s a string: the end of the chain
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from predictor import trusted_types
from predictor.features import build_features
from predictor.model import MODES, ModelError, RiskModel
from predictor.score import default_model_path
from predictor.trusted_types import TRUSTED_TYPES, needed_types
from simulator.fleet import SimConfig
from simulator.run import simulate

DAY = pd.Timedelta(days=1)
REGENERATE = "python -m predictor.trusted_types predictor/models/default.skops"


@pytest.fixture(scope="module")
def features() -> pd.DataFrame:
    """A few daily cutoffs of a small simulated fleet, as the heads score them."""
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=8, seed=3, random_failures=True), 8)
    cuts = pd.date_range(frame["timestamp"].min() + 3 * DAY, frame["timestamp"].max(), freq="1D")
    return build_features(frame, cuts)


def old_rule(untrusted: list[str]) -> list[str]:
    """What `RiskModel.load` trusted before issue 12: every numpy/scikit-learn name."""
    return [t for t in untrusted if t.startswith(("sklearn.", "numpy.")) or t == "predictor.model.ColumnSelector"]


def gadget_model(path: Path, marker: Path) -> Path:
    """A model file whose heads create `marker` when they score, made only of numpy/sklearn names.

    X -> zeros_like -> resize to 2 -> array2string with code as the separator ("[0,CODE,0]",
    a valid list expression) -> runstring exec()s it. A fitted classifier last, so the
    pipeline has the predict_proba that scoring calls.
    """
    code = f",__import__('pathlib').Path({str(marker)!r}).touch(),"
    head = Pipeline(
        [
            ("zeros", FunctionTransformer(np.zeros_like, kw_args={"dtype": int})),
            ("two", FunctionTransformer(np.resize, kw_args={"new_shape": 2})),
            ("text", FunctionTransformer(np.array2string, kw_args={"separator": code, "max_line_width": 10**6})),
            ("run", FunctionTransformer(runstring, kw_args={"dict": {}})),
            ("clf", LogisticRegression().fit([[0.0], [1.0]], [0, 1])),
        ]
    )
    meta = {"format": 1, "sklearn_version": sklearn.__version__}
    sio.dump({"heads": dict.fromkeys(MODES, head), "meta_json": json.dumps(meta)}, path)
    return path


def test_trusted_types_are_what_the_shipped_model_needs() -> None:
    needed = needed_types(default_model_path())
    assert needed == sorted(TRUSTED_TYPES), (
        f"predictor/trusted_types.py no longer matches what the shipped model needs "
        f"(new: {sorted(set(needed) - set(TRUSTED_TYPES))}, unused: {sorted(set(TRUSTED_TYPES) - set(needed))}): "
        f"review each new type (a class the model truly holds, never a function), then regenerate "
        f"the list with `{REGENERATE}` and paste it into predictor/trusted_types.py"
    )


def test_trusted_types_are_classes_by_exact_name() -> None:
    # skops also loads functions by name; none may be trusted (they are what gadget chains use).
    for name in TRUSTED_TYPES:
        module, _, attr = name.rpartition(".")
        assert isinstance(getattr(importlib.import_module(module), attr), type), f"{name} is not a class"


def test_regenerating_prints_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert trusted_types.main([str(default_model_path())]) == 0
    out = capsys.readouterr().out
    # Exactly the module's own text, so pasting it is the whole update.
    assert out in Path(trusted_types.__file__).read_text()
    assert out == trusted_types.render(TRUSTED_TYPES)


def test_gadget_chain_is_refused_before_it_can_run(tmp_path: Path, features: pd.DataFrame) -> None:
    marker = tmp_path / "pwned"
    path = gadget_model(tmp_path / "evil.skops", marker)
    untrusted = sorted(sio.get_untrusted_types(file=path))
    assert "numpy.testing._private.utils.runstring" in untrusted

    expected = f"{path}: refusing to load: it contains types gpuhealth does not trust: {', '.join(untrusted)} ("
    with pytest.raises(ModelError, match=re.escape(expected)) as err:
        RiskModel.load(path)
    assert "\n" not in str(err.value)
    assert not marker.exists()
    # The same archive from the store (serve's reload, promote, `model add`): refused, named by version.
    expected = (
        f"20261206-0000-evil: refusing to load: it contains types gpuhealth does not trust: {', '.join(untrusted)} ("
    )
    with pytest.raises(ModelError, match=re.escape(expected)):
        RiskModel.from_bytes(path.read_bytes(), name="20261206-0000-evil")
    assert not marker.exists()

    # The chain is real: the old prefix rule refused none of it, and scoring ran its code.
    assert old_rule(untrusted) == untrusted
    obj = sio.load(path, trusted=old_rule(untrusted))
    old = RiskModel(heads=obj["heads"], meta=json.loads(obj["meta_json"]))
    with contextlib.suppress(ValueError):  # the classifier gets runstring's None, after the code ran
        old.predict(features)
    assert marker.exists()


def test_many_refused_types_are_cut_short(tmp_path: Path) -> None:
    functions = [np.mean, np.median, np.sort, np.argsort, np.flip, np.roll, np.ravel, np.resize, np.zeros_like, np.diff]
    path = tmp_path / "many.skops"
    sio.dump({"heads": functions, "meta_json": "{}"}, path)
    with pytest.raises(ModelError, match=r"numpy\.\w+ and 2 more \(a model file may contain only") as err:
        RiskModel.load(path)
    assert str(err.value).count("numpy.") == 8


def test_shipped_model_loads_and_scores_as_before(shipped_model: RiskModel, features: pd.DataFrame) -> None:
    path = default_model_path()
    untrusted = sio.get_untrusted_types(file=path)
    # The old rule, and gpuhealth's own classes added since (MeanOfHeads, version 7).
    obj = sio.load(path, trusted=old_rule(untrusted) + [t for t in untrusted if t.startswith("predictor.model.")])
    before = RiskModel(heads=obj["heads"], meta=json.loads(obj["meta_json"]))
    assert shipped_model.meta == before.meta
    risk = shipped_model.predict(features)
    pd.testing.assert_frame_equal(risk, before.predict(features))
    assert risk["risk"].between(0, 1).all() and len(risk) == len(features)

"""The risk model: one calibrated head per failure mode (ECC, thermal, PCIe) and an overall risk.

Each head is a scikit-learn `Pipeline` (feature selection, then gradient-boosted trees
that take NaN natively), calibrated with isotonic regression on out-of-fold scores (folds
by GPU, see `train`), so that a 0.7 means about 7 in 10 such GPUs fail within the window.
A head is the mean of `MEMBERS` such calibrated heads, each with its own training seed
(`MeanOfHeads`): one calibration rests on few failures, and its steps move with the seed.
The overall risk is the chance that at least one mode fails: 1 - prod(1 - p_mode).

Saved with skops (pickle and joblib run code on load) together with metadata:
scikit-learn version, features, training window, data hash and validation scores.
Loading refuses, with a clear message, a file holding any type beyond skops' safe
defaults and `predictor.trusted_types.TRUSTED_TYPES`, and a different scikit-learn version.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sklearn
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import average_precision_score, brier_score_loss
from sklearn.model_selection import StratifiedGroupKFold
from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits

from predictor.explanation import reasons_in_words
from predictor.features import FEATURES, USED_COLUMNS, build_features, iter_specs
from predictor.shared_arrays import share_empty_arrays
from predictor.trusted_types import TRUSTED_TYPES, needed_types

MODES = ("ecc", "thermal", "pcie")
DAY = pd.Timedelta(days=1)
HOUR = pd.Timedelta(hours=1)
Progress = Callable[[str], None]
REFUSED_SHOWN = 8
"""At most this many refused type names in a load error (a crafted file may hold hundreds)."""
MEMBERS = 2
"""Calibrated heads per mode, each trained with its own seed, whose mean is the mode's risk.
The calibration's steps rest on a few hundred failures and move with the seed (the folds it
is fitted on, the trees' bins): on 36 held-out fleets three seeds gave 29, 31 and 30 false
episodes. On 12 fresh fleets, judged by a rule set beforehand, means of two had 5.7 false
episodes against their members' 7.3 and caught as many failures (docs/model.md, "Two seeds
in one model"). Each member costs its training and scoring time again."""


class ModelError(RuntimeError):
    """A model cannot be trained, saved or loaded; the message says why and what to do."""


class ColumnSelector(TransformerMixin, BaseEstimator):
    """Pick the named columns of a DataFrame as a float array (the head's features).

    Parameters
    ----------
    columns : list of str
        Feature names, in order.
    """

    def __init__(self, columns: Sequence[str] = ()) -> None:
        self.columns = columns

    def fit(self, X: pd.DataFrame, y: object = None, **_params: object) -> ColumnSelector:
        # A feature the training data never has (retired pages on Ampere+ fleets) cannot
        # be learned from, and the trees cannot bin an all-NaN column: it is fed as a
        # constant, so every head keeps the same columns (and monotonic constraints).
        self.columns_ = list(self.columns)
        present = X[self.columns_].notna().any()
        self.empty_ = [c for c in self.columns_ if not present[c]]
        return self

    def transform(self, X: pd.DataFrame) -> np.ndarray:
        out = X[self.columns_].to_numpy(dtype=np.float64, copy=True)
        for c in getattr(self, "empty_", ()):
            out[:, self.columns_.index(c)] = 0.0
        return out


class MeanOfHeads(ClassifierMixin, BaseEstimator):
    """A head that is the mean of fitted heads' probabilities (see `MEMBERS`).

    Parameters
    ----------
    members : list of fitted classifiers
        Calibrated heads of one mode, each trained with its own seed.
    """

    def __init__(self, members: Sequence[Any] = ()) -> None:
        self.members = members

    def fit(self, X: pd.DataFrame, y: object = None, **_params: object) -> MeanOfHeads:
        raise NotImplementedError("MeanOfHeads holds heads fitted by `train_sets`; it is not fitted itself")

    @property
    def classes_(self) -> np.ndarray:
        return np.asarray(self.members[0].classes_)

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return np.mean([m.predict_proba(X) for m in self.members], axis=0)


def head_features(mode: str) -> list[str]:
    """The features one head looks at: its mode's and the general ones."""
    return [s.name for s in iter_specs(mode)]


def monotonic_cst(mode: str) -> list[int]:
    """Per head feature: 1 where more of it must never lower the head's risk (physics), -1 where
    less of it must never do so, else 0."""
    return [s.monotonic for s in iter_specs(mode)]


def make_head(mode: str, seed: int = 0) -> Pipeline:
    """An unfitted head: feature selection + gradient-boosted trees (NaN-aware), monotonic
    in the features where physics is (more DBEs, remaps, replays or excess heat)."""
    return Pipeline(
        [
            ("select", ColumnSelector(head_features(mode))),
            (
                "trees",
                HistGradientBoostingClassifier(
                    learning_rate=0.1,
                    max_iter=150,
                    max_leaf_nodes=15,
                    # Few rows before a failure show its precursor yet (a thermal fault
                    # may show in 3 of them): leaves must be allowed to be small.
                    min_samples_leaf=10,
                    # Rows before a failure are ~0.1 %: weigh them up so the trees learn them;
                    # the isotonic calibration maps scores back to real probabilities.
                    class_weight="balanced",
                    l2_regularization=1.0,
                    early_stopping=False,
                    monotonic_cst=monotonic_cst(mode),
                    random_state=seed,
                ),
            ),
        ]
    )


def make_labels(ident: pd.DataFrame, failures: pd.DataFrame, lead: pd.Timedelta, window: pd.Timedelta) -> pd.DataFrame:
    """Per (GPU, cutoff): 1 where that GPU fails with a mode in (cutoff + lead, cutoff + window].

    Also `imminent`: it fails within (cutoff, cutoff + lead] — too late to count as a
    prediction and too close to count as healthy, so training leaves those rows out.
    """
    out = pd.DataFrame(0, index=ident.index, columns=[*MODES, "any", "imminent"], dtype=np.int8)
    if failures.empty:
        return out
    f = failures[["gpu_uuid", "failed_at", "mode"]].copy()
    f["gpu_uuid"] = f["gpu_uuid"].astype(str)
    left = pd.DataFrame({"gpu_uuid": ident["gpu_uuid"].astype(str).to_numpy(), "cutoff": ident["cutoff"].to_numpy()})
    left["row"] = np.arange(len(left))
    m = left.merge(f, on="gpu_uuid", how="inner")
    dt = m["failed_at"] - m["cutoff"]
    hit = (dt > lead) & (dt <= window)
    imminent = (dt > pd.Timedelta(0)) & (dt <= lead)
    for mode in MODES:
        rows = m.loc[hit & (m["mode"] == mode), "row"].to_numpy()
        out.iloc[rows, out.columns.get_loc(mode)] = 1
    out.iloc[m.loc[hit, "row"].to_numpy(), out.columns.get_loc("any")] = 1
    out.iloc[m.loc[imminent, "row"].to_numpy(), out.columns.get_loc("imminent")] = 1
    return out


def failure_counts(failures: pd.DataFrame) -> dict[str, int]:
    """How many failures of each mode a failure frame holds ({} for none)."""
    return {str(k): int(v) for k, v in failures["mode"].value_counts().items()} if len(failures) else {}


def data_hash(frame: pd.DataFrame, failures: pd.DataFrame) -> str:
    """A short fingerprint of the training data (shape, time span, identities, labels)."""
    h = hashlib.sha256()
    h.update(str((len(frame), list(frame.columns))).encode())
    h.update(pd.util.hash_pandas_object(frame[["timestamp", "gpu_uuid"]], index=False).to_numpy().tobytes())
    if len(failures):
        h.update(
            pd.util.hash_pandas_object(failures[["gpu_uuid", "failed_at", "mode"]], index=False).to_numpy().tobytes()
        )
    return h.hexdigest()[:16]


@dataclass
class RiskModel:
    """Calibrated heads per mode plus metadata; `predict` gives per-mode and overall risk."""

    heads: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    def predict(self, features: pd.DataFrame) -> pd.DataFrame:
        """Columns risk, risk_ecc, risk_thermal, risk_pcie, indexed like `features`."""
        # One OpenMP thread: scoring batches are small, and with a busy core the trees'
        # threads spin-wait each other (measured 20x slower on a 2-core machine).
        with threadpool_limits(limits=1, user_api="openmp"):
            return self._predict(features)

    def _predict(self, features: pd.DataFrame) -> pd.DataFrame:
        out = pd.DataFrame(index=features.index)
        none_fail = np.ones(len(features))
        for mode in MODES:
            p = self.heads[mode].predict_proba(features)[:, 1] if len(features) else np.empty(0)
            out[f"risk_{mode}"] = p
            none_fail *= 1.0 - p
        out.insert(0, "risk", 1.0 - none_fail)
        return out

    def explain(
        self, features: pd.DataFrame, risk: pd.DataFrame, rows: np.ndarray, top: int = 3
    ) -> dict[int, list[str]]:
        """Reasons for the given row positions: the features whose typical value lowers risk most.

        For each flagged GPU and each feature of its riskiest head, the feature is set to
        the fleet's usual value (the median at that cutoff) and the head re-scored; the
        biggest drops are the reasons, shown with the GPU's value and the usual one.
        """
        reasons: dict[int, list[str]] = {}
        if len(rows) == 0:
            return reasons
        with threadpool_limits(limits=1, user_api="openmp"):
            return self._explain(features, risk, rows, top)

    def _explain(self, features: pd.DataFrame, risk: pd.DataFrame, rows: np.ndarray, top: int) -> dict[int, list[str]]:
        reasons: dict[int, list[str]] = {}
        usual = features.groupby("cutoff")[list(FEATURES)].transform("median")
        for mode in MODES:
            mine = rows[risk[[f"risk_{m}" for m in MODES]].to_numpy()[rows].argmax(axis=1) == MODES.index(mode)]
            if len(mine) == 0:
                continue
            names = list(head_features(mode))
            matrix = self._drops(mode, names, features, usual, mine, risk[f"risk_{mode}"].to_numpy()[mine])
            reasons.update(reasons_in_words(names, mine, matrix, features, usual, top))
        return reasons

    def _drops(
        self, mode: str, names: list[str], features: pd.DataFrame, usual: pd.DataFrame, mine: np.ndarray,
        base: np.ndarray,
    ) -> np.ndarray:  # fmt: skip
        """How much `mode`'s risk of each row `mine` (`base`) drops with each feature set to its usual value.

        Every what-if in one predict call (per-call overhead dominates small batches), and only the
        what-ifs that change the row: a value already the usual one drops nothing (0), and an unknown
        value (NaN: a young GPU's heat, a memory sensor that reads nothing) is no reason (-inf). The
        head's features are float64 in the what-ifs (the trees convert their input to it anyway)."""
        own = features[names].to_numpy(dtype=np.float64)[mine]
        alt = usual[names].to_numpy(dtype=np.float64)[mine]
        unknown = np.isnan(own)
        j, k = np.nonzero(~unknown & ~(own == alt))
        matrix = np.where(unknown, -np.inf, (base - base)[:, None])  # NaN where the risk is unknown
        if len(j):
            rows = features.iloc[mine[j]].reset_index(drop=True)  # a head sees what `predict` gives it
            for c, name in enumerate(names):
                rows[name] = np.where(k == c, alt[j, c], own[j, c])
            matrix[j, k] = base[j] - self.heads[mode].predict_proba(rows)[:, 1]
        return matrix

    # -- persistence ---------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The model as a skops archive in memory (what `save` writes), e.g. for the store."""
        import skops.io as sio

        share_empty_arrays(self.heads)  # the trees' empty bitsets as one array: a third fewer to load
        obj = {"heads": self.heads, "meta_json": json.dumps(self.meta, sort_keys=True)}
        return bytes(sio.dumps(obj, compression=zipfile.ZIP_DEFLATED))

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "model") -> RiskModel:
        """Read a model from `to_bytes`' archive, with the same checks as `load`; `name` says which in errors."""
        import skops.io as sio

        return cls._checked(
            name, lambda t: sio.loads(bytes(data), trusted=t), lambda: sio.get_untrusted_types(data=data)
        )

    def save(self, path: str | Path) -> Path:
        """Write the model with skops, metadata included."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(self.to_bytes())
        return p

    @classmethod
    def load(cls, path: str | Path) -> RiskModel:
        """Read a model saved by `save`, trusting only skops' defaults and `TRUSTED_TYPES`."""
        import skops.io as sio

        p = Path(path)
        if not p.exists():
            raise ModelError(f"{p}: no such model file (train one with `gpuhealth train`)")
        return cls._checked(str(p), lambda t: sio.load(p, trusted=t), lambda: needed_types(p))

    @classmethod
    def _checked(cls, shown: str, read: Callable[[list[str]], Any], types: Callable[[], list[str]]) -> RiskModel:
        """A model read by `read(trusted)` (skops' load of a file or of bytes) under the allow-list; `shown`
        names it in errors, `types()` lists what the archive holds beyond skops' defaults."""
        from skops.io.exceptions import UntrustedTypesFoundException

        # One pass: skops audits every type against the allow-list before it builds any object
        # (`audit_tree` before `construct`), so an archive with another type builds nothing. Only a
        # refused one is read again, to name every type it holds that is not on the list. By exact
        # name (skops compares full names as sets): a prefix such as "numpy." would also trust
        # numpy functions, which FunctionTransformers can chain into running any code.
        try:
            obj = read(list(TRUSTED_TYPES))
        except UntrustedTypesFoundException:
            raise ModelError(_refusal(shown, sorted(set(types()) - set(TRUSTED_TYPES)))) from None
        except Exception as err:  # skops raises several kinds for a file that is not a model
            raise ModelError(f"{shown}: not a gpuhealth model file ({type(err).__name__}: {err})") from err
        try:
            meta = json.loads(obj["meta_json"])
            heads = {m: obj["heads"][m] for m in MODES}
        except (TypeError, KeyError, IndexError, ValueError) as err:
            raise ModelError(f"{shown}: a skops file, but not a gpuhealth model (no heads and metadata)") from err
        if not isinstance(meta, dict):
            kind = type(meta).__name__
            kind = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
            raise ModelError(
                f"{shown}: a skops file, but not a gpuhealth model (its metadata is {kind}, not an object)"
            )
        trained = meta.get("sklearn_version")
        if trained != sklearn.__version__:
            raise ModelError(
                f"{shown} was trained with scikit-learn {trained}, this is {sklearn.__version__}: "
                f"retrain it (`gpuhealth train` / `make model`) or install scikit-learn=={trained}"
            )
        return cls(heads=heads, meta=meta)


def _refusal(path: Path | str, refused: list[str]) -> str:
    """The one-line error for a model file holding types outside the allow-list."""
    names = ", ".join(refused[:REFUSED_SHOWN])
    if len(refused) > REFUSED_SHOWN:
        names += f" and {len(refused) - REFUSED_SHOWN} more"
    return (
        f"{path}: refusing to load: it contains types gpuhealth does not trust: {names} "
        "(a model file may contain only skops' safe defaults and the types in predictor/trusted_types.py; "
        "use a model made by `gpuhealth train`)"
    )


def training_cutoffs(frame: pd.DataFrame, window: pd.Timedelta, every: str) -> pd.DatetimeIndex:
    """Cutoffs from 2 days after the first sample to one window before the last (labels complete)."""
    start = frame["timestamp"].min() + 2 * DAY
    end = frame["timestamp"].max() - window
    if end <= start:
        raise ModelError(
            f"history spans {frame['timestamp'].min():%Y-%m-%d}..{frame['timestamp'].max():%Y-%m-%d}: "
            f"too short to train with a {window} window (needs more than 2 days + window)"
        )
    return pd.date_range(start.ceil("h"), end, freq=every)


@dataclass(frozen=True)
class TrainingSet:
    """One history to learn from: a simulated fleet, or the operator's own (from the store).

    `weight` is what all its rows weigh together against the other sets (the trees' sample
    weights and the calibration's), whatever its size: a big simulated prior does not
    drown a small real fleet by its number of rows alone.
    """

    name: str
    frame: pd.DataFrame
    failures: pd.DataFrame
    weight: float = 1.0


def train(
    frame: pd.DataFrame,
    failures: pd.DataFrame,
    lead: pd.Timedelta = HOUR,
    window: pd.Timedelta = 7 * DAY,
    every: str = "3h",
    seed: int = 0,
    folds: int = 3,
    progress: Progress | None = None,
    members: int = MEMBERS,
) -> RiskModel:
    """Fit and calibrate on one history (see `train_sets`)."""
    return train_sets([TrainingSet("history", frame, failures)], lead, window, every, seed, folds, progress, members)


POSITIVES_EVERY = "1h"
"""Cutoff spacing of the rows before a failure (or just after the window) in training: a fast
precursor (a heat sink failing within two days) shows in a handful of rows at a 6 h spacing,
so the rows near failures are taken every hour and the healthy ones at the training spacing,
weighted up by the ratio (the weighted rows stand for every hour's)."""
CHUNK_CUTOFFS = 1024
"""Cutoffs per feature build in training: the hourly rows are thinned chunk by chunk."""


def _set_rows(
    ts: TrainingSet, lead: pd.Timedelta, window: pd.Timedelta, every: str, say: Progress
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Features and labels of one set at its cutoffs, rows just before a failure left out.

    Rows whose GPU fails within the window are taken every POSITIVES_EVERY (when that is
    finer than `every`), the others every `every` with their weight scaled to match.
    """
    coarse = pd.Timedelta(every)
    fine = pd.Timedelta(POSITIVES_EVERY)
    if fine >= coarse or coarse % fine != pd.Timedelta(0):
        fine = coarse  # the grid cannot be thinned evenly: every row at `every`
    cuts = training_cutoffs(ts.frame, window, POSITIVES_EVERY if fine < coarse else every)
    on_grid = ((cuts - cuts[0]) % coarse) == pd.Timedelta(0)
    say(f"{ts.name}: features at {int(on_grid.sum())} cutoffs (every {fine} before failures)")
    parts = []
    for i in range(0, len(cuts), CHUNK_CUTOFFS):
        X = build_features(ts.frame, cuts[i : i + CHUNK_CUTOFFS], failures=ts.failures)
        y = make_labels(X, ts.failures, lead, window)
        grid = (((X["cutoff"] - cuts[0]) % coarse) == pd.Timedelta(0)).to_numpy()
        keep = (y["imminent"].to_numpy() == 0) & (grid | (y["any"].to_numpy() == 1))
        X, y = X[keep].reset_index(drop=True), y[keep].reset_index(drop=True)
        # A healthy row stands for the hours between grid cutoffs; a row before a failure for its own.
        X["_rows"] = np.where(y["any"].to_numpy() == 1, 1.0, coarse / fine)
        parts.append((X, y))
    X = pd.concat([p[0] for p in parts], ignore_index=True)
    y = pd.concat([p[1] for p in parts], ignore_index=True)
    # Validation: each set's last 20 % of time (sets may cover different spans).
    X["_set"] = ts.name
    X["_fit"] = (X["cutoff"] <= X["cutoff"].quantile(0.8)).to_numpy()
    X["_weight"] = ts.weight
    return X, y


def train_sets(
    sets: Sequence[TrainingSet],
    lead: pd.Timedelta = HOUR,
    window: pd.Timedelta = 7 * DAY,
    every: str = "3h",
    seed: int = 0,
    folds: int = 3,
    progress: Progress | None = None,
    members: int = MEMBERS,
) -> RiskModel:
    """Fit and calibrate on the first 80 % of each set's time, validate on the last 20 %.

    Calibration is cross-fitted: the training GPUs are split into `folds` groups, each
    head is fitted on the others and scores the held-out group; one isotonic calibrator
    is fitted on all those out-of-fold scores, and the head is refitted on every row. A
    GPU's score never calibrates a head that saw it, and every failure of the training
    span helps calibrate (Platt scaling on one later slice had too few failures and
    squashed confident scores). Sets are weighted by `TrainingSet.weight` per row.

    Each mode's head is the mean of `members` such heads (`MeanOfHeads`; one: the head
    itself), trained with seeds `seed * members` to `seed * members + members - 1`: another
    `seed` gives a model that shares no member with this one.
    """
    say = progress or (lambda _msg: None)
    if not sets:
        raise ModelError("nothing to train on: no history given")
    if members < 1:
        raise ModelError(f"a head needs at least one member, got members={members}")
    member_seeds = list(range(seed * members, seed * members + members))
    names = [s.name for s in sets]
    if len(set(names)) != len(names):
        raise ModelError(f"training sets need distinct names, got {names}")
    parts = [_set_rows(ts, lead, window, every, say) for ts in sets]
    X = pd.concat([p[0] for p in parts], ignore_index=True)
    y = pd.concat([p[1] for p in parts], ignore_index=True)
    del parts
    fit_rows = X.pop("_fit").to_numpy(dtype=bool)
    weight = X.pop("_weight").to_numpy(dtype=float)
    stands_for = X.pop("_rows").to_numpy(dtype=float)
    set_name = X.pop("_set").to_numpy()
    # Per set, rows count as weight / (rows of the set): every set weighs what it is told,
    # whatever its size (a 90-day prior fleet against a fortnight of real history).
    per_set = pd.Series(stands_for).groupby(set_name).transform("sum").to_numpy(dtype=float)
    w = weight * stands_for / per_set
    w = w / w[fit_rows].mean()
    Xf, yf, wf = X[fit_rows].reset_index(drop=True), y[fit_rows].reset_index(drop=True), w[fit_rows]
    groups = (pd.Series(set_name[fit_rows]) + "/" + Xf["gpu_uuid"].astype(str)).to_numpy()
    val_rows = ~fit_rows
    heads: dict[str, Any] = {}
    scores: dict[str, dict[str, float]] = {}
    for mode in MODES:
        n_pos = int(yf[mode].sum())
        failing = len(set(groups[yf[mode].to_numpy() == 1]))
        if failing < folds:
            raise ModelError(
                f"only {failing} GPU(s) with {mode} failures in the training part of the history "
                f"(need {folds}, one per calibration fold): train on a longer history or a bigger fleet"
            )
        fitted = []
        for member_seed in member_seeds:
            say(f"fitting and calibrating the {mode} head (seed {member_seed}) on {len(Xf):,} rows "
                f"({n_pos} before a failure), {folds} folds")  # fmt: skip
            fitted.append(_fit_head(mode, member_seed, folds, Xf, yf[mode], wf, groups))
        cal = fitted[0] if members == 1 else MeanOfHeads(fitted)
        heads[mode] = cal
        yv = y.loc[val_rows, mode].to_numpy()
        pv = cal.predict_proba(X[val_rows])[:, 1] if val_rows.any() else np.empty(0)
        scores[mode] = {
            "average_precision": float(average_precision_score(yv, pv)) if yv.any() else float("nan"),
            "brier": float(brier_score_loss(yv, pv)) if len(yv) else float("nan"),
            "positives": int(yv.sum()),
            "rows": len(yv),
        }
    model = RiskModel(heads=heads)
    frames = [s.frame for s in sets]
    fails = pd.concat([s.failures for s in sets], ignore_index=True)
    model.meta = {
        "format": 2,
        "sklearn_version": sklearn.__version__,
        "features": list(FEATURES),
        "head_features": {m: head_features(m) for m in MODES},
        "monotonic": {m: [n for n, c in zip(head_features(m), monotonic_cst(m), strict=True) if c] for m in MODES},
        "training_window": [
            str(min(f["timestamp"].min() for f in frames)),
            str(max(f["timestamp"].max() for f in frames)),
        ],
        "training_sets": [
            {
                "name": s.name,
                "weight": s.weight,
                "gpus": int(s.frame["gpu_uuid"].nunique()),
                "span": [str(s.frame["timestamp"].min()), str(s.frame["timestamp"].max())],
                "failures": failure_counts(s.failures),
            }
            for s in sets
        ],
        "validation_from": "the last 20 % of each training set's time",
        "lead_hours": lead / HOUR,
        "window_days": window / DAY,
        "cutoff_every": every,
        "positives_every": POSITIVES_EVERY,
        "calibration": f"isotonic on {folds}-fold out-of-fold scores, folds by GPU"
        + (f"; the mean of {members} heads" if members > 1 else ""),
        "seeds": member_seeds,
        "data_hash": _sets_hash(sets),
        "inputs_seen": [c for c in USED_COLUMNS if any(c in f.columns and f[c].notna().any() for f in frames)],
        "rows": len(X),
        "gpus": int(sum(f["gpu_uuid"].nunique() for f in frames)),
        "model_names": sorted({str(m) for f in frames for m in f["model_name"].dropna().unique()}),
        "failures": failure_counts(fails),
        "validation": scores,
    }
    return model


def _fit_head(
    mode: str, seed: int, folds: int, X: pd.DataFrame, y: pd.Series, w: np.ndarray, groups: np.ndarray
) -> CalibratedClassifierCV:
    """One calibrated head of `mode`, fitted with `seed` (its folds and its trees')."""
    # Folds by GPU (no GPU in both halves), stratified so each fold holds failing GPUs.
    splits = list(StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed).split(X, y, groups))
    # ensemble=False: one calibrator on the out-of-fold scores of every training row
    # (all failures), then the head refitted on all rows; averaging per-fold
    # calibrators let one fold with few failures cap the risk of certain ones.
    cal = CalibratedClassifierCV(make_head(mode, seed), method="isotonic", cv=splits, ensemble=False)
    with warnings.catch_warnings():
        # The weights reach the trees through the pipeline's step parameter below.
        warnings.filterwarnings("ignore", message="Since Pipeline does not appear to accept sample_weight")
        cal.fit(X, y, sample_weight=w, trees__sample_weight=w)
    # The splits are every training row's index, several times: 36 of a model file's 45 MB.
    # They are not needed to score; the metadata says how the folds were drawn.
    cal.set_params(cv=folds)
    return cal


def _sets_hash(sets: Sequence[TrainingSet]) -> str:
    """One fingerprint over every set's data and weight (one set: that set's `data_hash`)."""
    if len(sets) == 1 and sets[0].weight == 1.0:
        return data_hash(sets[0].frame, sets[0].failures)
    h = hashlib.sha256()
    for s in sets:
        h.update(f"{s.name}:{s.weight}:{data_hash(s.frame, s.failures)}".encode())
    return h.hexdigest()[:16]

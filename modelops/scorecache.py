"""Kept work of the cross-domain evaluation: its trained models and its scored rows.

`gpuhealth evaluate --cross-domain` trains a model per left-out family (minutes each) and scores
45 fleets of half a million GPU-hours (most of the rest). A change of the policy's waits, or of
how the evaluation judges, needs neither again: with `--scores DIR` both are kept in DIR and read
back when nothing they depend on has changed, so such a change is measured in minutes.

What "nothing changed" means is part of each file's name, a hash of:
- the source of the packages the work runs (core, predictor, simulator): any edit of the
  features, the model, the rules or the simulator makes the kept files stale, and they are
  made again, never used;
- for a model, the plan's training fleets and the family left out; for scored rows, the
  model (its metadata: training data hash, validation metrics), the held-out fleet (family,
  seed, size) and the risk thresholds the node holds are decided with.

The waits (`Thresholds.wait_for`) are not in the key: scored rows are decided again under the
current ones (`predictor.replay.apply_waits`, with the probation and the hold). A file that
cannot be read is made again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from modelops.plan import Plan
from predictor.conditions import WAIT_INPUTS
from predictor.evaluate import Scored
from predictor.model import ModelError, RiskModel
from predictor.thresholds import Thresholds

Progress = Callable[[str], None]
PACKAGES = ("core", "predictor", "simulator")
"""The packages whose source the kept work depends on."""
SCORED_COLUMNS = ("gpu_uuid", "hostname", "model_name", "cutoff", "last_seen", "risk", "risk_ecc", "risk_thermal",
                  "risk_pcie", "rule_alert", "rule_act", "remap_alone", "held", *WAIT_INPUTS)  # fmt: skip
"""What is kept of scored rows: all but the decisions the waits make (`demote`, `alert`)."""


@cache
def code_hash() -> str:
    """A hash of the source files of `PACKAGES` (path and content, in order)."""
    import importlib

    h = hashlib.sha256()
    for name in PACKAGES:
        root = Path(importlib.import_module(name).__file__ or "").parent
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root.parent)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _key(*parts: Any) -> str:
    text = json.dumps([code_hash(), *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def model_key(model: RiskModel) -> str:
    """What tells one model from another: its metadata (training data hash, features, metrics)."""
    return hashlib.sha256(json.dumps(model.meta, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _write_then_rename(path: Path, write: Callable[[Path], Any]) -> None:
    """`write` a temporary file beside `path`, then rename it over `path`: a run that stops half way
    leaves no half-written file under a name that says it is whole (nor a temporary one)."""
    tmp = path.with_suffix(".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class ScoreCache:
    """Models and scored rows of the cross-domain evaluation, kept in a folder."""

    def __init__(self, folder: Path, progress: Progress | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.say = progress or (lambda _m: None)

    def model(self, plan: Plan, exclude: str, train: Callable[[], RiskModel]) -> RiskModel:
        """The model trained without `exclude` on the plan's fleets: kept, or trained and kept."""
        training = {k: v for k, v in asdict(plan).items() if not k.startswith("test_") and k != "score_every"}
        path = self.folder / f"model-without-{exclude}-{_key('model', training, exclude)}.skops"
        if path.exists():
            try:
                model = RiskModel.load(path)
                self.say(f"kept model {path.name}")
                return model
            except ModelError as e:
                self.say(f"kept model unreadable, training again: {e}")
        model = train()
        _write_then_rename(path, model.save)
        return model

    def scored(
        self, model: RiskModel, plan: Plan, family: str, seed: int, thresholds: Thresholds, score: Callable[[], Scored]
    ) -> Scored:
        """The held-out fleet's scored rows: kept, or scored (by `score`) and kept."""
        fleet = {"family": family, "seed": seed, "nodes": plan.test_nodes, "days": plan.test_days,
                 "acceleration": plan.test_acceleration, "every": plan.score_every}  # fmt: skip
        if plan.test_burst_remap_share is not None:  # a stressed fleet is another fleet
            fleet["burst_remap_share"] = plan.test_burst_remap_share
        key = _key("scored", model_key(model), fleet, thresholds.watch, thresholds.demote)
        path = self.folder / f"scored-{family}-{seed}-{key}.parquet"
        every = pd.Timedelta(plan.score_every)
        if path.exists():
            try:
                rows = pd.read_parquet(path)
                missing = set(SCORED_COLUMNS) - set(rows.columns)
                if missing:
                    raise ValueError(f"lacks columns {sorted(missing)}")
                self.say(f"kept scores {path.name} ({len(rows):,} rows)")
                return Scored(rows, every)
            except Exception as e:  # pyarrow raises several kinds for a damaged file
                self.say(f"kept scores {path.name} unreadable ({type(e).__name__}: {e}), scoring again")
        scored = score()
        _write_then_rename(path, lambda tmp: scored.rows[list(SCORED_COLUMNS)].to_parquet(tmp, index=False))
        return scored

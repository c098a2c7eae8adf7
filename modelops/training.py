"""Train a risk model from the fleet's own history in the store, on a prior of simulated fleets.

`gpuhealth train --db URL` runs `train_from_store`: it reads every GPU's stored hour rows (kept
at ingest with `core.hourly`, the arithmetic scoring and the features use), takes the failure and RMA records
as labels, keeps the newest `holdout_days` out of training (promote judges the model there),
and trains on the fleet together with randomised simulated fleets (`simulator.families`).
The model goes into the store as a new, inactive version with its card.

Weights: all prior fleets together weigh `prior_weight` and the fleet's own rows
`fleet_weight`, whatever their sizes (`predictor.model.TrainingSet`). The prior shows every
failure mode many times over; the fleet shows its own normal (sensors, air, workload) and
its real failures, which are few at first. Equal weights (the default) let a fleet with
a few weeks of history already move the model as much as the whole prior; raise
`fleet_weight` as the fleet's own failures accumulate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
from threadpoolctl import threadpool_limits

from core import history, hourly
from modelops.model_card import CARD_FORMAT, json_safe, trained_on
from predictor.model import DAY, HOUR, RiskModel, TrainingSet, failure_counts, train_sets
from service.scorer import all_gpus
from simulator.families import prior_fleets
from store import Store
from store.models import ModelInfo

Progress = Callable[[str], None]
READ_BATCH_GPUS = 256
"""GPUs read from the store at a time: a year of hour rows of 256 GPUs is ~900 MB as float64."""
FLEET_SET = "fleet"
"""The training set name of the fleet's own history (the prior's are the simulator's names)."""
MALFORMED = "the model's metadata is malformed"


class TrainingError(RuntimeError):
    """The store's history cannot make a model (too short, empty); the message says what to do."""


@dataclass(frozen=True)
class TrainOptions:
    """How `train_from_store` trains; the defaults are `gpuhealth train --db`'s."""

    prior_fleets: int = 4
    """Simulated fleets in the prior (0: the fleet's own history alone)."""
    prior_nodes: int = 32
    prior_days: float = 60.0
    prior_seed: int = 1000
    """First seed of the prior's fleets; the shipped model's (101, 102) and evaluation's (7) differ."""
    prior_weight: float = 1.0
    """What all prior fleets together weigh."""
    fleet_weight: float = 1.0
    """What the fleet's own history weighs."""
    holdout_days: float = 14.0
    """The newest days of the fleet's history are not trained on: promote judges the model there."""
    history_days: float | None = None
    """Read only the newest this many days of the store's history (holdout included; None: all of
    it). The hourly history is read into memory whole: a simulated fleet's hourly frame takes 0.4 GB
    per 1,000 GPUs x 100 days, and building features about doubles that."""
    lead_hours: float = 1.0
    window_days: float = 7.0
    every: str = "3h"
    seed: int = 0
    folds: int = 3
    threads: int | None = None
    """OpenMP threads for the trees (None: all cores). On a machine the service shares, 1 is
    faster: the trees' threads spin-wait for each other when a core is busy (measured 10x)."""


@dataclass
class Trained:
    """A model trained from the store, its card, and the stored record."""

    model: RiskModel
    card: dict[str, Any]
    info: ModelInfo


def fleet_history(
    store: Store, *, since: datetime | None = None, until: datetime | None = None, batch: int = READ_BATCH_GPUS
) -> pd.DataFrame:
    """Every GPU's stored hours in (since, until] (the rows the scorer reads, `core.hourly`), in batches of GPUs."""
    uuids = sorted(str(g["uuid"]) for g in all_gpus(store))
    end = until or store.samples.newest_time()
    if end is None:
        return history.empty(())
    parts = []
    for start in range(0, len(uuids), batch):
        part = store.samples.scoring_history(since=since, until=end, uuids=uuids[start : start + batch])
        if len(part):
            parts.append(part)
    if not parts:
        return history.empty(())
    out = history.validate(pd.concat(parts, ignore_index=True), source="store history, hourly")
    out.attrs[hourly.HOURLY_ATTR] = True
    return out


def split_holdout(
    frame: pd.DataFrame, failures: pd.DataFrame, days: float
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any] | None]:
    """The part to train on (history and failures up to the holdout's start) and the holdout's description."""
    if days <= 0:
        return frame, failures, None
    end = frame["timestamp"].max()
    start = end - pd.Timedelta(days=days)
    train = frame[frame["timestamp"] <= start].reset_index(drop=True)
    held = frame["timestamp"] > start
    held_failures = failures[(failures["failed_at"] > start) & (failures["failed_at"] <= end)]
    slice_ = {
        "days": days,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "gpus": int(frame.loc[held, "gpu_uuid"].nunique()),
        "failures": failure_counts(held_failures),
    }
    return train, failures[failures["failed_at"] <= start].reset_index(drop=True), slice_


def _check_span(frame: pd.DataFrame, opts: TrainOptions, holdout: dict[str, Any] | None) -> None:
    """A clear error when the fleet's history left for training is too short for the label window."""
    need = pd.Timedelta(days=2 + opts.window_days)
    span = frame["timestamp"].max() - frame["timestamp"].min() if len(frame) else pd.Timedelta(0)
    if span > need:
        return
    held = f" after keeping the newest {opts.holdout_days:g} days out" if holdout else ""
    raise TrainingError(
        f"the store's history leaves {span / DAY:.1f} days to train on{held}; training needs more than "
        f"{need / DAY:g} (2 days + the {opts.window_days:g}-day label window): lower --holdout-days or let the "
        "fleet's history grow"
    )


def build_sets(
    fleet: pd.DataFrame, failures: pd.DataFrame, opts: TrainOptions, progress: Progress
) -> list[TrainingSet]:
    """The prior's simulated fleets (sharing `prior_weight`) and the fleet's own history (`fleet_weight`)."""
    sets: list[TrainingSet] = []
    if opts.prior_fleets > 0:
        progress(
            f"simulating {opts.prior_fleets} prior fleet(s) of {opts.prior_nodes} nodes x {opts.prior_days:g} days"
        )
        each = opts.prior_weight / opts.prior_fleets
        for name, frame, labels in prior_fleets(opts.prior_fleets, opts.prior_seed, opts.prior_nodes, opts.prior_days):
            sets.append(TrainingSet(name, frame, labels, each))
    if opts.fleet_weight > 0:
        sets.append(TrainingSet(FLEET_SET, fleet, failures, opts.fleet_weight))
    return sets


def train_from_store(
    store: Store,
    opts: TrainOptions | None = None,
    *,
    progress: Progress | None = None,
    now: datetime | None = None,
) -> Trained:
    """Train on the store's history and failures plus the prior; store the model, inactive, with its card."""
    o = opts or TrainOptions()
    say = progress or (lambda _msg: None)
    if o.prior_fleets < 0 or o.prior_weight < 0 or o.fleet_weight < 0 or o.holdout_days < 0:
        raise TrainingError("prior fleets, weights and holdout days must not be negative")
    if o.history_days is not None and not o.history_days > o.holdout_days:
        raise TrainingError(
            f"--history-days {o.history_days:g} leaves nothing to train on after the {o.holdout_days:g} held-out days"
        )
    if o.fleet_weight == 0 and (o.prior_fleets == 0 or o.prior_weight == 0):
        raise TrainingError("nothing to train on: the fleet weighs 0 and there is no prior")
    newest = store.samples.newest_time()
    since = None if o.history_days is None or newest is None else newest - timedelta(days=o.history_days)
    say("reading the fleet's history from the store" + (f" since {since:%Y-%m-%d %H:%M}" if since else ""))
    frame = fleet_history(store, since=since, until=newest)
    if len(frame) == 0:
        raise TrainingError(
            f"{store.url} holds no history to train on: run `gpuhealth serve` (or import history) first"
        )
    failures = store.labels.failures_frame()
    fit_frame, fit_failures, holdout = split_holdout(frame, failures, o.holdout_days)
    _check_span(fit_frame, o, holdout)
    say(
        f"fleet: {frame['gpu_uuid'].nunique()} GPUs, {len(frame):,} hourly rows, {len(failures)} failure record(s); "
        + (f"holding out {holdout['start']} .. {holdout['end']}" if holdout else "no holdout")
    )
    sets = build_sets(fit_frame, fit_failures, o, say)
    lead, window = o.lead_hours * HOUR, o.window_days * DAY
    with threadpool_limits(limits=o.threads, user_api="openmp"):
        model = train_sets(sets, lead, window, o.every, o.seed, o.folds, say)
    card = training_card(model, o, fit_frame, fit_failures, holdout)
    info = store.models.put(model.to_bytes(), card, created_at=now or datetime.now(UTC))
    return Trained(model, card, info)


def training_card(
    model: RiskModel,
    opts: TrainOptions,
    fleet: pd.DataFrame,
    failures: pd.DataFrame,
    holdout: dict[str, Any] | None,
) -> dict[str, Any]:
    """The card of a model trained from the store: what it learned from, the holdout, the weights, its scores."""
    prior = [s for s in model.meta.get("training_sets", []) if s.get("name") != FLEET_SET]
    return json_safe(
        {
            "format": CARD_FORMAT,
            "trained_by": "gpuhealth train --db",
            "trained_on": {
                **trained_on(model.meta),
                "fleet": {
                    "weight": opts.fleet_weight,
                    "gpus": int(fleet["gpu_uuid"].nunique()),
                    "rows": len(fleet),
                    "span": [fleet["timestamp"].min(), fleet["timestamp"].max()],
                    "failures": failure_counts(failures),
                },
                "prior": {
                    "fleets": opts.prior_fleets,
                    "nodes": opts.prior_nodes,
                    "days": opts.prior_days,
                    "first_seed": opts.prior_seed,
                    "weight": opts.prior_weight,
                    "names": [s.get("name") for s in prior],
                },
            },
            "holdout": holdout,
            "options": asdict(opts),
            "validation": model.meta.get("validation", {}),
            "promotion": None,
            "meta": model.meta,
        }
    )


def fleet_trained_until(meta: Mapping[str, Any]) -> pd.Timestamp | None:
    """The newest time of a fleet's own history a model trained on (`train --db`'s `fleet` set, in the
    model's metadata), None for a model that trained on none: judging it there would judge it in sample.

    Raises TrainingError naming the field where the training sets are not what `train` writes (a
    list of objects, the fleet's `span` two times; a time without a zone is UTC, as the store's)."""
    for i, s in enumerate(_training_sets(meta)):
        if s.get("name") != FLEET_SET:
            continue
        span = s.get("span")
        if not isinstance(span, list) or len(span) != 2:
            raise TrainingError(f"{MALFORMED}: training_sets[{i}].span is not a list of two times")
        try:
            until = pd.Timestamp(span[1]) if isinstance(span[1], str | int | float) else pd.NaT
        except (TypeError, ValueError, OverflowError):  # pandas' parse errors are ValueErrors
            until = pd.NaT
        if until is pd.NaT:
            raise TrainingError(f"{MALFORMED}: training_sets[{i}].span[1] {repr(span[1])[:40]} is not a time")
        return until if until.tzinfo is not None else until.tz_localize("UTC")
    return None


def _training_sets(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The metadata's training sets (none for a model that predates them), each an object."""
    sets = meta.get("training_sets") or []
    if not isinstance(sets, list):
        raise TrainingError(f"{MALFORMED}: training_sets is {_kind(sets)}, not a list")
    for i, s in enumerate(sets):
        if not isinstance(s, Mapping):
            raise TrainingError(f"{MALFORMED}: training_sets[{i}] is {_kind(s)}, not an object")
    return sets


def _kind(v: Any) -> str:
    """'an int', 'a str': the kind of a JSON value, for an error."""
    name = type(v).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def store_model_file(
    store: Store, path: str | Path, holdout_days: float = 14.0, *, now: datetime | None = None
) -> Trained:
    """A model file stored as an inactive candidate, judged by promote on the newest `holdout_days` of
    the fleet's history: another release's shipped model, one trained elsewhere (`train --families`),
    or the model serve runs now, so that the fleet's own outcomes decide its pending-remap drain.

    The file is loaded first with every check of `RiskModel.load` (only the trusted types, the same
    scikit-learn): a file that would not load is never stored. A model whose metadata says it was
    trained on a fleet's own history (`train --db`) up to a time inside that slice is refused: promote
    must judge it on days it never saw."""
    p = Path(path)
    if not holdout_days > 0:
        raise TrainingError("--holdout-days must be above 0: promote judges a model on the fleet's newest days")
    if not p.is_file():
        raise TrainingError(f"{p}: no such model file")
    data = p.read_bytes()
    model = RiskModel.from_bytes(data, name=str(p))  # every check of a load, on the very bytes stored
    try:
        trained = fleet_trained_until(model.meta)
    except TrainingError as err:
        raise TrainingError(f"{p}: {err}") from None
    newest = store.samples.newest_time()
    if newest is None:
        raise TrainingError(
            f"{store.url} holds no history: promote would have nothing to judge {p.name} on; run `gpuhealth serve` "
            "(or import history) first"
        )
    frame = fleet_history(store, since=newest - timedelta(days=holdout_days), until=newest)
    if len(frame) == 0:
        raise TrainingError(f"{store.url} holds no hourly history in its newest {holdout_days:g} days to judge on")
    _, _, holdout = split_holdout(frame, store.labels.failures_frame(), holdout_days)
    assert holdout is not None  # holdout_days > 0
    start = pd.Timestamp(holdout["start"])
    if trained is not None and trained > start:
        raise TrainingError(
            f"{p.name} was trained on a fleet's own history up to {trained:%Y-%m-%d %H:%M}, inside "
            f"the newest {holdout_days:g} days ({start:%Y-%m-%d %H:%M} on): promote must judge a model on days "
            "it never saw; lower --holdout-days or let the fleet's history pass its training"
        )
    card = json_safe(
        {
            "format": CARD_FORMAT,
            "trained_by": "a model file (gpuhealth model add)",
            "source": {"file": p.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)},
            "trained_on": trained_on(model.meta),
            "holdout": holdout,
            "validation": model.meta.get("validation", {}),
            "promotion": None,
            "meta": model.meta,
        }
    )
    info = store.models.put(data, card, created_at=now or datetime.now(UTC))
    stored = info["card"]
    if (stored.get("source"), stored.get("holdout")) != (card["source"], card["holdout"]):
        # The same archive was stored before (put_model keeps the first record of an archive as it was).
        held = stored.get("holdout") or {}
        state = "the active model" if info["active"] else "an inactive model"
        span = f"its holdout {held['start']} .. {held['end']}" if held else "no holdout"
        raise TrainingError(
            f"{p.name} is already stored as {state}, version {info['version']} (created "
            f"{info['created_at']:%Y-%m-%d %H:%M}, {span}); a stored archive keeps its card: "
            + ("it needs no promotion" if info["active"] else f"promote {info['version']}")
        )
    return Trained(model, card, info)

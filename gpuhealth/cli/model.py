"""`gpuhealth model …` (list, show, add, promote, prune) and `gpuhealth train --db`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from core.settings import Settings, get_settings
from gpuhealth.cli.backend import fail
from gpuhealth.cli.db import DbOption, opened_store

if TYPE_CHECKING:
    from modelops.promote import Verdict

model_app = typer.Typer(
    help="Risk models trained on the fleet's own history (gpuhealth train --db) or added from a file: list, show, add, "
    "promote, prune.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
REFUSED_EXIT = 1
"""`promote`'s exit code when the candidate is refused (2 is for errors)."""


_store = opened_store
"""The store at `db`, schema upgraded, closed after (`gpuhealth db`'s)."""


def _say(msg: str) -> None:
    err.print(f"[dim]{escape(msg)}[/]", highlight=False)


def _when(t: Any) -> str:
    return "-" if t is None else f"{t:%Y-%m-%d %H:%M}"


@model_app.command("list")
def list_cmd(
    db: DbOption = None,
    output: Annotated[str, typer.Option("--format", help="table or json")] = "table",
) -> None:
    """Stored models, newest first: which is active, what each learned from, its last promotion."""
    if output not in ("table", "json"):
        raise fail(f"--format must be table or json, not {output!r}")
    with _store(db) as store:
        models = store.models.find()
    if output == "json":
        typer.echo(json.dumps([_summary(m) for m in models], indent=2, default=str))
        return
    if not models:
        err.print("no stored models: train one with `gpuhealth train --db URL`", highlight=False)
        return
    table = Table("version", "created", "active", "fleet GPUs", "fleet span", "holdout failures", "promotion")
    for m in models:
        s = _summary(m)
        table.add_row(
            s["version"], _when(m["created_at"]), "yes" if m["active"] else "", str(s["fleet_gpus"] or "-"),
            s["fleet_span"], s["holdout_failures"], s["promotion"],
        )  # fmt: skip
    Console(width=200).print(table)


def _summary(m: Any) -> dict[str, Any]:
    """A stored model in one line's worth of fields."""
    card = m["card"]
    fleet = (card.get("trained_on") or {}).get("fleet") or {}
    span = fleet.get("span") or []
    held = card.get("holdout") or {}
    promo = card.get("promotion")
    if promo is None:
        promotion = "not tried"
    elif promo.get("promoted"):
        promotion = "forced" if promo.get("forced") else f"promoted over {promo.get('baseline')}"
    else:
        promotion = "refused: " + "; ".join(promo.get("refusals") or [])
    return {
        "version": m["version"],
        "created_at": m["created_at"],
        "active": m["active"],
        "activated_at": m["activated_at"],
        "fleet_gpus": fleet.get("gpus"),
        "fleet_span": " .. ".join(str(t)[:10] for t in span) if span else "-",
        "holdout_failures": ", ".join(f"{k} {v}" for k, v in sorted((held.get("failures") or {}).items())) or "-",
        "promotion": promotion,
    }


KEEP_MODELS = 5
"""`model prune`'s default: the newest few, to go back to, besides the active one."""


@model_app.command("prune")
def prune_cmd(
    keep: Annotated[int, typer.Option(help="how many of the newest models to keep (the active one is kept too)")] = (
        KEEP_MODELS
    ),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would go; delete nothing")] = False,
    db: DbOption = None,
) -> None:
    """Delete stored models but the newest few and the active one (each archive is tens of MB)."""
    from store import StoreError

    with _store(db) as store:
        try:
            gone = store.models.prune(keep, dry_run=dry_run)
        except StoreError as e:
            raise fail(str(e)) from None
    verb = "would delete" if dry_run else "deleted"
    for m in gone:
        typer.echo(f"{verb} {m['version']} (created {_when(m['created_at'])}, {m['size'] / 1e6:.1f} MB)")
    total = sum(m["size"] for m in gone) / 1e6
    err.print(f"{verb} {len(gone)} model(s), {total:.1f} MB; kept the {keep} newest and the active one",
              highlight=False)  # fmt: skip


@model_app.command("show")
def show_cmd(
    version: Annotated[str | None, typer.Argument(help="the version (default: the active model)")] = None,
    db: DbOption = None,
) -> None:
    """A stored model's card as JSON: what it was trained on, its holdout slice, scores, promotion."""
    from store import NotFound

    with _store(db) as store:
        try:
            info = store.models.info(version) if version else store.models.active_info()
        except NotFound as e:
            raise fail(str(e)) from None
    if info is None:
        raise fail("no stored model is active: `gpuhealth model list` shows the stored ones", code=1)
    typer.echo(json.dumps(dict(info), indent=2, default=str))


@model_app.command("add")
def add_cmd(
    path: Annotated[
        Path,
        typer.Argument(
            help="a model file (.skops): another release's shipped model, one trained "
            "elsewhere, or the one serve runs now"
        ),
    ],
    db: DbOption = None,
    holdout_days: Annotated[
        float,
        typer.Option(
            min=0,
            help="promote judges it on the fleet's newest this many days (a model that never saw this fleet: "
            "a longer slice judges more modes)",
        ),
    ] = 14.0,
) -> None:
    """Store a model file as an inactive candidate, to be judged by `gpuhealth model promote` on the
    fleet's newest days like a model `gpuhealth train --db` made.

    Loaded first with every check a load makes (trusted types only, the same scikit-learn): a file that
    would not load is never stored.
    """
    from modelops.training import TrainingError, store_model_file
    from predictor.model import ModelError
    from store import StoreError

    with _store(db) as store:
        try:
            added = store_model_file(store, path, holdout_days)
        except (TrainingError, ModelError, StoreError, OSError) as e:
            raise fail(str(e)) from None
    held = added.card["holdout"]
    failures = ", ".join(f"{k} {n}" for k, n in sorted(held["failures"].items())) or "none"
    err.print(
        f"stored model {added.info['version']} (inactive) from {escape(str(path))}\n"
        f"holdout {held['start']} .. {held['end']}: {held['gpus']} GPUs, failures {failures}\n"
        f"next: gpuhealth model promote {added.info['version']} --db …",
        highlight=False,
    )
    typer.echo(added.info["version"])


@model_app.command("promote")
def promote_cmd(
    version: Annotated[str, typer.Argument(help="the stored candidate (`gpuhealth model list`)")],
    db: DbOption = None,
    force: Annotated[
        bool, typer.Option(help="activate even if worse or unjudged (the comparison is still recorded)")
    ] = False,
    against: Annotated[
        Path | None,
        typer.Option(help="with no active stored model, compare with this model file (what serve --model runs)"),
    ] = None,
    min_failures: Annotated[int, typer.Option(min=1, help="failures of a mode the slice needs to judge it")] = 3,
) -> None:
    """Activate a candidate if, on its holdout slice, it is no worse than the model it replaces.

    Compared per mode (recall: ECC and thermal 24 h ahead, PCIe 1 h) and in precision over
    alert episodes, against the active stored model, else --against FILE, else the shipped
    model. A running `gpuhealth serve` picks the new model up at its next scoring round.
    Exit code 1 when refused.
    """
    from modelops.promote import PromoteError, promote
    from predictor.model import ModelError
    from predictor.thresholds import Thresholds
    from store import StoreError

    s: Settings = get_settings()
    with _store(db) as store:
        try:
            verdict = promote(
                store, version, against=against, force=force, min_failures=min_failures,
                thresholds=Thresholds.from_settings(s), progress=_say,
            )  # fmt: skip
        except (PromoteError, ModelError, StoreError) as e:
            raise fail(str(e)) from None
    _print_verdict(verdict)
    if not verdict.promoted:
        raise typer.Exit(REFUSED_EXIT)


def _print_verdict(v: Verdict) -> None:
    """The comparison table, what could not be judged, and the outcome with its reasons."""
    if v.measures:
        table = Table("measure", "candidate", v.baseline, "judged", "detail")
        for m in v.measures:
            verdict = "WORSE" if m.worse else ("yes" if m.judged else "no")
            table.add_row(m.name, _num(m.candidate), _num(m.baseline), verdict, m.detail)
        Console(width=200, stderr=True).print(table)
    for note in v.notes:
        err.print(f"[yellow]not judged:[/] {escape(note)}", highlight=False)
    if v.forced:
        err.print(
            f"[bold red]FORCED: model {escape(v.version)} is active although promote refused it:[/]", highlight=False
        )
        for r in v.refusals:
            err.print(f"[bold red]  - {escape(r)}[/]", highlight=False)
        return
    if v.promoted:
        err.print(f"promoted {escape(v.version)} over the {escape(v.baseline)}: no worse on every judged measure",
                  highlight=False)  # fmt: skip
        return
    err.print(f"[bold red]refused:[/] model {escape(v.version)} stays inactive:", highlight=False)
    for r in v.refusals:
        err.print(f"  - {escape(r)}", highlight=False)


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


@dataclass(frozen=True)
class DbTraining:
    """`gpuhealth train --db`'s options (the defaults are `modelops.training.TrainOptions`')."""

    db: str
    out: Path | None
    prior_fleets: int
    prior_nodes: int
    prior_days: float
    prior_seed: int
    prior_weight: float
    fleet_weight: float
    holdout_days: float
    history_days: float | None
    lead_hours: float
    window_days: float
    every: str
    seed: int
    threads: int | None


def train_from_db(opts: DbTraining) -> None:
    """Train on the store's history and failures plus the simulated prior; store the model (inactive)."""
    from modelops.training import TrainingError, TrainOptions, train_from_store
    from predictor.model import ModelError
    from store import StoreError

    train_opts = TrainOptions(
        prior_fleets=opts.prior_fleets, prior_nodes=opts.prior_nodes, prior_days=opts.prior_days,
        prior_seed=opts.prior_seed, prior_weight=opts.prior_weight, fleet_weight=opts.fleet_weight,
        holdout_days=opts.holdout_days, history_days=opts.history_days, lead_hours=opts.lead_hours,
        window_days=opts.window_days, every=opts.every, seed=opts.seed, threads=opts.threads,
    )  # fmt: skip
    with _store(opts.db) as store:
        try:
            trained = train_from_store(store, train_opts, progress=lambda m: _say(f"train: {m}"))
            if opts.out is not None:
                trained.model.save(opts.out)
        except (TrainingError, ModelError, StoreError, ValueError) as e:
            raise fail(str(e)) from None
    info = trained.info
    v = trained.card.get("validation") or {}
    held = trained.card.get("holdout")
    scores = ", ".join(f"{m} {_num((v.get(m) or {}).get('average_precision'))}" for m in v)
    where = f" and {opts.out}" if opts.out is not None else ""
    err.print(
        f"stored model {info['version']} (inactive){where}: validation average precision {scores}\n"
        + (
            f"holdout {held['start']} .. {held['end']}: failures "
            + (", ".join(f"{k} {n}" for k, n in sorted(held["failures"].items())) or "none")
            if held
            else "no holdout: promote will have nothing to judge it on (use --force)"
        )
        + f"\nnext: gpuhealth model promote {info['version']} --db …",
        highlight=False,
    )

"""The commands on files and simulated fleets: `gpuhealth version`, `simulate`, `train`, `score`,
`evaluate` and `fields`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from core import catalog, kernel_log, nvlink
from core.settings import Settings
from core.units import parse_duration
from gpuhealth import __version__
from gpuhealth.cli.backend import fail

if TYPE_CHECKING:  # imported when `evaluate` runs: the CLI loads the predictor only for its commands
    from predictor.downtime import DowntimeParams

offline_app = typer.Typer()
"""`gpuhealth version`, `simulate`, `train`, `score`, `evaluate` and `fields`: added at the top level of
the command line (`gpuhealth.cli`)."""
err = Console(stderr=True)


@offline_app.command()
def version() -> None:
    """Print the gpuhealth version."""
    typer.echo(__version__)


@offline_app.command()
def simulate(
    out: Annotated[Path, typer.Option(help="history file to write (.parquet or .csv)")],
    failures: Annotated[Path, typer.Option(help="failure labels to write (.csv)")],
    nodes: Annotated[int, typer.Option(min=1, help="nodes in the fleet")] = 64,
    gpus_per_node: Annotated[int, typer.Option(min=1, help="GPUs per node")] = 8,
    days: Annotated[float, typer.Option(min=0.001, help="simulated days")] = 120.0,
    interval: Annotated[str, typer.Option(help="sampling interval, e.g. 1h, 5m")] = "1h",
    seed: Annotated[int, typer.Option(help="random seed (same seed, same fleet)")] = 0,
    models: Annotated[
        str, typer.Option(help="model mix by share of nodes, e.g. A100=0.3,H100=0.5,H200=0.2")
    ] = "A100=0.3,H100=0.5,H200=0.2",
    acceleration: Annotated[float, typer.Option(min=0, help="failure-rate multiplier over field statistics")] = 4.0,
    sudden_share: Annotated[float, typer.Option(min=0, max=1, help="share of failures without precursor")] = 0.4,
) -> None:
    """Simulate a fleet's telemetry and failures (the history frame and its labels)."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TimeRemainingColumn

    from core import history
    from simulator.fleet import SimConfig
    from simulator.models import parse_mix
    from simulator.run import simulate as run_simulation

    try:
        interval_s = parse_duration(interval)
        rest = 1.0 - sudden_share
        cfg = SimConfig(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            seed=seed,
            models=parse_mix(models),
            random_failures=True,
            acceleration=acceleration,
            mode_mix={"ecc": 0.5 * rest, "thermal": 0.25 * rest, "pcie": 0.25 * rest, "sudden": sudden_share},
        )
        for path, kinds in ((out, history.PARQUET_SUFFIXES + history.CSV_SUFFIXES), (failures, (".csv",))):
            if not path.name.lower().endswith(kinds):
                raise ValueError(f"{path}: use one of {', '.join(kinds)}")
    except ValueError as e:
        raise fail(str(e)) from None
    with Progress(
        "[progress.description]{task.description}", BarColumn(), TaskProgressColumn(),
        TimeRemainingColumn(), console=err, transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task(f"simulating {nodes * gpus_per_node} GPUs x {days:g} days", total=None)
        frame, labels = run_simulation(
            cfg, days, interval_s, progress=lambda done, total: bar.update(task, completed=done, total=total)
        )
        bar.update(task, description=f"writing {out}")
        history.write(frame, out)
        history.write_failures(labels, failures)
    by_mode = labels["mode"].value_counts().to_dict() if len(labels) else {}
    err.print(
        f"wrote {out}: {len(frame):,} rows, {frame['gpu_uuid'].nunique()} GPUs over {days:g} days\n"
        f"wrote {failures}: {len(labels)} failures " + ", ".join(f"{k} {v}" for k, v in sorted(by_mode.items())),
        highlight=False,
    )


def _read_inputs(history_path: Path, failures_path: Path | None = None, columns: Any = None) -> tuple[Any, Any]:
    """Read a history (only `columns` if given) and failure labels, or exit with the reader's one-line error."""
    import warnings

    from core import history as hist

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", hist.HistoryWarning)
            frame = hist.read(history_path, columns=columns)
        for w in caught:
            err.print(f"[yellow]warning:[/] {w.message}", highlight=False, soft_wrap=True)
        labels = hist.read_failures(failures_path) if failures_path else None
    except hist.HistoryError as e:
        raise fail(str(e)) from None
    return frame, labels


def _timedeltas(*texts: str) -> list[Any]:
    """pandas Timedeltas from duration flags, or exit with the parser's one-line error."""
    import pandas as pd

    try:
        return [pd.Timedelta(seconds=parse_duration(t)) for t in texts]
    except ValueError as e:
        raise fail(str(e)) from None


def _progress_printer(prefix: str) -> Any:
    return lambda msg: err.print(f"[dim]{prefix}:[/] {msg}", highlight=False)


@offline_app.command()
def train(
    history: Annotated[
        list[Path] | None, typer.Option(help="history frame (.parquet/.csv); repeat for several fleets")
    ] = None,
    failures: Annotated[list[Path] | None, typer.Option(help="failure labels (.csv), one per --history")] = None,
    out: Annotated[Path | None, typer.Option(help="model file to write (.skops); with --db optional")] = None,
    db: Annotated[
        str | None,
        typer.Option(
            help="train on this store's history and failure records, on a prior of simulated fleets, holding out the"
            " newest days for `gpuhealth model promote`; the model is stored there, inactive (docs/closed-loop.md)"
        ),
    ] = None,
    prior_fleets: Annotated[int, typer.Option(min=0, help="--db: simulated fleets in the prior")] = 4,
    prior_nodes: Annotated[int, typer.Option(min=1, help="--db: nodes of each prior fleet (8 GPUs each)")] = 32,
    prior_days: Annotated[float, typer.Option(min=1, help="--db: days of each prior fleet")] = 60.0,
    prior_seed: Annotated[int, typer.Option(help="--db: first seed of the prior fleets")] = 1000,
    prior_weight: Annotated[float, typer.Option(min=0, help="--db: what all prior fleets together weigh")] = 1.0,
    fleet_weight: Annotated[float, typer.Option(min=0, help="--db: what the fleet's own history weighs")] = 1.0,
    holdout_days: Annotated[
        float, typer.Option(min=0, help="--db: newest days kept out of training, for promote to judge on")
    ] = 14.0,
    history_days: Annotated[
        float | None, typer.Option(min=1, help="--db: read only the newest days of the store's history (default: all)")
    ] = None,
    seed: Annotated[int, typer.Option(help="--db: random seed of the training")] = 0,
    threads: Annotated[
        int | None, typer.Option(min=1, help="--db: threads for the trees (default: all cores; 1 beside a busy serve)")
    ] = None,
    lead: Annotated[str, typer.Option(help="a failure counts from this long after a cutoff")] = "1h",
    window: Annotated[str, typer.Option(help="... until this long after it")] = "7d",
    every: Annotated[str, typer.Option(help="cutoff spacing for training rows")] = "3h",
    families: Annotated[
        str | None,
        typer.Option(
            help="train on domain-randomised simulated fleets of these families ('all' or a list; "
            "`make model` uses all): see docs/model.md"
        ),
    ] = None,
    fleets_per_family: Annotated[int, typer.Option(min=1, help="--families: fleets simulated per family")] = 2,
    family_nodes: Annotated[int, typer.Option(min=1, help="--families: nodes per fleet (8 GPUs each)")] = 32,
    family_days: Annotated[float, typer.Option(min=10, help="--families: days per fleet")] = 90.0,
) -> None:
    """Train the risk model (time-split validation inside) from files, randomised simulated fleets
    (--families), or the fleet's own store (--db)."""
    import pandas as pd

    from predictor.model import ModelError, TrainingSet, train_sets

    lead_td, window_td, _ = _timedeltas(lead, window, every)
    if families is not None:
        from gpuhealth.cli.crossdomain import train_families

        if out is None or history or db:
            raise fail("--families trains on simulated fleets alone: give --out, and no --history or --db")
        try:
            train_families(out, families, fleets_per_family, family_nodes, family_days, every)
        except (ModelError, ValueError) as e:
            raise fail(str(e)) from None
        return
    if db is not None:
        from gpuhealth.cli.model import DbTraining, train_from_db

        if history or failures:
            raise fail("give either --db (the fleet's own store) or --history/--failures files, not both")
        hours, days = lead_td / pd.Timedelta(hours=1), window_td / pd.Timedelta(days=1)
        train_from_db(
            DbTraining(db=db, out=out, prior_fleets=prior_fleets, prior_nodes=prior_nodes, prior_days=prior_days,
                       prior_seed=prior_seed, prior_weight=prior_weight, fleet_weight=fleet_weight,
                       holdout_days=holdout_days, history_days=history_days, lead_hours=hours, window_days=days,
                       every=every, seed=seed, threads=threads)
        )  # fmt: skip
        return
    if not history or out is None:
        raise fail("give --history, --failures and --out (files), or --db URL (the fleet's own store)")
    failures = failures or []
    if len(history) != len(failures):
        raise fail(f"give one --failures per --history ({len(history)} histories, {len(failures)} failure files)")
    frames, label_sets = zip(*(_read_inputs(h, f) for h, f in zip(history, failures, strict=True)), strict=True)
    from core.history import validate

    # Each file is validated on reading; only several together need re-ordering and a duplicate check.
    (
        frames[0]
        if len(frames) == 1
        else validate(pd.concat(frames, ignore_index=True), source=" + ".join(map(str, history)))
    )
    pd.concat(label_sets, ignore_index=True)
    try:
        # One training set per file: each fleet's nodes and peers are its own (hostnames may repeat).
        sets = [
            TrainingSet(f"{i}:{h}", fr, lb)
            for i, (h, fr, lb) in enumerate(zip(history, frames, label_sets, strict=True))
        ]
        model = train_sets(sets, lead=lead_td, window=window_td, every=every, progress=_progress_printer("train"))
        model.save(out)
    except ModelError as e:
        raise fail(str(e)) from None
    v = model.meta["validation"]
    err.print(
        f"wrote {out}: validation average precision " + ", ".join(f"{m} {v[m]['average_precision']:.2f}" for m in v),
        highlight=False,
    )


@offline_app.command()
def score(
    history: Annotated[Path, typer.Option(help="history frame (.parquet/.csv)")],
    model: Annotated[Path | None, typer.Option(help="model file (default: the shipped model)")] = None,
    at: Annotated[str | None, typer.Option(help="score as of this time (default: latest sample)")] = None,
    output: Annotated[str, typer.Option("--format", help="json or table")] = "json",
    failures: Annotated[
        Path | None,
        typer.Option(help="failure/RMA records so far (.csv): the repeat-offender features (node, slot) count them"),
    ] = None,
) -> None:
    """Score every GPU: risk per mode, decision and reasons (JSON is a contract)."""
    import json

    import pandas as pd

    from core.catalog import NODE_FINDING_COLUMNS
    from core.history import HistoryError
    from predictor.fabric import with_node_findings
    from predictor.history_rounds import HistoryRounds
    from predictor.model import ModelError
    from predictor.score import SCORE_COLUMNS, load_model_soon, to_records
    from predictor.score import score as run_score
    from predictor.thresholds import Thresholds

    if output not in ("json", "table"):
        raise fail(f"--format must be json or table, not {output!r}")
    try:
        when = pd.Timestamp(at) if at else None
    except ValueError:
        raise fail(f"--at {at!r} is not a time: use ISO 8601, e.g. 2026-04-01T12:00:00Z") from None
    loading = load_model_soon(model)  # beside the read
    frame, records = _read_inputs(history, failures, columns=(*SCORE_COLUMNS, *NODE_FINDING_COLUMNS))
    try:
        s = Settings()
        m = loading.result()
        th = Thresholds.from_settings(s)
        result = run_score(m, frame, when, th, failures=records, past=HistoryRounds(m, frame, th, failures=records))
    except (ModelError, HistoryError, ValueError) as e:
        raise fail(str(e)) from None
    cut = None if when is None else (when if when.tzinfo else when.tz_localize("UTC"))  # naive --at is UTC
    seen = frame if cut is None else frame[frame["timestamp"] <= cut]
    rows = with_node_findings(to_records(result), seen)  # the fabric, NVLink and rails, as the service
    if output == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("GPU", "host", "model", "risk", "ECC", "thermal", "PCIe", "decision", "reasons")
    for r in rows:
        table.add_row(
            r["gpu_uuid"][:16], r["hostname"], r["model_name"].replace("NVIDIA ", ""),
            *("-" if r[k] is None else f"{r[k]:.2f}" for k in ("risk", "risk_ecc", "risk_thermal", "risk_pcie")),
            r["decision"], "; ".join(r["reasons"]),
        )  # fmt: skip
    Console(width=200).print(table)


@offline_app.command()
def evaluate(
    out: Annotated[Path, typer.Option(help="folder for report.md, report.json and the plots")],
    history: Annotated[Path | None, typer.Option(help="history frame of a fleet the model never saw")] = None,
    failures: Annotated[Path | None, typer.Option(help="its failure labels (.csv)")] = None,
    cross_domain: Annotated[
        bool,
        typer.Option(
            help="instead: the leave-one-family-out table (train on all families but one, test on it; "
            "and the model on the family no model trains on); takes over an hour on 2 cores"
        ),
    ] = False,
    families: Annotated[str, typer.Option(help="--cross-domain: 'all' or a list of families")] = "all",
    fleets_per_family: Annotated[int, typer.Option(min=1, help="--cross-domain: training fleets per family")] = 2,
    seeds: Annotated[
        str | None, typer.Option(help="--cross-domain: held-out fleets' seeds, e.g. 917,918 (default: the docs')")
    ] = None,
    scores: Annotated[
        Path | None,
        typer.Option(
            help="--cross-domain: keep the trained models and scored rows in this folder and reuse them while "
            "the code and the model are unchanged (a change of the waits or of the judging then takes minutes)"
        ),
    ] = None,
    model_seed: Annotated[
        int,
        typer.Option(
            min=0,
            help="--cross-domain: the trained models' own seed (another shares none of their members); "
            "it shows how far a retrained model's numbers move by chance",
        ),
    ] = 0,
    healthy_remaps: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="--cross-domain: a stress of the held-out fleets: this share of healthy GPUs' SBE bursts leaves "
            "a row remap pending (the development families have none; training fleets untouched)",
        ),
    ] = None,
    model: Annotated[Path | None, typer.Option(help="model file (default: the shipped model)")] = None,
    lead: Annotated[str, typer.Option(help="minimum lead for ECC/thermal (PCIe and others: 1h)")] = "24h",
    window: Annotated[str, typer.Option(help="a failure is caught by alerts up to this long before it")] = "7d",
    every: Annotated[str, typer.Option(help="how often to score across the span")] = "1h",
    checkpoint_interval: Annotated[
        str, typer.Option(help="downtime: jobs checkpoint this often; a failure loses half of it (policy choice)")
    ] = "1h",
    gpus_per_job: Annotated[int, typer.Option(help="downtime: GPUs of the job a failure interrupts (policy)")] = 1024,
    gpus_per_node: Annotated[int, typer.Option(help="downtime: GPUs down while a node is repaired or demoted")] = 8,
    repair_unplanned: Annotated[
        str,
        typer.Option(help="downtime: node repair time after a failure, DURATION or MODE=DURATION,... (trace medians)"),
    ] = "ecc=3h,thermal=3h,pcie=3d,other=3h",
    repair_planned: Annotated[
        str, typer.Option(help="downtime: repair time in a maintenance window, as --repair-unplanned (policy)")
    ] = "ecc=3h,thermal=3h,pcie=3d,other=3h",
    maintenance_window: Annotated[
        str, typer.Option(help="downtime: interval between maintenance windows (policy choice)")
    ] = "24h",
    restart_time: Annotated[str, typer.Option(help="downtime: until an interrupted job runs again (policy)")] = "15m",
    interruptible_loss: Annotated[
        float, typer.Option(help="downtime: share of a demoted node's capacity lost to interruptible work (policy)")
    ] = 0.5,
    field_failure_rate: Annotated[
        float, typer.Option(help="downtime: GPU failures per 1,000 GPU-days in the field (InfiniteHBD trace)")
    ] = 0.14,
) -> None:
    """Evaluate per incident beside the NVIDIA/DCGM rule baseline; write a report with plots.

    The report includes what the alerts are worth in GPU-hours lost per 1,000 GPU-days under
    react, rules and model (docs/downtime.md explains the cost model and each default).
    """

    from core.history import HistoryError
    from predictor.evaluate import evaluate as run_eval
    from predictor.evaluate_report import write_report
    from predictor.model import ModelError
    from predictor.score import load_model
    from predictor.thresholds import Thresholds

    if cross_domain:
        from gpuhealth.cli.crossdomain import evaluate_cross_domain

        try:
            th = Thresholds.from_settings(Settings())
            ok = evaluate_cross_domain(
                out, model, families, fleets_per_family, seeds, scores, th, model_seed=model_seed,
                healthy_remaps=healthy_remaps,
            )  # fmt: skip
        except (ModelError, ValueError) as e:
            raise fail(str(e)) from None
        raise typer.Exit(0 if ok else 1)
    if history is None or failures is None:
        raise fail("give --history and --failures (a fleet to evaluate on), or --cross-domain")
    lead_td, window_td, _ = _timedeltas(lead, window, every)
    costs = downtime_params(
        checkpoint_interval=checkpoint_interval, gpus_per_job=gpus_per_job, gpus_per_node=gpus_per_node,
        repair_unplanned=repair_unplanned, repair_planned=repair_planned, maintenance_window=maintenance_window,
        restart_time=restart_time, interruptible_loss=interruptible_loss, field_failure_rate=field_failure_rate,
    )  # fmt: skip
    frame, labels = _read_inputs(history, failures)
    try:
        s = Settings()
        m = load_model(model)
        rep = run_eval(
            m, frame, labels, lead=lead_td, window=window_td, every=every,
            thresholds=Thresholds.from_settings(s), progress=_progress_printer("evaluate"),
            downtime=costs,
        )  # fmt: skip
        paths = write_report(rep, out)
    except (ModelError, HistoryError, ValueError) as e:
        raise fail(str(e)) from None
    held = sum(v["ok"] for v in rep["floors"].values())
    err.print(f"wrote {', '.join(str(p) for p in paths)}\nfloors held: {held}/{len(rep['floors'])}", highlight=False)


def downtime_params(
    *,
    checkpoint_interval: str,
    gpus_per_job: int,
    gpus_per_node: int,
    repair_unplanned: str,
    repair_planned: str,
    maintenance_window: str,
    restart_time: str,
    interruptible_loss: float,
    field_failure_rate: float,
) -> DowntimeParams:
    """DowntimeParams from the `evaluate` flags (durations as text), or exit naming the flag at fault."""
    from predictor.downtime import DowntimeParamError, DowntimeParams, parse_repair_times, parse_span

    durations = {
        "checkpoint_interval": checkpoint_interval,
        "maintenance_window": maintenance_window,
        "restart_time": restart_time,
        "repair_unplanned": repair_unplanned,
        "repair_planned": repair_planned,
    }
    values: dict[str, Any] = {}
    for name, text in durations.items():
        try:
            values[name] = parse_repair_times(text) if name.startswith("repair_") else parse_span(text)
        except ValueError as e:
            raise fail(f"--{name.replace('_', '-')}: {e}") from None
    try:
        return DowntimeParams(
            gpus_per_job=gpus_per_job, gpus_per_node=gpus_per_node, interruptible_loss=interruptible_loss,
            field_failure_rate=field_failure_rate, **values,
        )  # fmt: skip
    except DowntimeParamError as e:
        raise fail(f"--{e.name.split('[')[0].replace('_', '-')}: {e.detail}") from None


@offline_app.command("fields")
def list_fields(
    all_fields: Annotated[bool, typer.Option("--all", help="include fields off by default")] = False,
) -> None:
    """List the metric catalogue."""
    table = Table("short name", "metric", "unit", "type", "category", "default")
    for f in catalog.FIELDS:
        if all_fields or f.default:
            table.add_row(f.name, f.metric_name, f.unit, f.kind, f.category, "on" if f.default else "off")
    Console().print(table)
    links = Table("metric", "type", "source", title="NVLink links, fabric (nvml, dcgm), NVSwitches (dcgm)")
    for name, kind, call, _ in nvlink.sources():
        links.add_row(name, kind, call)
    Console().print(links)
    kernel = Table("metric", "type", "source", title="XIDs and SXIDs from the kernel log (nvml, dcgm backends)")
    for name, kind, source, _ in kernel_log.sources():
        kernel.add_row(name, kind, source)
    Console().print(kernel)

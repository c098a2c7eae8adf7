"""The `gpuhealth` command line; the only place that turns errors into exit codes."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpuhealth import __version__, catalog
from gpuhealth.settings import Settings
from gpuhealth.units import parse_duration, parse_listen

app = typer.Typer(
    help="gpuhealth: GPU fleet health, failure prediction and decisions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
docs_app = typer.Typer(help="Generate documentation from the catalogue.", no_args_is_help=True)
app.add_typer(docs_app, name="docs")
err = Console(stderr=True)

DEFAULT_METRICS_DOC = Path("docs/metrics.md")


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print one line to stderr and return the exit to raise."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def version() -> None:
    """Print the gpuhealth version."""
    typer.echo(__version__)


@app.command()
def collect(
    backend: Annotated[
        str | None, typer.Option(help="auto | nvml | dcgm | sim (env GPUHEALTH_BACKEND)")
    ] = None,
    listen: Annotated[str | None, typer.Option(help="HOST:PORT to serve /metrics on")] = None,
    interval: Annotated[str | None, typer.Option(help="sampling interval, e.g. 10s")] = None,
    hostname: Annotated[str | None, typer.Option(help="host label value (default: this host)")] = None,
    hostname_label: Annotated[
        str | None, typer.Option(help="Hostname (dcgm-exporter < 2026) or hostname")
    ] = None,
    fields: Annotated[
        str | None, typer.Option(help='"default", "all" or comma-separated short names')
    ] = None,
    sim_nodes: Annotated[int, typer.Option(help="sim: nodes to simulate", min=1)] = 1,
    sim_gpus: Annotated[int, typer.Option(help="sim: GPUs per node", min=1)] = 8,
    seed: Annotated[int, typer.Option(help="sim: random seed")] = 0,
    sim_model: Annotated[str | None, typer.Option(help="sim: GPU model name")] = None,
    sim_speed: Annotated[float, typer.Option(help="sim: simulated seconds per real second", min=0.001)] = 1.0,
    sim_fault: Annotated[
        list[str] | None,
        typer.Option(help="sim: inject a fault, GPU:MODE[:HOURS] (ecc|thermal|pcie|offbus)"),
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="DEBUG, INFO, WARNING")] = None,
) -> None:
    """Sample GPUs and serve them to Prometheus, dcgm-exporter compatible (port 9400)."""
    from collector.backends.base import BackendError
    from collector.backends.factory import BACKENDS, open_backend
    from collector.run import build_collector, run_until_signalled
    from simulator.fleet import FaultSpec

    try:
        s = Settings()
    except Exception as e:  # pydantic's message names the variable and the allowed values
        raise fail(f"invalid GPUHEALTH_* setting: {' '.join(str(e).split())}") from None
    backend = backend or s.backend
    logging.basicConfig(
        level=(log_level or s.log_level).upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if backend not in BACKENDS:
        raise fail(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    label = hostname_label or s.hostname_label
    if label not in ("Hostname", "hostname"):
        raise fail(f"--hostname-label must be Hostname or hostname, not {label!r}")
    try:
        interval_s = parse_duration(interval or s.interval)
        host, port = parse_listen(listen or s.listen)
        chosen = catalog.select(fields or s.fields)
        faults = [FaultSpec.parse(f) for f in sim_fault or []]
    except ValueError as e:
        raise fail(str(e)) from None
    if faults and backend != "sim":
        raise fail("--sim-fault needs --backend sim")
    try:
        b = open_backend(
            backend,
            hostname=hostname or s.hostname or socket.gethostname(),
            fields=chosen,
            interval_s=interval_s,
            sim_nodes=sim_nodes,
            sim_gpus=sim_gpus,
            sim_seed=seed,
            sim_model=sim_model,
            sim_speed=sim_speed,
            sim_faults=faults,
        )
    except (BackendError, ValueError) as e:
        raise fail(str(e)) from None
    try:
        running = build_collector(b, chosen, interval_s, host, port, label)
    except OSError as e:
        b.close()
        raise fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    shown = "localhost" if host in ("0.0.0.0", "::", "") else host
    n = len(b.gpus())
    err.print(
        f"gpuhealth collect: {b.name} backend, {n} GPU(s), sampling every {interval_s:g}s\n"
        f"  metrics: http://{shown}:{running.server.port}/metrics\n"
        f"  health:  http://{shown}:{running.server.port}/healthz",
        highlight=False,
    )
    run_until_signalled(running)


@app.command()
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
    acceleration: Annotated[
        float, typer.Option(min=0, help="failure-rate multiplier over field statistics")
    ] = 4.0,
    sudden_share: Annotated[
        float, typer.Option(min=0, max=1, help="share of failures without precursor")
    ] = 0.4,
) -> None:
    """Simulate a fleet's telemetry and failures (the history frame and its labels)."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TimeRemainingColumn

    from gpuhealth import history
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
        f"wrote {failures}: {len(labels)} failures "
        + ", ".join(f"{k} {v}" for k, v in sorted(by_mode.items())),
        highlight=False,
    )


@app.command("fields")
def list_fields(
    all_fields: Annotated[bool, typer.Option("--all", help="include fields off by default")] = False,
) -> None:
    """List the metric catalogue."""
    table = Table("short name", "metric", "unit", "type", "category", "default")
    for f in catalog.FIELDS:
        if all_fields or f.default:
            table.add_row(f.name, f.metric_name, f.unit, f.kind, f.category, "on" if f.default else "off")
    Console().print(table)


@docs_app.command("metrics")
def docs_metrics(
    out: Annotated[Path, typer.Option(help="where to write")] = DEFAULT_METRICS_DOC,
    check: Annotated[bool, typer.Option(help="fail if the file is not up to date")] = False,
) -> None:
    """Write docs/metrics.md from the catalogue (or --check that it is current)."""
    text = catalog.metrics_markdown()
    if check:
        current = out.read_text() if out.exists() else ""
        if current != text:
            raise fail(f"{out} is out of date: run `gpuhealth docs metrics`", code=1)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    typer.echo(f"wrote {out}")


@docs_app.command("simulator")
def docs_simulator(
    out: Annotated[Path, typer.Option(help="folder for the PNG plots")] = Path("docs/img"),
    seed: Annotated[int, typer.Option(help="random seed of the fleet to draw from")] = 1,
) -> None:
    """Plot each simulated fault mode's signals before a failure (for docs/simulator.md)."""
    from simulator.plots import fault_mode_plots

    try:
        paths = fault_mode_plots(out, seed=seed)
    except RuntimeError as e:
        raise fail(str(e)) from None
    for p in paths:
        typer.echo(f"wrote {p}")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()

"""`gpuhealth docs …`: docs/metrics.md from the catalogue, the simulator's plots, and docs/configuration.md's
settings table with the flags read from the command line itself (an option sets the setting of its own
name, but for the two tables below)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from core import catalog
from core.settings import Settings
from core.settings_doc import Flags, fill, settings_table
from gpuhealth.cli.backend import fail

DEFAULT_SETTINGS_DOC = Path("docs/configuration.md")
DEFAULT_METRICS_DOC = Path("docs/metrics.md")
DEFAULT_DOWNTIME_DOC = Path("docs/downtime.md")

docs_app = typer.Typer(help="Generate documentation from the catalogue and the settings.", no_args_is_help=True)

READS_SETTING: dict[tuple[str, str], str] = {
    ("serve", "listen"): "api_listen",  # `collect --listen` is `listen`, the collector's port
    ("serve", "token_file"): "token",
    ("serve", "prometheus"): "prometheus_url",
    ("slurm-healthcheck", "token_file"): "service_token",
    ("probe", "tests"): "probe_tests",
    ("probe", "budget"): "probe_budget",
    ("actuate", "mode"): "actuate",
    ("actuate", "target"): "actuate_target",
}
"""(command, option) -> the setting it overrides, where their names differ."""

NOT_THE_SETTING: set[tuple[str, str]] = {
    ("demo", "listen"),  # the demo's own defaults: 127.0.0.1:8080, a fresh SQLite file, WARNING
    ("demo", "db"),
    ("demo", "log_level"),
    ("simulate", "interval"),  # the simulated history's step
    ("train", "db"),  # chooses training on the store; GPUHEALTH_DB does not
    ("score", "model"),  # the file given, else the shipped model
    ("evaluate", "model"),
    ("probe", "backend"),  # nvml or sim, whatever GPUHEALTH_BACKEND says
}
"""(command, option) named like a setting that does not read it."""


def options(app: typer.Typer | Any) -> Iterator[tuple[str, str, str]]:
    """(command path, parameter name, long flag) of every option of every command, in the app's order;
    `app` is a Typer app or the command it makes (what a command's `ctx.find_root().command` is)."""

    def walk(command: Any, path: list[str]) -> Iterator[tuple[str, str, str]]:
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])
        for p in getattr(command, "params", []):
            longs = [o for o in p.opts if o.startswith("--")]
            if p.param_type_name == "option" and longs:
                yield " ".join(path), p.name, longs[0]

    yield from walk(typer.main.get_command(app) if isinstance(app, typer.Typer) else app, [])


def setting_flags(app: typer.Typer | Any) -> dict[str, dict[str, list[str]]]:
    """setting -> flag -> the top-level commands that take it, from the app's options."""
    found: dict[str, dict[str, list[str]]] = {}
    for path, param, flag in options(app):
        top = path.split()[0]
        setting = READS_SETTING.get((top, param), param)
        if (top, param) in NOT_THE_SETTING or setting not in Settings.model_fields:
            continue
        commands = found.setdefault(setting, {}).setdefault(flag, [])
        if top not in commands:
            commands.append(top)
    return found


@docs_app.command("settings")
def docs_settings(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="the page whose generated block to write")] = DEFAULT_SETTINGS_DOC,
    check: Annotated[bool, typer.Option(help="fail if the page is not up to date")] = False,
) -> None:
    """Write the settings table of docs/configuration.md from core/settings.py (or --check it)."""
    flags: Flags = setting_flags(ctx.find_root().command)
    try:
        current = out.read_text() if out.exists() else ""
        text = fill(current, settings_table(flags))
    except ValueError as e:
        raise fail(f"{out}: {e}") from None
    if check:
        if current != text:
            raise fail(f"{out} is out of date: run `gpuhealth docs settings`", code=1)
        return
    out.write_text(text)
    typer.echo(f"wrote {out}")


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


@docs_app.command("downtime")
def docs_downtime(
    out: Annotated[Path, typer.Option(help="the page whose generated block to write")] = DEFAULT_DOWNTIME_DOC,
    check: Annotated[bool, typer.Option(help="fail if the page is not up to date")] = False,
) -> None:
    """Write docs/downtime.md's table at real precursor shares and its plot (or --check the table)."""
    from predictor.remediation_downtime import docs_block, docs_plot, fill_docs

    try:
        current = out.read_text() if out.exists() else ""
        text = fill_docs(current, docs_block())
    except ValueError as e:
        raise fail(f"{out}: {e}") from None
    if check:
        if current != text:
            raise fail(f"{out} is out of date: run `gpuhealth docs downtime`", code=1)
        return
    out.write_text(text)
    typer.echo(f"wrote {out}")
    typer.echo(f"wrote {docs_plot(out.parent / 'img' / 'downtime-field.png')}")


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

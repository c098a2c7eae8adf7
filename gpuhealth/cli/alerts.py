"""`gpuhealth alerts build`, `dashboards build` and `deploy build`: rules, dashboards, their docs, manifests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

alerts_app = typer.Typer(help="Prometheus alert rules, promtool tests and runbooks.", no_args_is_help=True)
dashboards_app = typer.Typer(help="Grafana dashboards.", no_args_is_help=True)
deploy_app = typer.Typer(help="Kubernetes manifests (deploy/kubernetes/).", no_args_is_help=True)
err = Console(stderr=True)

RootOpt = Annotated[Path, typer.Option(help="repository root the generated paths are relative to")]
CheckOpt = Annotated[bool, typer.Option(help="fail (exit 1) if a generated file is missing or out of date")]


def _run(
    what: str, root: Path, check: bool, write: Callable[[Path], list[Path]], stale: Callable[[Path], list[Path]]
) -> None:
    if check:
        old = stale(root)
        if old:
            err.print(
                f"[bold red]error:[/] out of date: {', '.join(map(str, old))}: run `gpuhealth {what} build`",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(1)
        return
    for p in write(root):
        typer.echo(f"wrote {p}")


@alerts_app.command("build")
def alerts_build(root: RootOpt = Path("."), check: CheckOpt = False) -> None:
    """Write alerts/generated/*.yml, docs/alerts.md and docs/runbooks/ (or --check they are current)."""
    from alerts import build

    _run("alerts", root, check, build.write, build.stale)


@dashboards_app.command("build")
def dashboards_build(root: RootOpt = Path("."), check: CheckOpt = False) -> None:
    """Write dashboards/generated/*.json and docs/dashboards.md (or --check they are current)."""
    from dashboards import build

    _run("dashboards", root, check, build.write, build.stale)


@deploy_app.command("build")
def deploy_build(root: RootOpt = Path("."), check: CheckOpt = False) -> None:
    """Write deploy/kubernetes/ from the settings, the rules and the dashboards (or --check it is current)."""
    from manifests import build

    try:
        _run("deploy", root, check, build.write, build.stale)
    except build.SourceMissing as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None

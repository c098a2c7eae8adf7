"""The `gpuhealth` command line; the only place that turns errors into exit codes.

One Typer app per group of commands, each in its own module, added here: a group without a name
(`collect_app`, …) puts its commands at the top level, in the order they are added.
"""

from __future__ import annotations

import sys

import typer

from core.memory import reuse_freed_memory
from gpuhealth.cli.actuate import actuate_app
from gpuhealth.cli.alerts import alerts_app, dashboards_app, deploy_app
from gpuhealth.cli.collect import collect_app
from gpuhealth.cli.db import db_app
from gpuhealth.cli.docs import docs_app
from gpuhealth.cli.history import history_app
from gpuhealth.cli.model import model_app
from gpuhealth.cli.offline import offline_app
from gpuhealth.cli.probe import probe_app
from gpuhealth.cli.serve import serve_app

app = typer.Typer(
    help="gpuhealth: GPU fleet health, failure prediction and decisions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
for top_level in (collect_app, probe_app, serve_app, actuate_app, offline_app):
    app.add_typer(top_level)
app.add_typer(docs_app, name="docs")
app.add_typer(history_app, name="history")
app.add_typer(alerts_app, name="alerts")
app.add_typer(dashboards_app, name="dashboards")
app.add_typer(deploy_app, name="deploy")
app.add_typer(db_app, name="db")
app.add_typer(model_app, name="model")


def main() -> None:
    """Console-script entry point."""
    reuse_freed_memory()  # scoring and training make and free arrays of tens of MB: reuse them (core.memory)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = ["app", "main"]

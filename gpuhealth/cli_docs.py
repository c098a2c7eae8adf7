"""`gpuhealth docs settings`: docs/configuration.md's table, with the flags read from the command line
itself. An option sets the setting of its own name, but for the two tables below."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from core.settings import Settings
from core.settings_doc import Flags, fill, settings_table
from gpuhealth.cli_backend import fail

DEFAULT_SETTINGS_DOC = Path("docs/configuration.md")

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


def options(app: typer.Typer) -> Iterator[tuple[str, str, str]]:
    """(command path, parameter name, long flag) of every option of every command, in the app's order."""

    def walk(command: Any, path: list[str]) -> Iterator[tuple[str, str, str]]:
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])
        for p in getattr(command, "params", []):
            longs = [o for o in p.opts if o.startswith("--")]
            if p.param_type_name == "option" and longs:
                yield " ".join(path), p.name, longs[0]

    yield from walk(typer.main.get_command(app), [])


def setting_flags(app: typer.Typer) -> dict[str, dict[str, list[str]]]:
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


def register_docs_settings(docs_app: typer.Typer, app: typer.Typer) -> None:
    """Add `docs settings` to `docs_app`; the flags are those of `app`."""

    @docs_app.command("settings")
    def docs_settings(
        out: Annotated[Path, typer.Option(help="the page whose generated block to write")] = DEFAULT_SETTINGS_DOC,
        check: Annotated[bool, typer.Option(help="fail if the page is not up to date")] = False,
    ) -> None:
        """Write the settings table of docs/configuration.md from core/settings.py (or --check it)."""
        flags: Flags = setting_flags(app)
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

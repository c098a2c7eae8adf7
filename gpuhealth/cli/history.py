"""`gpuhealth history …`: move GPU history between Prometheus and history files."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from core.units import parse_duration
from gpuhealth.cli.backend import fail

history_app = typer.Typer(
    help="Import GPU history from Prometheus into history files.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
_RELATIVE = re.compile(r"^now\s*(?:-\s*(?P<ago>\S+))?$")


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """An aware UTC datetime from ISO 8601 ("2026-01-31", "2026-01-31T12:00:00Z") or "now[-7d]"."""
    now = now or datetime.now(UTC)
    m = _RELATIVE.match(text.strip().lower())
    if m:
        ago = m.group("ago")
        return now - timedelta(seconds=parse_duration(ago)) if ago else now
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"invalid time {text!r}: use ISO 8601 (2026-01-31T12:00:00Z) or now-DURATION (now-7d)"
        ) from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


@history_app.command("import")
def import_cmd(
    prometheus: Annotated[str, typer.Option("--prometheus", help="Prometheus base URL, e.g. http://prom:9090")],
    out: Annotated[Path, typer.Option(help="history file to write (.parquet or .csv)")] = Path("history.parquet"),
    start: Annotated[str, typer.Option(help="ISO 8601 time or now-DURATION")] = "now-7d",
    end: Annotated[str, typer.Option(help="ISO 8601 time or now-DURATION")] = "now",
    step: Annotated[str, typer.Option(help="one row per GPU every STEP, e.g. 5m, 1h")] = "5m",
    columns: Annotated[str | None, typer.Option(help="comma-separated short names (default: all found)")] = None,
) -> None:
    """Pull GPU history out of Prometheus (dcgm-exporter or gpuhealth series) into a history file."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TimeRemainingColumn

    from core import history
    from core.prom_import import import_history

    try:
        now = datetime.now(UTC)
        t0, t1 = parse_time(start, now), parse_time(end, now)
        step_s = parse_duration(step)
        cols = [c.strip() for c in columns.split(",") if c.strip()] if columns is not None else None
        kinds = history.PARQUET_SUFFIXES + history.CSV_SUFFIXES
        if not out.name.lower().endswith(kinds):
            raise ValueError(f"{out}: use one of {', '.join(kinds)}")
    except ValueError as e:
        raise fail(str(e)) from None
    try:
        with Progress(
            "[progress.description]{task.description}", BarColumn(), TaskProgressColumn(),
            TimeRemainingColumn(), console=err, transient=True,
        ) as bar:  # fmt: skip
            task = bar.add_task(f"querying {prometheus}", total=None)
            frame = import_history(
                prometheus,
                t0,
                t1,
                step_s,
                columns=cols,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
            bar.update(task, description=f"writing {out}")
            history.write(frame, out)
    except (history.HistoryError, OSError) as e:
        raise fail(str(e)) from None
    first, last = frame["timestamp"].min(), frame["timestamp"].max()
    typer.echo(
        f"gpuhealth history import: {len(frame):,} rows, {frame['gpu_uuid'].nunique()} GPUs, "
        f"{_iso(first.to_pydatetime())} .. {_iso(last.to_pydatetime())}, "
        f"{len(history.metric_columns(frame))} columns -> {out}"
    )

"""`gpuhealth db …`: create or upgrade the store's schema, prune old telemetry, import history files."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from core.settings import get_settings
from core.units import parse_duration
from gpuhealth.cli.backend import fail

if TYPE_CHECKING:
    from core.settings import Settings
    from store import Retention, Store

db_app = typer.Typer(
    help="The service's database: migrations, retention, imports.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

DbOption = Annotated[
    str | None, typer.Option("--db", help="SQLAlchemy URL (default: GPUHEALTH_DB, sqlite:///gpuhealth.db)")
]


@contextmanager
def opened_store(db: str | None) -> Iterator[Store]:
    """The store at `db` (default: the setting), schema upgraded, closed after; its errors are one line."""
    from store import Store, StoreError

    try:
        store = Store.open(db or get_settings().db, upgrade=True)
        try:
            yield store
        finally:
            store.close()
    except StoreError as e:
        raise fail(str(e)) from None


@db_app.command("upgrade")
def upgrade_cmd(db: DbOption = None) -> None:
    """Create the schema or bring it to the newest migration."""
    with opened_store(db) as store:
        revision = store.revision()
    typer.echo(f"{store.url}: schema at revision {revision}")


def retention_from_settings(s: Settings, samples: str | None = None) -> Retention:
    """The retention of every table from settings (`samples` overrides GPUHEALTH_RETENTION), or one error line."""
    from store import Retention, StoreError

    spans = {
        "samples": ("GPUHEALTH_RETENTION", samples or s.retention),
        "scores": ("GPUHEALTH_SCORE_RETENTION", s.score_retention),
        "hourly": ("GPUHEALTH_HOURLY_RETENTION", s.hourly_retention),
        "decisions": ("GPUHEALTH_DECISION_RETENTION", s.decision_retention),
        "alerts": ("GPUHEALTH_ALERT_RETENTION", s.alert_retention),
        "probes": ("GPUHEALTH_PROBE_RETENTION", s.probe_retention),
        "actions": ("GPUHEALTH_ACTION_RETENTION", s.action_retention),
    }
    parsed = {}
    for kind, (name, text) in spans.items():
        try:
            parsed[kind] = timedelta(seconds=parse_duration(text))
        except ValueError as e:
            raise fail(f"invalid {name}: {e}") from None
    try:
        return Retention(**parsed)
    except StoreError as e:
        raise fail(str(e)) from None


@db_app.command("prune")
def prune_cmd(
    db: DbOption = None,
    retention: Annotated[
        str | None, typer.Option(help="keep raw samples this long, e.g. 35d (default: GPUHEALTH_RETENTION)")
    ] = None,
) -> None:
    """Apply the retention: remove old raw samples, roll old scores into hourly rows, delete what is kept no longer."""
    keep = retention_from_settings(get_settings(), samples=retention)
    with opened_store(db) as store:
        done = store.pruner.apply(datetime.now(UTC), keep)
    typer.echo(
        f"{store.url}: removed {done['samples_deleted']} raw samples (their hours stay);"
        f" rolled {done['scores_rolled_up']} risk scores into {done['score_hours_written']} hourly rows;"
        f" deleted {done['sample_hours_deleted'] + done['score_hours_deleted']} hourly rows,"
        f" {done['decisions_deleted']} closed decisions, {done['alerts_deleted']} alerts"
        f" and {done['probes_deleted']} probe results"
    )


@db_app.command("import")
def import_cmd(
    history_file: Annotated[Path, typer.Option("--history", help="history file (.parquet or .csv)")],
    failures: Annotated[Path | None, typer.Option(help="failure labels CSV (gpu_uuid, failed_at, mode)")] = None,
    db: DbOption = None,
) -> None:
    """Load a history file (and failure labels) into the database; samples already there are skipped."""
    import pandas as pd

    from core import history

    try:
        frame = history.read(history_file)
        labels = history.read_failures(failures) if failures is not None else None
    except history.HistoryError as e:
        raise fail(str(e)) from None
    with opened_store(db) as store:
        from store import CLOCK_SKEW

        # Samples dated past our clock would hold back fleet mode's watermark: refused, and said so.
        n = store.samples.ingest(frame, not_after=datetime.now(UTC) + CLOCK_SKEW)
        hosts = dict(zip(frame["gpu_uuid"].astype(str), frame["hostname"].astype(str), strict=True))
        known = store.labels.failures_frame()
        # importing the same labels twice must not double the failures training sees
        seen = set(zip(known["gpu_uuid"], known["failed_at"], known["mode"], strict=True))
        for row in [] if labels is None else labels.to_dict("records"):
            # The store keeps microseconds: a label's nanoseconds would never match its stored self.
            row["failed_at"] = row["failed_at"].floor("us")
            if (row["gpu_uuid"], row["failed_at"], row["mode"]) in seen:
                continue
            host, xid = row.get("hostname"), row.get("xid")
            store.labels.add_failure(
                gpu_uuid=str(row["gpu_uuid"]),
                failed_at=row["failed_at"].to_pydatetime(),
                mode=str(row["mode"]),
                hostname=str(host) if isinstance(host, str) else hosts.get(str(row["gpu_uuid"])),
                xid=None if xid is None or pd.isna(xid) else int(xid),
                recorded_by="gpuhealth db import",
            )
    extra = "" if labels is None else f", {len(labels)} failure labels"
    typer.echo(f"{store.url}: {n} new samples of {len(frame)}{extra}")

"""The scorer's window of hour rows, kept in memory between rounds (issue 60, decision 0090).

`Samples.scoring_history` reads 31 days of hour rows every round. `HourWindow.frame` returns the
same frame, bit for bit, but keeps the hour rows of the GPUs it holds between rounds: a round
reads the hours that closed since the last one, the earlier hours the store says changed (a late
sample merged into its hour, `db import`: `store.changes`), and the raw tail of the current hour.
It reads the whole window only at start-up, for the GPUs newly in its share when a shard changes
hands (and forgets those given up), and when time goes back or jumps past the window.

It holds, and its frame has, only the columns a round reads (`columns`: the scorer's
`ROUND_COLUMNS`), as `scoring_history(columns=...)` gives them. A whole window is read READ_GPUS
GPUs at a time, so the read's own memory is one part's, not the window's again.

Memory is bounded by `max_bytes`: past it the window holds the GPUs that fit, in uuid order, and
reads the others' hours every round, as `scoring_history` does (`WindowStats` says how many).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
from sqlalchemy.engine import Connection

from core import history, hourly
from store.changes import current_revision
from store.engine import Database
from store.hourrows import (
    Rows,
    append_later,
    combine,
    hour_gpus,
    join_sorted,
    keep,
    no_rows,
    of_gpus,
    read_hours,
    read_tail,
    replace,
    slide,
    sort_rows,
    values_of,
    with_tail,
)
from store.samples import _columns_frame, _identities, _uuids_on
from store.validate import text, utc

log = logging.getLogger(__name__)

READ_GPUS = 2000
"""GPUs whose whole window one read takes (start-up, GPUs newly held): 1.5 M hour rows of 31 days,
a part of the read's memory, enough rows per query that the parts cost no more than one read."""


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class WindowStats:
    """What the window holds after a round (for /metrics and the log)."""

    held_gpus: int = 0
    """GPUs whose hour rows stay in memory between rounds."""
    read_gpus: int = 0
    """GPUs past the memory cap: their hours are read every round."""
    bytes: int = 0
    """Memory of the hour rows held."""
    full_reads: int = 0
    """Rounds that read the whole window (start-up, time went back or jumped past the window)."""


class HourWindow:
    """What the scorer reads each round (`Samples.scoring_history`'s frame), from a window kept in memory."""

    def __init__(
        self,
        db: Database,
        span: timedelta,
        max_bytes: int | None = None,
        columns: Iterable[str] | None = None,
        read_gpus: int = READ_GPUS,
    ) -> None:
        self.db = db
        self.span = span
        self.max_bytes = max_bytes
        """Memory for the hour rows held; None: no bound."""
        self.values = values_of(columns)
        """The hour values held and framed: those among `columns` (None: every one)."""
        self.read_gpus = read_gpus
        """GPUs per read of a whole window."""
        self.stats = WindowStats()
        self._rows = no_rows(self.values)
        self._scope: frozenset[str] | None = None
        """The GPUs asked for when the rows were read (None: every GPU)."""
        self._over: set[str] = set()
        """GPUs of the scope past the memory cap, read every round."""
        self._boundary: datetime | None = None
        """The hours before it are held (whole hours)."""
        self._revision = 0
        """The store's revision read before the last round's reads: rows stamped later are re-read."""
        self._said_over = False
        self._tail_at = np.empty(0, np.int64)
        """Where the rows held have the last round's tail (the frame's rows, shared with it): let go next
        round, or written over in place where the next tail has the same GPUs (`_tail_fits`)."""
        self._tail_only = 0
        """GPUs of the rows held that have only the tail's rows (not held between rounds)."""

    def forget(self) -> None:
        """Hold nothing: the next round reads the whole window."""
        self._rows, self._scope, self._over, self._boundary = no_rows(self.values), None, set(), None
        self._tail_at, self._tail_only = np.empty(0, np.int64), 0
        self.stats = WindowStats(full_reads=self.stats.full_reads)

    def frame(self, *, until: datetime, hostnames: Sequence[str] | None = None) -> pd.DataFrame:
        """`store.samples.scoring_history(since=until - span, until=until, hostnames=hostnames, columns=...)`,
        from memory and what changed since the last round. The frame is the round's: its arrays are the
        window's (read-only), and the next call may write its tail's rows over in place."""
        t1 = utc(until, "until")
        boundary, lo = _hour(t1), _hour(t1 - self.span)
        db, values = self.db, self.values
        try:
            with db.tx() as conn:
                revision = current_revision(conn)  # first: whatever is stamped later is read again next round
                ids = None if hostnames is None else _uuids_on(conn, [text(h, "hostname") for h in hostnames])
                if ids is not None and not ids:
                    self.forget()
                    return history.empty(())
                self._update(conn, lo, boundary, ids, revision)  # lets the last tail go where the rows change
                over = read_hours(db, conn, lo, boundary, sorted(self._over), values) if self._over else no_rows(values)
                tail = sort_rows(read_tail(db, conn, boundary, t1, ids, values))
                if len(over) or not self._tail_fits(tail):
                    self._whole_hours()
                ident = _identities(conn, sorted(set(self._rows.gpus) | set(over.gpus) | set(tail.gpus)))
            frame = self._framed(over, tail, ident)
        except BaseException:  # a round cut short (the database went away) may have updated half the window
            self.forget()
            raise
        frame.attrs[hourly.HOURLY_ATTR] = True
        return frame

    def _framed(self, over: Rows, tail: Rows, ident: dict[str, tuple[str, int, str, str, str]]) -> pd.DataFrame:
        """The frame of the rows held, the GPUs past the cap and the tail."""
        if len(over):  # the parts joined and sorted: the frame's own arrays
            rows = combine([self._rows, over, tail])
            return _columns_frame(rows.codes, rows.gpus, rows.stamps(), dict(rows.cols), ident)
        # The window is in (uuid, hour) order and the tail goes after each GPU's rows. The frame takes the
        # window's arrays, the tail put in as they move (one copy, the window's let go column by column), and
        # the window keeps them: during the round its rows are held once, not once more for the frame. Where
        # the last round's tail is still in (the same GPUs' tail again, nothing else changed), its rows are
        # written over in place: a steady round copies no column of the window.
        if len(self._tail_at):
            rows, stamps = self._rows, tail.stamps()
            for c, v in rows.cols.items():
                v.flags.writeable = True  # the window's own arrays (made by `with_tail`), read-only to the frame
                v[self._tail_at] = tail.cols[c]
        else:
            before = len(self._rows.gpus)
            rows, self._tail_at, stamps = with_tail(self._rows, tail)
            self._rows, self._tail_only = rows, len(rows.gpus) - before
        ts = rows.start + hourly.HOUR_US
        ts[self._tail_at] = stamps
        for v in rows.cols.values():
            v.flags.writeable = False  # shared: a write to the frame's values raises instead of changing the window
        return _columns_frame(rows.codes, rows.gpus, ts, dict(rows.cols), ident, ordered=True)

    def _tail_fits(self, tail: Rows) -> bool:
        """Whether the rows held have the last round's tail where `tail` (sorted) goes: the same GPUs' rows
        of the same hours, so the new tail's values are written over the old (`_framed`)."""
        at = self._tail_at
        if not len(at) or len(at) != len(tail) or not np.array_equal(self._rows.start[at], tail.start):
            return False
        held, gpus = self._rows.gpus, tail.gpus
        return [held[k] for k in self._rows.codes[at].tolist()] == [gpus[k] for k in tail.codes.tolist()]

    def _whole_hours(self) -> None:
        """Let the last round's tail go from the rows held (a copy of each column; the frame's arrays)."""
        rows, at = self._rows, self._tail_at
        self._tail_at, self._tail_only = np.empty(0, np.int64), 0
        if len(at):
            mask = np.ones(len(rows), dtype=bool)
            mask[at] = False
            self._rows = keep(rows, mask, give_up=True)

    def _update(self, conn: Connection, lo: datetime, boundary: datetime, ids: list[str] | None, revision: int) -> None:
        """Bring the rows held to [lo, boundary) of `ids`' GPUs as the store has them now."""
        old = self._boundary
        if old is None or boundary < old or lo >= old or (ids is None) != (self._scope is None):
            self._reload(conn, lo, boundary, ids)
        else:
            self._advance(conn, lo, boundary, old, ids)
        self._boundary, self._revision = boundary, revision
        self._drop_pruned(conn)
        self._cap()

    def _reload(self, conn: Connection, lo: datetime, boundary: datetime, ids: list[str] | None) -> None:
        self._rows = no_rows(self.values)  # what was held goes before the new window is read
        self._tail_at, self._tail_only = np.empty(0, np.int64), 0
        self._rows = self._read_whole(conn, lo, boundary, hour_gpus(self.db, conn) if ids is None else ids)
        self._scope = None if ids is None else frozenset(ids)
        self._over = set()
        self.stats = WindowStats(full_reads=self.stats.full_reads + 1)
        log.info("score window: read %d hour rows of %d GPUs", len(self._rows), len(self._rows.gpus))

    def _read_whole(self, conn: Connection, lo: datetime, hi: datetime, ids: Sequence[str]) -> Rows:
        """The hour rows of [lo, hi) of these GPUs in (uuid, hour) order (`sort_rows`), read `read_gpus`
        GPUs at a time: the read and its sort take one part's memory, the join one column's."""
        ids = sorted(set(ids))
        step = max(1, self.read_gpus)
        parts = [
            sort_rows(read_hours(self.db, conn, lo, hi, ids[k : k + step], self.values))
            for k in range(0, len(ids), step)
        ]
        return join_sorted(parts, self.values)

    def _advance(
        self, conn: Connection, lo: datetime, boundary: datetime, old: datetime, ids: list[str] | None
    ) -> None:
        """Forget what left the window or the share, read what closed, changed or joined since `old`. The
        rows held are let go column by column as each copy is made (a failed round forgets them anyway); where
        nothing changed, the rows held stay as they are, the last round's tail in them."""
        db, newly, gone = self.db, [], frozenset[str]()
        if ids is not None and self._scope is not None:  # a share: GPUs given up, GPUs newly held
            now = frozenset(ids)
            newly, gone = sorted(now - self._scope), self._scope - now
            self._over &= now
            self._scope = now
        held = None if self._scope is None else sorted(self._scope - set(newly) - self._over)
        lo_us = int(lo.timestamp()) * 1_000_000
        values = self.values
        changed = self._mine(read_hours(db, conn, lo, old, held, values, after=self._revision))
        closed = self._mine(read_hours(db, conn, old, boundary, held, values)) if boundary > old else no_rows(values)
        joined = self._read_whole(conn, lo, boundary, newly)
        if boundary == old and not (gone or len(changed) or len(joined)):
            return
        self._whole_hours()
        rows = keep(self._rows, ~of_gpus(self._rows, gone), give_up=True) if gone else self._rows
        if boundary > old and not len(changed) and not len(joined):
            slid = slide(rows, lo_us, closed, give_up=True)  # an hour closed over every GPU held: one copy
            if slid is not None:
                self._rows = slid
                return
        if boundary > old:
            rows = keep(rows, rows.start >= lo_us, give_up=True)
        if len(changed):
            rows = sort_rows(combine([replace(rows, changed), joined]))
        elif len(joined):  # GPUs new to the rows, sorted: each put in its place, no sort of the whole
            rows = append_later(rows, joined, give_up=True)
        self._rows = append_later(rows, closed, give_up=True)  # the hours that closed come after every hour held

    def _held_bytes(self) -> int:
        """Memory of the hour rows held between rounds (the last round's tail, if still in, left out)."""
        return (len(self._rows) - len(self._tail_at)) * self._rows.row_bytes

    def _mine(self, rows: Rows) -> Rows:
        """The rows read for every GPU, without those of the GPUs read every round."""
        return keep(rows, ~of_gpus(rows, self._over)) if self._over else rows

    def _drop_pruned(self, conn: Connection) -> None:
        """Forget the hours the retention deleted (an hourly retention shorter than the window)."""
        if not len(self._rows):
            return
        oldest = conn.exec_driver_sql(f"SELECT {self.db.ts_us('min(hour)')} FROM samples_hourly").scalar()
        if oldest is not None and int(oldest) > int(self._rows.start.min()):
            self._whole_hours()
            self._rows = keep(self._rows, self._rows.start >= int(oldest))

    def _cap(self) -> None:
        """Past `max_bytes`, read the GPUs that do not fit (the last in uuid order) every round."""
        if self.max_bytes is not None and self._held_bytes() > self.max_bytes:
            self._whole_hours()  # the rows held alone: their bytes are then all of `nbytes`
            rows = self._rows
            per_gpu = np.bincount(rows.codes, minlength=len(rows.gpus)) * rows.row_bytes
            order = np.argsort(np.asarray(rows.gpus, dtype=object))
            fit = int(np.searchsorted(np.cumsum(per_gpu[order]), self.max_bytes, side="right"))
            out = {rows.gpus[k] for k in order[fit:]}
            self._over |= out
            self._rows = keep(rows, ~of_gpus(rows, out))
        rows = self._rows
        self.stats = WindowStats(
            len(rows.gpus) - self._tail_only, len(self._over), self._held_bytes(), self.stats.full_reads
        )
        if self._over and not self._said_over:
            log.warning(
                "score window: %d GPUs held in memory (%.0f MB, the cap is %.0f MB); the hours of %d more "
                "are read every round", len(rows.gpus), rows.nbytes / 1e6, (self.max_bytes or 0) / 1e6,
                len(self._over),
            )  # fmt: skip
        self._said_over = bool(self._over)

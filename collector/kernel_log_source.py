"""Which kernel log the XID counter reads: /dev/kmsg, the systemd journal, or the first of them that can be read.

Chosen once, at start (GPUHEALTH_KERNEL_LOG_SOURCE): `kmsg` and `journal` take that one whatever
happens; `auto` opens /dev/kmsg and, when that is refused, asks journalctl for one kernel entry.
When neither can be read, the reader says so at the first poll, in one line naming both reasons
and what each needs, and the XIDs are counted from NVML's events (collector.kernel_log).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from collector.journal import JournalCursor, JournalReader
from collector.kmsg import KmsgCursor, KmsgError, KmsgReader, Record, read_boot_id

log = logging.getLogger(__name__)

SOURCES = ("kmsg", "journal", "auto")


class LogRecord(Protocol):
    """A record of either kernel log: what is counted is its message."""

    @property
    def message(self) -> str: ...


R = TypeVar("R", bound=LogRecord)
R_co = TypeVar("R_co", bound=LogRecord, covariant=True)
R_contra = TypeVar("R_contra", bound=LogRecord, contravariant=True)


class LogReader(Protocol[R_co]):
    """Hands out the kernel log's records available now (KmsgReader, JournalReader)."""

    name: str
    """The `source` label of what it counts."""
    access: str
    """What reading it needs."""
    overrun: int

    def records(self) -> Iterator[R_co]: ...

    def close(self) -> None: ...


class LogCursor(Protocol[R_contra]):
    """Tells the records not counted before, and keeps the position on disk (KmsgCursor, JournalCursor)."""

    def is_new(self, rec: R_contra) -> bool: ...

    def save(self) -> None: ...


@dataclass(frozen=True)
class JournalOptions:
    """How to read the journal: the journalctl to run, where its cursor is kept, its directory."""

    journalctl: str = "journalctl"
    cursor: str = ""
    """"": not kept (every start reads this boot again)."""
    directory: str = ""
    """"": the system journal; else journalctl -D (the host's journal mounted into a container)."""


@dataclass(frozen=True)
class KernelLogOptions:
    """Which kernel log to read and where its place is kept (GPUHEALTH_KERNEL_LOG*: `collect` and `serve` alike)."""

    path: str
    """/dev/kmsg (or a file of its records); "": the kernel log is off."""
    cursor_path: str = ""
    source: str = "kmsg"
    """kmsg, journal, or auto (kmsg when it can be read, else the journal)."""
    journal: JournalOptions | None = None


class Unreadable:
    """Neither log can be read: the first poll raises why, once, with what each needs."""

    name = "kmsg"
    overrun = 0

    def __init__(self, err: KmsgError, access: str) -> None:
        self.err = err
        self.access = access

    def records(self) -> Iterator[Record]:
        raise self.err
        yield  # a generator, as the readers' records() are

    def close(self) -> None:
        """Nothing is open."""


def _kmsg(path: Path, cursor_path: Path | None) -> tuple[KmsgReader, KmsgCursor]:
    return KmsgReader(path), KmsgCursor(cursor_path, read_boot_id())


def _journal(options: JournalOptions) -> tuple[JournalReader, JournalCursor]:
    cursor = JournalCursor(Path(options.cursor) if options.cursor else None)
    return JournalReader(options.journalctl, cursor, options.directory), cursor


def _kmsg_refused(path: Path) -> OSError | None:
    """Why /dev/kmsg at `path` cannot be opened, or None when it can."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError as err:
        return err
    return None


def open_reader(
    source: str, path: Path, cursor_path: Path | None, journal: JournalOptions
) -> tuple[LogReader[Any], LogCursor[Any]]:
    """The reader and cursor of `source` (kmsg, journal, auto); ValueError for another word."""
    if source not in SOURCES:
        raise ValueError(f"kernel log source {source!r}: expected one of {', '.join(SOURCES)}")
    if source == "kmsg":
        return _kmsg(path, cursor_path)
    if source == "journal":
        return _journal(journal)
    refused = _kmsg_refused(path)
    if refused is None:
        return _kmsg(path, cursor_path)
    reader, cursor = _journal(journal)
    try:
        reader.probe()
    except KmsgError as err:
        why = f"neither {path} ({refused.strerror}) nor the journal ({err.strerror}) can be read"
        access = f"for {path}: {KmsgReader.access}; for the journal: {JournalReader.access}"
        return Unreadable(KmsgError(errno.EACCES, why), access), KmsgCursor(None, "")
    log.info("reading the kernel log through the journal: %s cannot be opened (%s)", path, refused.strerror)
    return reader, cursor

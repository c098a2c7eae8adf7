"""Reading the kernel log from /dev/kmsg, and the cursor that survives a restart and a reboot.

/dev/kmsg hands out one record per read(), ``prio,seq,usec,flags;message\\n`` followed by
`` KEY=value`` continuation lines (the device's dictionary); a fresh open starts at the oldest
record still in the ring buffer. A reader the ring has overtaken gets EPIPE once and then goes
on from the oldest record left; with O_NONBLOCK an empty log says EAGAIN. A regular file of the
same records (what tests use) is read the same way, a line at a time.

The cursor is (boot id, last sequence number counted), kept on disk in a small file written
atomically. The sequence restarts at 0 on each boot, so a cursor from another boot (by
/proc/sys/kernel/random/boot_id) is dropped and the whole ring of this boot is counted.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
READ_SIZE = 8192
"""Larger than any record: the kernel caps a message near 1 kB (LOG_LINE_MAX) plus its dictionary."""


class KmsgError(OSError):
    """The kernel log cannot be opened or read; errno says why (EACCES: no CAP_SYSLOG / not root)."""


@dataclass(frozen=True)
class Record:
    """One kernel log record."""

    seq: int
    usec: int
    message: str


@dataclass(frozen=True)
class Cursor:
    """The last record counted, in the boot it was counted in."""

    boot_id: str
    seq: int


def read_boot_id(path: Path = BOOT_ID) -> str:
    """This boot's id ("" when the file cannot be read: every cursor is then taken as this boot's)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def load_cursor(path: Path) -> Cursor | None:
    """The cursor kept at `path`, or None when there is none or it cannot be read."""
    try:
        raw = json.loads(path.read_text())
        return Cursor(str(raw["boot_id"]), int(raw["seq"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("ignoring the kernel log cursor %s: %s", path, err)
        return None


def write_json(path: Path, data: Mapping[str, object]) -> None:
    """Write `data` whole: a temporary file beside `path`, fsync, rename over it."""
    tmp = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_cursor(path: Path, cursor: Cursor) -> None:
    """Write the cursor whole (`write_json`)."""
    write_json(path, {"boot_id": cursor.boot_id, "seq": cursor.seq})


class CursorFile:
    """Where a reader's cursor is kept: written when it moved, a failure said once and counting goes on."""

    def __init__(self, path: Path | None, saved: object) -> None:
        self.path = path
        self._saved = saved
        self._failed = False

    def keep(self, key: object, data: Mapping[str, object]) -> None:
        """Write `data` unless `key` (what identifies the position) is what was last written."""
        if self.path is None or key == self._saved:
            return
        try:
            write_json(self.path, data)
        except OSError as err:
            if not self._failed:
                log.warning(
                    "cannot keep the kernel log cursor in %s (%s): a restart will count this boot's XIDs again",
                    self.path, err,
                )  # fmt: skip
                self._failed = True
            return
        self._saved = key


def parse_record(line: str) -> Record | None:
    """One ``prio,seq,usec,flags;message`` line, or None (a continuation line or a broken one)."""
    if not line or line[0] == " ":
        return None
    head, sep, message = line.partition(";")
    parts = head.split(",")
    if not sep or len(parts) < 3:
        return None
    try:
        return Record(int(parts[1]), int(parts[2]), message.rstrip("\n"))
    except ValueError:
        return None


class KmsgReader:
    """Reads records of /dev/kmsg (or a file of the same records) without blocking."""

    name = "kmsg"
    """The `source` label of what it counts."""
    access = "CAP_SYSLOG (or root) while kernel.dmesg_restrict=1, and /dev/kmsg mounted in a container"
    """What reading it needs, for the one line said when it cannot."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._partial = b""
        self.overrun = 0
        """Times the ring overtook this reader (EPIPE): records were lost before they were read."""

    def open(self) -> None:
        """Open the log; raises KmsgError (errno EACCES when not allowed to read it)."""
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as err:
            raise KmsgError(err.errno, f"opening the kernel log {self.path}: {err.strerror}") from err

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def records(self) -> Iterator[Record]:
        """The records available now, oldest first; stops when the log has no more."""
        if self._fd is None:
            self.open()
        assert self._fd is not None
        while True:
            try:
                chunk = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno == errno.EPIPE:
                    # Overtaken by the ring: the next read returns the oldest record left.
                    self.overrun += 1
                    continue
                raise KmsgError(err.errno, f"reading the kernel log {self.path}: {err.strerror}") from err
            if not chunk:
                return
            yield from self._lines(chunk)

    def _lines(self, chunk: bytes) -> Iterator[Record]:
        """Whole lines of `chunk` as records; a line not yet ended waits for the next read."""
        data = self._partial + chunk
        *whole, self._partial = data.split(b"\n")
        for raw in whole:
            rec = parse_record(raw.decode("utf-8", "replace"))
            if rec is not None:
                yield rec


class KmsgCursor:
    """Which records are new: those after the kept cursor in this boot, all of them in a new boot."""

    def __init__(self, path: Path | None, boot_id: str) -> None:
        self.path = path
        self.boot_id = boot_id
        kept = load_cursor(path) if path is not None else None
        self.last = kept.seq if kept is not None and kept.boot_id == boot_id else -1
        """The last sequence number counted; -1: nothing of this boot counted yet."""
        self._file = CursorFile(path, self.last)

    def is_new(self, rec: Record) -> bool:
        """Whether `rec` was not counted before (and mark it counted)."""
        if rec.seq <= self.last:
            return False
        if self.last >= 0 and rec.seq > self.last + 1:
            log.warning("kernel log records %d..%d were lost before they were read", self.last + 1, rec.seq - 1)
        self.last = rec.seq
        return True

    def save(self) -> None:
        """Keep the cursor on disk if it moved; a failure is said once and counting goes on."""
        self._file.keep(self.last, {"boot_id": self.boot_id, "seq": self.last})

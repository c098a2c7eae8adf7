"""Reading the kernel log through the systemd journal (journalctl), and the cursor kept on disk.

For hosts where /dev/kmsg cannot be read (no CAP_SYSLOG under kernel.dmesg_restrict=1) but the
journal can (a member of the systemd-journal group): journald copies every kernel record into the
journal. Each poll runs ``journalctl -o json --no-pager _TRANSPORT=kernel`` and reads what it prints,
one JSON object per line, until it exits: ``--after-cursor=<the last entry counted>`` once there is
one, ``-b`` (this boot) the first time. ``-k`` is not used with the cursor: it implies ``-b``, so the
kernel lines logged after the cursor but before a reboot would be lost; ``_TRANSPORT=kernel`` is the
match ``-k`` adds, without the boot.

Fields read (systemd.journal-fields(7); journalctl(1) ``-o json``): ``__CURSOR`` (an opaque position,
valid across boots), ``__REALTIME_TIMESTAMP`` (µs since the epoch, as a string), ``_BOOT_ID`` and
``MESSAGE``. journalctl writes a field that is not valid UTF-8 (or holds control characters) as an
array of byte values, and one longer than 4096 bytes as null: both are handled.
"""

from __future__ import annotations

import errno
import json
import logging
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from collector.kmsg import CursorFile, KmsgError

log = logging.getLogger(__name__)

NO_ACCESS_HINTS = (
    "not seeing messages from other users and the system",  # journalctl's hint to a user outside the groups
    "No journal files were found",
)
"""What journalctl says on stderr, exiting 0, when it can read no system journal."""
TIMEOUT_S = 30.0
"""One poll's journalctl; the first one of a boot reads all of its kernel lines (a few thousand)."""


@dataclass(frozen=True)
class JournalRecord:
    """One kernel entry of the journal."""

    cursor: str
    boot_id: str
    usec: int
    """__REALTIME_TIMESTAMP: µs since the epoch."""
    message: str


def _message(value: object) -> str | None:
    """MESSAGE as a string: as is, decoded from journalctl's array of bytes, or None (null, absent)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", "replace")
    return None


def parse_entry(line: bytes | str) -> JournalRecord | None:
    """One line of ``journalctl -o json``, or None (not an entry, cut short, or without a message)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("__CURSOR"), str):
        return None
    message = _message(entry.get("MESSAGE"))
    if message is None:
        return None
    try:
        usec = int(entry.get("__REALTIME_TIMESTAMP", 0))
    except (TypeError, ValueError):
        usec = 0
    return JournalRecord(entry["__CURSOR"], str(entry.get("_BOOT_ID", "")), usec, message)


def load_journal_cursor(path: Path | None) -> str | None:
    """The journal cursor kept at `path`, or None when there is none or it cannot be read."""
    if path is None:
        return None
    try:
        cursor = json.loads(path.read_text())["cursor"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("ignoring the journal cursor %s: %s", path, err)
        return None
    return cursor if isinstance(cursor, str) and cursor else None


class JournalCursor:
    """The last journal entry counted; kept on disk so a restart goes on after it."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.last = load_journal_cursor(path)
        """None: nothing counted yet (the first poll reads this boot)."""
        self._file = CursorFile(path, self.last)

    def is_new(self, rec: JournalRecord) -> bool:
        """Whether `rec` was not counted before (and mark it counted)."""
        if rec.cursor == self.last:
            return False  # --after-cursor excludes it; a journalctl that did not would show it again
        self.last = rec.cursor
        return True

    def save(self) -> None:
        """Keep the cursor on disk if it moved; a failure is said once and counting goes on."""
        if self.last is not None:
            self._file.keep(self.last, {"cursor": self.last})


class JournalReader:
    """Runs journalctl for the kernel entries after the cursor, each poll, and hands out what it printed."""

    name = "journal"
    """The `source` label of what it counts."""
    access = (
        "membership of the systemd-journal (or adm) group, or root; in a container the host's /var/log/journal "
        "mounted with GPUHEALTH_JOURNAL_DIRECTORY, and journalctl in the image"
    )
    """What reading it needs, for the one line said when it cannot."""

    def __init__(
        self, journalctl: str, cursor: JournalCursor, directory: str = "", timeout_s: float = TIMEOUT_S
    ) -> None:
        self.journalctl = journalctl
        self.cursor = cursor
        self.directory = directory
        self.timeout_s = timeout_s
        self.overrun = 0
        """Kept for the kernel log's series; the journal keeps what it rotated out of sight, not counted here."""

    def command(self) -> list[str]:
        """journalctl's arguments for the entries not counted yet."""
        args = [self.journalctl, "-o", "json", "--no-pager", *(["-D", self.directory] if self.directory else [])]
        after = [f"--after-cursor={self.cursor.last}"] if self.cursor.last else ["-b"]
        return [*args, *after, "_TRANSPORT=kernel"]

    def _run(self, args: list[str]) -> bytes:
        """journalctl's standard output; KmsgError when it cannot run, fails, or sees no system journal."""
        try:
            done = subprocess.run(args, capture_output=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError as err:
            raise KmsgError(errno.ENOENT, f"running {self.journalctl}: not found") from err
        except PermissionError as err:
            raise KmsgError(errno.EACCES, f"running {self.journalctl}: {err.strerror}") from err
        except subprocess.TimeoutExpired as err:
            raise KmsgError(errno.ETIMEDOUT, f"{self.journalctl} did not finish within {self.timeout_s:g} s") from err
        said = done.stderr.decode("utf-8", "replace").strip()
        if done.returncode != 0:
            last = said.splitlines()[-1] if said else "no message"
            raise KmsgError(errno.EIO, f"{self.journalctl} exited with {done.returncode}: {last}")
        if any(hint in said for hint in NO_ACCESS_HINTS):
            raise KmsgError(errno.EACCES, f"reading the journal with {self.journalctl}: {said.splitlines()[0]}")
        return done.stdout

    def probe(self) -> None:
        """Raise KmsgError unless journalctl runs and shows a kernel entry of the system journal.

        A host whose journal holds no kernel entry at all (journald not running, its files not mounted
        into the container, Storage=none) answers like an empty one: it is no kernel log to read.
        """
        args = [self.journalctl, "-o", "json", "--no-pager", *(["-D", self.directory] if self.directory else [])]
        shown = self._run([*args, "-n", "1", "_TRANSPORT=kernel"])
        if not any(parse_entry(line) for line in shown.splitlines()):
            raise KmsgError(errno.ENOENT, f"{self.journalctl} shows no kernel entry (journald not running here?)")

    def records(self) -> Iterator[JournalRecord]:
        """The kernel entries after the cursor, oldest first (one journalctl run)."""
        for line in self._run(self.command()).splitlines():
            rec = parse_entry(line)
            if rec is not None:
                yield rec

    def close(self) -> None:
        """Nothing held between polls (each runs its own journalctl)."""

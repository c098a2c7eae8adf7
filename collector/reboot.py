"""The node agent's side of a reboot on Kubernetes: kured's sentinel file.

kured (kubereboot/kured, the CNCF reboot daemon) reboots a node when a file exists: by default
`/var/run/reboot-required`, its flag `--reboot-sentinel`. Only the file's presence counts, not what
it says; we write one line saying who asked and why, so that a person (or `clear`) can tell our
request from another's (apt's update-notifier writes the same file after a kernel update).

    sentinel = reboot_sentinel(settings.reboot_sentinel, host)   # None when the setting is empty (off)
    sentinel.request("GPU 3 reboot: XID 79, fallen off the bus")  # True: written now; False: asked already
    sentinel.state()                                             # "requested"
    sentinel.clear()                                             # ours removed; another's never

The file appears whole or not at all: it is written beside the sentinel and hard-linked into place,
which also refuses to overwrite a file that appeared in between. Its line names the boot it was
written in (`/proc/sys/kernel/random/boot_id`, the value the kubelet reports as the node's
`status.nodeInfo.bootID`): a file of ours from an earlier boot is `served`, the reboot it asked for
happened. /var/run is a tmpfs, so a reboot removes the file anyway; on a path that survives a reboot
a served file would make kured reboot again and again, and `clear` removes it.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
"""The kernel's id of this boot, a fresh random UUID at each one; not namespaced, so a container reads the host's."""
MARK = "gpuhealth:"
"""Our sentinel's line starts so; a sentinel without it is someone else's."""
READ_BYTES = 4096
_LINE = re.compile(r"^gpuhealth: reboot asked by (?P<by>.*) \(boot (?P<boot>[^)]*)\) at (?P<at>\S+): (?P<why>.*)$")

SentinelState = Literal["absent", "requested", "served", "foreign"]
"""absent: no file; requested: ours, from this boot; served: ours, from an earlier boot (the reboot
happened); foreign: a file we did not write (a reboot is asked for all the same)."""


class RebootSentinelError(RuntimeError):
    """The sentinel could not be read, written or removed (its folder missing, not writable)."""


def read_boot_id(path: Path = BOOT_ID_FILE) -> str:
    """This boot's id, or "" where the kernel does not say (not Linux)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _one_line(text: str) -> str:
    """Text without line breaks, control characters or direction overrides (the reason is data we did not write)."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


class RebootSentinel:
    """kured's sentinel file at `path`, written and cleared by the node agent of `host`."""

    def __init__(
        self,
        path: str | Path,
        host: str,
        *,
        boot_id: Callable[[], str] = read_boot_id,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.path = Path(path)
        self.host = host
        self._boot_id = boot_id
        self._now = now

    def line(self, why: str) -> str:
        """The line we write: who asked, in which boot, when, and why."""
        at = self._now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"{MARK} reboot asked by gpuhealth collect on {self.host} (boot {self._boot_id()}) at {at}: {why}\n"

    def _read(self) -> str | None:
        try:
            with self.path.open("rb") as f:
                return f.read(READ_BYTES).decode("utf-8", "replace")
        except FileNotFoundError:
            return None
        except OSError as err:
            raise RebootSentinelError(f"reading kured's sentinel {self.path}: {err.strerror}") from err

    def state(self) -> SentinelState:
        """Whether a reboot is asked, and by whom (see SentinelState)."""
        text = self._read()
        if text is None:
            return "absent"
        m = _LINE.match(text.splitlines()[0] if text else "")
        if m is None:
            return "foreign"
        now = self._boot_id()
        return "served" if now and m["boot"] and m["boot"] != now else "requested"

    def request(self, why: str) -> bool:
        """Ask kured for a reboot; True when this call wrote the file, False when a reboot is asked already
        (our own request of this boot, or someone else's file, which is left as it is)."""
        state = self.state()
        if state in ("requested", "foreign"):
            return False
        return self._write(self.line(_one_line(why)), replace=state == "served")

    def clear(self) -> bool:
        """Withdraw our request (or remove our served one); True when a file of ours was removed.
        Someone else's file stays: their reboot is theirs to cancel."""
        if self.state() not in ("requested", "served"):
            return False
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        except OSError as err:
            raise RebootSentinelError(f"removing kured's sentinel {self.path}: {err.strerror}") from err
        return True

    def _write(self, text: str, *, replace: bool) -> bool:
        """Write `text` beside the sentinel, then link it into place whole (or replace our served file)."""
        folder = self.path.parent
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=folder)
        except FileNotFoundError as err:
            raise RebootSentinelError(
                f"writing kured's sentinel {self.path}: no folder {folder} (is the host's mounted?)"
            ) from err
        except OSError as err:
            raise RebootSentinelError(f"writing kured's sentinel {self.path}: {err.strerror}") from err
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)  # as apt's; mkstemp makes it 0600
            if replace:
                os.replace(tmp, self.path)
                return True
            try:
                os.link(tmp, self.path)  # fails if a file appeared since state(): theirs, not overwritten
            except FileExistsError:
                return False
            return True
        except OSError as err:
            raise RebootSentinelError(f"writing kured's sentinel {self.path}: {err.strerror}") from err
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def reboot_sentinel(setting: str | None, host: str) -> RebootSentinel | None:
    """The sentinel the setting `reboot_sentinel` names, or None when it is empty (reboots off)."""
    return RebootSentinel(setting, host) if setting and setting.strip() else None

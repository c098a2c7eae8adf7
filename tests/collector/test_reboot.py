"""kured's sentinel file, as the node agent writes and clears it (collector/reboot.py): whole or not at all,
once per boot, never over someone else's, off unless a path is set."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from collector import reboot as reboot_mod
from collector.reboot import RebootSentinel, RebootSentinelError, reboot_sentinel
from core.settings import Settings

APT = "*** System restart required ***\n"  # what Ubuntu's update-notifier writes in /var/run/reboot-required


class Boot:
    """A boot id that a test can change, as a reboot does."""

    def __init__(self) -> None:
        self.id = "6b1f0c2e-0000-4000-8000-000000000001"

    def __call__(self) -> str:
        return self.id


@pytest.fixture
def boot() -> Boot:
    return Boot()


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """The host's /var/run, as the node agent's container sees it mounted."""
    d = tmp_path / "run"
    d.mkdir()
    return d


def sentinel(run: Path, boot: Boot, minutes: int = 0) -> RebootSentinel:
    at = datetime(2026, 12, 7, 6, 0, tzinfo=UTC) + timedelta(minutes=minutes)
    return RebootSentinel(run / "reboot-required", "gpu-1", boot_id=boot, now=lambda: at)


def test_off_by_default() -> None:
    assert Settings.model_fields["reboot_sentinel"].default == ""
    assert reboot_sentinel(Settings.model_fields["reboot_sentinel"].default, "gpu-1") is None
    assert reboot_sentinel("  ", "gpu-1") is None
    on = reboot_sentinel("/var/run/reboot-required", "gpu-1")
    assert on is not None and on.path == Path("/var/run/reboot-required")


def test_a_request_writes_one_line_saying_who_and_why(run: Path, boot: Boot) -> None:
    s = sentinel(run, boot)
    assert s.state() == "absent"
    assert s.request("GPU 3 reboot: XID 79\nfallen off the bus\x1b[2J\u202e") is True
    path = run / "reboot-required"
    assert path.read_text() == (
        "gpuhealth: reboot asked by gpuhealth collect on gpu-1 (boot 6b1f0c2e-0000-4000-8000-000000000001)"
        " at 2026-12-07T06:00:00Z: GPU 3 reboot: XID 79 fallen off the bus [2J \n"
    )
    assert path.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in run.iterdir()) == ["reboot-required"]  # no temporary file left
    assert s.state() == "requested"


def test_asking_again_changes_nothing(run: Path, boot: Boot) -> None:
    assert sentinel(run, boot).request("GPU 3 reboot: XID 79") is True
    before = (run / "reboot-required").read_bytes(), (run / "reboot-required").stat().st_ino
    assert sentinel(run, boot, minutes=5).request("GPU 4 reboot: XID 79") is False
    assert ((run / "reboot-required").read_bytes(), (run / "reboot-required").stat().st_ino) == before


def test_the_file_appears_whole_and_never_over_one_that_appeared_meanwhile(
    run: Path, boot: Boot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linked into place after its text is on disk: kured (or a reader) never sees it half written, and a
    file that appeared between our look and our write (apt's) is not overwritten."""
    path = run / "reboot-required"
    seen: list[tuple[bool, str]] = []
    real_link = os.link

    def link(src: str, dst: str) -> None:
        seen.append((path.exists(), Path(src).read_text()))
        real_link(src, dst)

    monkeypatch.setattr(reboot_mod.os, "link", link)
    s = sentinel(run, boot)
    assert s.request("GPU 3 reboot") is True
    assert seen == [(False, path.read_text())]

    path.unlink()
    real_fsync = os.fsync

    def fsync_then_apt(fd: int) -> None:
        real_fsync(fd)
        path.write_text(APT)  # update-notifier, between our look and our link

    monkeypatch.setattr(reboot_mod.os, "fsync", fsync_then_apt)
    assert s.request("GPU 3 reboot") is False
    assert path.read_text() == APT
    assert sorted(p.name for p in run.iterdir()) == ["reboot-required"]


def test_someone_elses_sentinel_is_left_alone(run: Path, boot: Boot) -> None:
    (run / "reboot-required").write_text(APT)
    s = sentinel(run, boot)
    assert s.state() == "foreign"
    assert s.request("GPU 3 reboot") is False  # a reboot is asked already: kured reboots all the same
    assert s.clear() is False
    assert (run / "reboot-required").read_text() == APT


def test_clear_withdraws_our_request(run: Path, boot: Boot) -> None:
    s = sentinel(run, boot)
    assert s.clear() is False
    s.request("GPU 3 reboot")
    assert s.clear() is True
    assert not (run / "reboot-required").exists() and s.state() == "absent"
    assert s.clear() is False


def test_a_request_from_an_earlier_boot_is_served(run: Path, boot: Boot) -> None:
    """On a path that survives the reboot, our file would make kured reboot again: it reads as served,
    and clear removes it; a new request replaces it."""
    s = sentinel(run, boot)
    s.request("GPU 3 reboot")
    boot.id = "6b1f0c2e-0000-4000-8000-000000000002"
    assert s.state() == "served"
    assert s.request("GPU 5 reboot") is True
    assert "(boot 6b1f0c2e-0000-4000-8000-000000000002)" in (run / "reboot-required").read_text()
    assert s.state() == "requested"
    boot.id = "6b1f0c2e-0000-4000-8000-000000000003"
    assert s.clear() is True and s.state() == "absent"


def test_a_missing_folder_is_an_error_naming_it(tmp_path: Path, boot: Boot) -> None:
    s = RebootSentinel(tmp_path / "not-mounted" / "reboot-required", "gpu-1", boot_id=boot)
    with pytest.raises(RebootSentinelError, match=r"no folder .*not-mounted"):
        s.request("GPU 3 reboot")


def test_the_boot_id_is_the_kernels(tmp_path: Path) -> None:
    f = tmp_path / "boot_id"
    f.write_text("0f4e2a6c-1d2b-4c3d-9e8f-0a1b2c3d4e5f\n")
    assert reboot_mod.read_boot_id(f) == "0f4e2a6c-1d2b-4c3d-9e8f-0a1b2c3d4e5f"
    assert reboot_mod.read_boot_id(tmp_path / "none") == ""

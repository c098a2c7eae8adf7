"""The kernel log through the systemd journal: journalctl's JSON, the cursor across restarts and reboots.

The entries (tests/collector/kmsg/xid-journal.jsonl) are `journalctl -o json` lines as
systemd.journal-fields(7) and journalctl(1) describe them: every value a string, a kernel entry with
_TRANSPORT=kernel, SYSLOG_IDENTIFIER=kernel and, for a device's message, _KERNEL_DEVICE=+pci:...;
a MESSAGE that is not UTF-8 as an array of byte values, one over 4096 bytes as null. The driver's
lines are those of tests/collector/kmsg/xid-records.kmsg (NVIDIA's XID catalogue, the lines operators
post, the NVSwitch driver's SXid format), plus XID 119's GSP timeout and XID 94's "Contained" text
as the catalogue's examples print them. journalctl itself is tests/collector/fake_journalctl.py.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.registry import CollectorRegistry

from collector.journal import JournalCursor, JournalReader, parse_entry
from collector.kernel_log import KernelLog, KernelLogCollector, open_kernel_log
from collector.kernel_log_source import JournalOptions
from tests.collector.helpers import info

ENTRIES = Path(__file__).parent / "kmsg" / "xid-journal.jsonl"
FAKE = Path(__file__).parent / "fake_journalctl.py"
BOOT_A = "0f6c1d3e8a414c559b7e2d5f1a0c9e11"
BOOT_B = "7d2e9b41c3a84f0e8b1d5c6a2f3e4d50"
BEFORE_RESTART = 6
"""The first six entries were there when the collector first ran; the rest came while it was down."""


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A journalctl executable over a journal file that holds the first entries; returns the file."""
    exe = tmp_path / "journalctl"
    exe.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(FAKE)!r}, run_name='__main__')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "journal.jsonl"
    log.write_text("".join(ENTRIES.read_text().splitlines(keepends=True)[:BEFORE_RESTART]))
    monkeypatch.setenv("FAKE_JOURNAL", str(log))
    monkeypatch.setenv("FAKE_BOOT_ID", BOOT_A)
    monkeypatch.setenv("FAKE_JOURNAL_CALLS", str(tmp_path / "calls"))
    return log


def journal_log(tmp_path: Path, cursor: Path | None) -> KernelLog[Any]:
    return open_kernel_log(
        tmp_path / "no-kmsg", None, [info(0), info(1)], source="journal",
        journal=JournalOptions(str(tmp_path / "journalctl"), str(cursor) if cursor else ""),
    )  # fmt: skip


def calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "calls").read_text().splitlines()]


def counted(*logs: KernelLog[Any]) -> dict[tuple[str, int], int]:
    """XIDs and SXIDs over several runs, by (bus, code)."""
    out: dict[tuple[str, int], int] = {}
    for kl in logs:
        xids, sxids = kl.snapshot()
        for (pci, code), n in xids.items():
            out[(f"{pci[1]:02x}", code)] = out.get((f"{pci[1]:02x}", code), 0) + n
        for (_, pci, code, _), n in sxids.items():
            out[(f"{pci[1]:02x}", code)] = out.get((f"{pci[1]:02x}", code), 0) + n
    return out


def test_entries_with_text_bytes_and_null_messages() -> None:
    lines = ENTRIES.read_bytes().splitlines()
    first = parse_entry(lines[1])
    assert first is not None and first.boot_id == BOOT_A and first.usec == 1733565043308145
    assert first.message.startswith("NVRM: Xid (PCI:0000:18:00): 79,")
    as_bytes = parse_entry(lines[7])
    assert json.loads(lines[7])["MESSAGE"][0] == ord("N")  # journalctl's array of bytes
    assert as_bytes is not None and as_bytes.message.startswith(
        "NVRM: Xid (PCI:0000:19:00): 13, pid=4242, name=tr\ufffdin.py"
    )
    assert parse_entry(lines[8]) is None  # MESSAGE null: over journalctl's 4096-byte limit
    assert parse_entry(b'{"__CURSOR":"s=1;i=2","MESSAGE":"NVRM: Xid (PCI:0000:18') is None  # cut short
    assert parse_entry(b"-- No entries --") is None


def test_the_first_run_reads_this_boot_then_goes_on_after_its_cursor(tmp_path: Path, journal: Path) -> None:
    kl = journal_log(tmp_path, tmp_path / "cursor.json")
    assert kl.poll() == 4  # XIDs 79, 13, 48 and SXID 20009; the mlx5 line is no XID, the unit's no kernel line
    assert counted(kl) == {("18", 79): 1, ("19", 13): 1, ("cb", 48): 1, ("c3", 20009): 1}
    assert kl.poll() == 0
    first, second = calls(tmp_path)
    assert "-b" in first and "_TRANSPORT=kernel" in first and "-k" not in first
    kept = json.loads((tmp_path / "cursor.json").read_text())["cursor"]
    assert kept == json.loads(journal.read_text().splitlines()[5])["__CURSOR"]
    assert f"--after-cursor={kept}" in second and "-b" not in second


def test_a_restart_across_a_reboot_neither_loses_nor_doubles(tmp_path: Path, journal: Path) -> None:
    cursor = tmp_path / "cursor.json"
    first = journal_log(tmp_path, cursor)
    assert first.poll() == 4
    first.stop()
    # Down for a while: XIDs 119 and 13 (its MESSAGE in bytes) are logged, the node reboots, XID 94 and a
    # fatal SXID are logged in the new boot; then the collector comes back.
    journal.write_text(ENTRIES.read_text())
    os.environ["FAKE_BOOT_ID"] = BOOT_B
    second = journal_log(tmp_path, cursor)
    assert second.poll() == 4
    assert second.poll() == 0
    assert counted(second) == {("19", 119): 1, ("19", 13): 1, ("19", 94): 1, ("c5", 1004): 1}
    every = counted(first, second)
    assert sum(every.values()) == 8 and every[("19", 13)] == 2
    assert second.reader.name == "journal"


def test_without_a_kept_cursor_every_start_reads_this_boot(tmp_path: Path, journal: Path) -> None:
    assert journal_log(tmp_path, None).poll() == 4
    assert journal_log(tmp_path, None).poll() == 4
    assert not list(tmp_path.glob("*.json"))


def test_a_cursor_whose_entry_is_gone_still_finds_its_place(tmp_path: Path, journal: Path) -> None:
    cursor = tmp_path / "cursor.json"
    assert journal_log(tmp_path, cursor).poll() == 4
    # journald rotated and vacuumed the old file: the cursor's entry is no longer there.
    journal.write_text("".join(ENTRIES.read_text().splitlines(keepends=True)[BEFORE_RESTART:]))
    assert journal_log(tmp_path, cursor).poll() == 4  # 119 and 13 of boot A, 94 and the SXID of boot B


def test_the_collector_labels_journal_counts_with_their_source(tmp_path: Path, journal: Path) -> None:
    kl = journal_log(tmp_path, None)
    kl.poll()
    registry = CollectorRegistry()
    registry.register(KernelLogCollector(kl, lambda: {"GPU-00000000-test": {79: 5}}, "node-a"))
    labels = {"gpu": "0", "UUID": "GPU-00000000-test", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3"}
    labels |= {"pci_bus_id": "00000000:18:00.0", "Hostname": "node-a"}
    fell = {"err_code": "79", "err_msg": "GPU has fallen off the bus"}
    name = "gpuhealth_kernel_xid_errors_total"
    assert registry.get_sample_value(name, labels | fell | {"source": "journal"}) == 1.0
    assert registry.get_sample_value(name, labels | fell | {"source": "nvml"}) is None
    assert registry.get_sample_value("gpuhealth_kernel_log_readable") == 1.0


def test_a_user_outside_the_journal_groups_is_told_once(
    tmp_path: Path, journal: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FAKE_JOURNAL_DENY", "1")
    kl = journal_log(tmp_path, tmp_path / "cursor.json")
    with caplog.at_level(logging.WARNING, logger="collector.kernel_log"):
        for _ in range(3):
            assert kl.poll() == 0
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "not seeing messages" in said[0] and "systemd-journal" in said[0], said
    assert kl.readable is False


def test_a_missing_journalctl_is_an_unreadable_log(tmp_path: Path) -> None:
    reader = JournalReader(str(tmp_path / "nowhere" / "journalctl"), JournalCursor(None))
    kl = KernelLog(reader, JournalCursor(None), [info(0)])
    assert kl.poll() == 0 and kl.readable is False


def test_auto_takes_kmsg_when_it_opens_else_the_journal(tmp_path: Path, journal: Path) -> None:
    options = JournalOptions(str(tmp_path / "journalctl"))
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    assert open_kernel_log(kmsg, None, [info(0)], source="auto", journal=options).reader.name == "kmsg"
    chosen = open_kernel_log(tmp_path / "no-kmsg", None, [info(0)], source="auto", journal=options)
    assert chosen.reader.name == "journal"
    assert chosen.poll() == 4
    with pytest.raises(ValueError, match="kmsg, journal, auto"):
        open_kernel_log(kmsg, None, [info(0)], source="dmesg", journal=options)


def test_auto_passes_over_a_journal_without_kernel_entries(tmp_path: Path, journal: Path) -> None:
    journal.write_text("")  # journald not running, or its files not mounted: journalctl answers with nothing
    options = JournalOptions(str(tmp_path / "journalctl"))
    kl = open_kernel_log(tmp_path / "no-kmsg", None, [info(0)], source="auto", journal=options)
    assert kl.poll() == 0 and kl.readable is False


def test_auto_with_neither_says_both_reasons_once(
    tmp_path: Path, journal: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FAKE_JOURNAL_DENY", "1")
    options = JournalOptions(str(tmp_path / "journalctl"))
    kl = open_kernel_log(tmp_path / "no-kmsg", None, [info(0)], source="auto", journal=options)
    with caplog.at_level(logging.WARNING, logger="collector.kernel_log"):
        assert kl.poll() == 0 and kl.poll() == 0
    (said,) = [r.getMessage() for r in caplog.records]
    assert "no-kmsg (No such file or directory)" in said and "not seeing messages" in said
    assert "CAP_SYSLOG" in said and "systemd-journal" in said

"""`gpuhealth collect` hands the kernel log settings and the backend's switches to the XID counter."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import collector.kernel_log
from collector.kernel_log_source import JournalOptions
from collector.nvswitch import SwitchInfo
from core import catalog, kernel_log
from core.settings import Settings
from gpuhealth.cli import collect
from gpuhealth.cli.offline import list_fields
from tests.collector.helpers import ScriptedBackend


class Listing(ScriptedBackend):
    name = "dcgm"

    def switches(self) -> list[SwitchInfo]:
        return [SwitchInfo("0", "00000000:05:00.0")]


def test_the_source_journal_and_switches_reach_the_kernel_log(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def attach(*args: Any, **kwargs: Any) -> None:
        seen.update(args=args, **kwargs)

    monkeypatch.setattr(collector.kernel_log, "attach_kernel_log", attach)
    s = Settings(
        kernel_log_source="journal", journalctl="/usr/bin/journalctl", journal_directory="/host/var/log/journal",
        kernel_log_journal_cursor="/var/lib/gpuhealth/j.json",
    )  # fmt: skip
    running = SimpleNamespace(registry=object(), sampler=object())
    collect._kernel_log(running, Listing(), s, "Hostname")  # type: ignore[arg-type]
    assert seen["source"] == "journal"
    want = JournalOptions("/usr/bin/journalctl", "/var/lib/gpuhealth/j.json", "/host/var/log/journal")
    assert seen["journal"] == want
    assert seen["switches"] == [SwitchInfo("0", "00000000:05:00.0")]
    assert seen["args"][3:5] == ("/dev/kmsg", s.kernel_log_cursor)


def test_auto_is_the_default() -> None:
    assert Settings().kernel_log_source == "auto"


def test_fields_and_the_metrics_page_list_the_kernel_log_series(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    list_fields(all_fields=False)
    out = capsys.readouterr().out
    assert "gpuhealth_kernel_xid_errors_total" in out and "journalctl -k" in out
    assert "gpuhealth_kernel_sxid_errors_total" in out
    page = catalog.metrics_markdown()
    for name in kernel_log.METRICS:
        assert f"`{name}" in page, name

"""The kernel-log alerts: their promtool cases catch a rule that counts NVML's XIDs, a non-fatal SXID, or
misses the first XID of a code (a counter series that has just appeared)."""

from __future__ import annotations

from pathlib import Path

import pytest

from alerts import build, config
from core.kernel_log import SXID, XID
from tests.alerts.conftest import REPO_ROOT, promtool_fails_on

RULES = REPO_ROOT / build.RULES_PATH
TESTS = REPO_ROOT / build.TESTS_PATH
_CODES = "|".join(config.KERNEL_XID_RESET)
_RESET_SEL = f'{XID}{{{config.SAMPLER_SELECTOR}, err_code=~"{_CODES}", source!="nvml"}}'
_FATAL_SEL = f'{SXID}{{{config.SAMPLER_SELECTOR}, severity="fatal"}}'


@pytest.mark.parametrize(
    ("old", "new", "alert"),
    [
        # Counting NVML's XIDs too: GpuXidFatal's events would alert twice.
        (', source!="nvml"}', "}", "GpuKernelXidResetRequired"),
        # Any SXID, not only the fatal ones.
        (_FATAL_SEL, f"{SXID}{{{config.SAMPLER_SELECTOR}}}", "GpuNvswitchFatalSxid"),
        # increase() alone: the first XID of a code, a new series, never fires.
        (f"\n      or\n      (({_RESET_SEL} unless {_RESET_SEL} offset 10m) >= 1)", "", "GpuKernelXidResetRequired"),
    ],
    ids=["nvml-counted", "non-fatal-sxid", "first-event-missed"],
)
def test_a_broken_kernel_log_rule_is_caught(promtool: str, tmp_path: Path, old: str, new: str, alert: str) -> None:
    assert f"alertname: {alert}" in promtool_fails_on(promtool, tmp_path, old, new)


def test_the_reset_classes_follow_the_xid_catalogue() -> None:
    # Issue 57: GSP 119/120 and uncontained ECC 95 -> reset; 79 -> reboot; 48 DBE -> reset. 94 is contained.
    assert set(config.KERNEL_XID_RESET) == {"48", "79", "95", "119", "120"}
    assert set(config.KERNEL_XID_RESET) <= set(config.XID_DRAIN)
    assert config.KERNEL_XID_CONTAINED == ("94",)

"""The policy's levels and waits (`Thresholds`): their defaults, their settings and their checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core.settings import Settings
from predictor.thresholds import Thresholds


def test_default_thresholds() -> None:
    t = Thresholds()
    assert (t.watch, t.demote) == (0.3, 0.7)
    assert Thresholds(0.5, 1.0).demote == 1.0


@pytest.mark.parametrize(("watch", "demote"), [(0.0, 0.7), (0.7, 0.7), (0.8, 0.7), (0.3, 1.1), (np.nan, 0.7)])
def test_invalid_thresholds_raise(watch: float, demote: float) -> None:
    with pytest.raises(ValueError, match="0 < watch < demote <= 1"):
        Thresholds(watch, demote)


def test_the_habitual_link_wait_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_DEMOTE_FOR_PCIE_HABIT", "8h")
    monkeypatch.setenv("GPUHEALTH_PCIE_SURPRISE_Z", "2.5")
    th = Thresholds.from_settings(Settings())
    assert (th.pcie_habit_demote_for_s, th.pcie_surprise_z) == (8 * 3600, 2.5)
    assert (Thresholds().pcie_habit_demote_for_s, Thresholds().pcie_surprise_z) == (6 * 3600, 3.0)
    with pytest.raises(ValueError, match="GPUHEALTH_DEMOTE_FOR_PCIE_HABIT: invalid duration"):
        Thresholds.from_settings(Settings(demote_for_pcie_habit="often"))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="pcie_surprise_z must be a number of σ >= 0"):
            Thresholds(pcie_surprise_z=bad)


def test_the_agreement_and_spread_levels_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    d = Thresholds()
    assert (d.thermal_agree_z, d.thermal_agree_heat_z, d.thermal_spread_z) == (2.0, 1.0, 4.0)
    monkeypatch.setenv("GPUHEALTH_THERMAL_AGREE_Z", "3")
    monkeypatch.setenv("GPUHEALTH_THERMAL_AGREE_HEAT_Z", "1.5")
    monkeypatch.setenv("GPUHEALTH_THERMAL_SPREAD_Z", "0")
    th = Thresholds.from_settings(Settings())
    assert (th.thermal_agree_z, th.thermal_agree_heat_z, th.thermal_spread_z) == (3.0, 1.5, 0.0)
    for name in ("thermal_agree_z", "thermal_agree_heat_z", "thermal_spread_z"):
        for bad in (-1.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=f"{name} must be a number of σ >= 0"):
                Thresholds(**{name: bad})


def test_the_light_load_wait_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_DEMOTE_FOR_LIGHT_LOAD", "1d")
    monkeypatch.setenv("GPUHEALTH_LIGHT_LOAD_SHARE", "0.3")
    monkeypatch.setenv("GPUHEALTH_LIGHT_LOAD_SPREAD_Z", "3.5")
    th = Thresholds.from_settings(Settings())
    assert (th.light_load_demote_for_s, th.light_load_share, th.demote_for_s) == (86400, 0.3, 3 * 3600)
    assert th.light_load_spread_z == 3.5
    d = Thresholds()
    assert (d.light_load_demote_for_s, d.light_load_share, d.light_load_spread_z) == (12 * 3600, 0.5, 2.0)
    for bad_z in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="light_load_spread_z must be a number of σ >= 0"):
            Thresholds(light_load_spread_z=bad_z)
    monkeypatch.setenv("GPUHEALTH_THERMAL_CORROBORATE_Z", "1.5")
    monkeypatch.setenv("GPUHEALTH_DEMOTE_FOR_UNCORROBORATED", "8h")
    th = Thresholds.from_settings(Settings())
    assert (th.thermal_corroborate_z, th.uncorroborated_demote_for_s) == (1.5, 8 * 3600)
    with pytest.raises(ValueError, match="GPUHEALTH_DEMOTE_FOR_UNCORROBORATED: invalid duration 'soon'"):
        Thresholds.from_settings(Settings(demote_for_uncorroborated="soon"))
    with pytest.raises(ValueError, match="thermal_corroborate_z must be a number of σ >= 0"):
        Thresholds(thermal_corroborate_z=-0.5)
    with pytest.raises(ValueError, match="GPUHEALTH_DEMOTE_FOR_LIGHT_LOAD: invalid duration 'idle'"):
        Thresholds.from_settings(Settings(demote_for_light_load="idle"))
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="light_load_share must be between 0 and 1"):
            Thresholds(light_load_share=bad)


@pytest.mark.parametrize(("text", "seconds"), [("3h", 10800.0), ("90m", 5400.0), ("0", 0.0), ("0s", 0.0)])
def test_demote_for_from_settings(text: str, seconds: float) -> None:
    s = Settings(demote_for=text, demote_for_ecc=text, demote_for_pcie=text)
    th = Thresholds.from_settings(s)
    assert th.demote_for_s == seconds and th.ecc_demote_for_s == seconds and th.pcie_demote_for_s == seconds
    d = Thresholds.from_settings(Settings())
    assert (d.demote_for_s, d.ecc_demote_for_s, d.pcie_demote_for_s) == (3 * 3600, 12 * 3600, 3 * 3600)


def test_the_pcie_wait_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_DEMOTE_FOR_PCIE", "6h")
    th = Thresholds.from_settings(Settings())
    assert th.pcie_demote_for_s == 6 * 3600 and th.demote_for_s == 3 * 3600


def test_invalid_demote_for_raises() -> None:
    with pytest.raises(ValueError, match="demote_for must be a duration >= 0"):
        Thresholds(demote_for_s=-1)
    with pytest.raises(ValueError, match="demote_for_ecc must be a duration >= 0"):
        Thresholds(ecc_demote_for_s=float("nan"))
    with pytest.raises(ValueError, match="GPUHEALTH_DEMOTE_FOR: invalid duration"):
        Thresholds.from_settings(Settings(demote_for="soon"))
    with pytest.raises(ValueError, match="GPUHEALTH_DEMOTE_FOR_ECC: invalid duration 'later'"):
        Thresholds.from_settings(Settings(demote_for_ecc="later"))
    with pytest.raises(ValueError, match="demote_for_pcie must be a duration >= 0"):
        Thresholds(pcie_demote_for_s=float("inf"))
    with pytest.raises(ValueError, match="GPUHEALTH_DEMOTE_FOR_PCIE: invalid duration 'never'"):
        Thresholds.from_settings(Settings(demote_for_pcie="never"))


def test_the_remap_hold_is_at_the_watch_level_by_default_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = Thresholds.from_settings(Settings())
    assert (d.remap_hold_risk, d.remap_hold_for_s, d.remap_hold_clear_s) == (0.3, 0.0, 86400.0)
    assert Thresholds().remap_hold_risk == 0.3
    monkeypatch.setenv("GPUHEALTH_REMAP_HOLD_RISK", "0.3")
    monkeypatch.setenv("GPUHEALTH_REMAP_HOLD_FOR", "12h")
    monkeypatch.setenv("GPUHEALTH_REMAP_HOLD_CLEAR", "3d")
    th = Thresholds.from_settings(Settings())
    assert (th.remap_hold_risk, th.remap_hold_for_s, th.remap_hold_clear_s) == (0.3, 12 * 3600, 3 * 86400)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="remap_hold_risk must be between 0 and 1"):
            Thresholds(remap_hold_risk=bad)
    with pytest.raises(ValueError, match="remap_hold_for must be a duration >= 0"):
        Thresholds(remap_hold_for_s=-1)
    with pytest.raises(ValueError, match="GPUHEALTH_REMAP_HOLD_FOR: invalid duration 'soon'"):
        Thresholds.from_settings(Settings(remap_hold_for="soon"))
    with pytest.raises(ValueError, match="remap_hold_clear must be a duration >= 0"):
        Thresholds(remap_hold_clear_s=float("nan"))
    with pytest.raises(ValueError, match="GPUHEALTH_REMAP_HOLD_CLEAR: invalid duration 'a while'"):
        Thresholds.from_settings(Settings(remap_hold_clear="a while"))


@pytest.mark.parametrize(("kw", "message"), [
    ({"probation_risk": 0.0}, "probation_risk must satisfy"), ({"probation_risk": 0.71}, "probation_risk must satisfy"),
    ({"probation_risk": np.nan}, "probation_risk must satisfy"), ({"probation_for_s": -1.0}, "probation_for must be"),
    ({"probation_for_s": np.inf}, "probation_for must be"),
])  # fmt: skip
def test_invalid_probation_settings_raise(kw: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Thresholds(**kw)


def test_probation_settings_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUHEALTH_PROBATION_RISK", "0.2")
    monkeypatch.setenv("GPUHEALTH_PROBATION_FOR", "7d")
    th = Thresholds.from_settings(Settings())
    assert (th.probation_risk, th.probation_for_s) == (0.2, 7 * 86400.0)
    monkeypatch.setenv("GPUHEALTH_PROBATION_FOR", "soon")
    with pytest.raises(ValueError, match="GPUHEALTH_PROBATION_FOR"):
        Thresholds.from_settings(Settings())


@pytest.mark.parametrize("release", [0.0, -0.1, 0.71, np.nan])
def test_an_invalid_release_level_raises(release: float) -> None:
    with pytest.raises(ValueError, match="release must satisfy"):
        Thresholds(release=release)


def test_the_release_level_is_the_watch_level_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Thresholds().release_level == 0.3
    assert Thresholds(watch=0.2).release_level == 0.2
    monkeypatch.setenv("GPUHEALTH_RELEASE_THRESHOLD", "0.5")
    assert Thresholds.from_settings(Settings()).release_level == 0.5


def test_the_demote_on_heat_alone_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (Thresholds().thermal_heat_z, Thresholds().thermal_heat_for_s) == (4.0, 6 * 3600)
    monkeypatch.setenv("GPUHEALTH_THERMAL_HEAT_Z", "4.5")
    monkeypatch.setenv("GPUHEALTH_DEMOTE_FOR_HEAT", "2h")
    th = Thresholds.from_settings(Settings())
    assert (th.thermal_heat_z, th.thermal_heat_for_s) == (4.5, 2 * 3600)
    assert (th.thermal_heat_vs_node_z, th.thermal_heat_vs_node_excess_z, th.heat_hold) == (5.0, 2.0, pd.Timedelta("2h"))
    monkeypatch.setenv("GPUHEALTH_THERMAL_HEAT_VS_NODE_Z", "6")
    monkeypatch.setenv("GPUHEALTH_THERMAL_HEAT_VS_NODE_EXCESS_Z", "1.5")
    th = Thresholds.from_settings(Settings())
    assert (th.thermal_heat_vs_node_z, th.thermal_heat_vs_node_excess_z) == (6.0, 1.5)
    assert th.thermal_agree_vs_node_z == 3.0
    monkeypatch.setenv("GPUHEALTH_THERMAL_AGREE_VS_NODE_Z", "0")
    assert Thresholds.from_settings(Settings()).thermal_agree_vs_node_z == 0.0
    with pytest.raises(ValueError, match="GPUHEALTH_DEMOTE_FOR_HEAT: invalid duration"):
        Thresholds.from_settings(Settings(demote_for_heat="long"))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="thermal_heat_z must be a number of σ >= 0"):
            Thresholds(thermal_heat_z=bad)
        for name in ("thermal_heat_vs_node_z", "thermal_heat_vs_node_excess_z", "thermal_agree_vs_node_z"):
            with pytest.raises(ValueError, match=f"{name} must be a number of σ >= 0"):
                Thresholds(**{name: bad})
    with pytest.raises(ValueError, match="thermal_heat_for must be a duration >= 0"):
        Thresholds(thermal_heat_for_s=-1.0)

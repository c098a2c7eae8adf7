"""The `heat` features on hand-made histories: excess heat in the GPU's own σ, against its node.

Every GPU here reports hourly for 35 days; its core temperature is inlet + R·power + noise,
with power wandering between 100 and 500 W (so its own degrees-per-watt can be fitted),
and a scenario adds heat over the last hours before the cutoff.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from core.history import validate
from predictor.features import build_features
from predictor.features.heat import as_rare

T0 = pd.Timestamp("2026-03-01T00:00:00Z")
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
HOURS = 35 * 24
CUTOFF = T0 + pd.Timedelta(hours=HOURS)
HEAT = (
    "temp_excess_own_z", "temp_excess_vs_node_z", "temp_excess_vs_node_z_1d", "mem_spread_z",
    "node_heat_z", "node_hot_gpus", "node_gpus",
)  # fmt: skip


@dataclass(frozen=True)
class Gpu:
    """One GPU's story: its heat sink, its noise, and what happens before the cutoff."""

    host: str
    index: int
    noise: float = 1.0
    r: float = 0.04
    """Degrees per watt of its heat sink."""
    hot_c: float = 0.0
    """Extra °C over the last `hot_hours`."""
    hot_hours: int = 6
    mem_widen_c: float = 0.0
    """Extra memory-core spread over the last day."""
    full_load_hours: int = 0
    """Hours before the cutoff at 700 W (a new job) instead of its usual 100-500 W."""
    idle_hours: int = 0
    """Hours before the cutoff at 60 W (idle) instead of its usual 100-500 W."""
    mem: bool = True
    model: str = H100
    stops_hours_before: int = 0
    """Stops reporting this long before the cutoff (0: reports to the end)."""

    @property
    def uuid(self) -> str:
        return f"GPU-{self.host}-{self.index}"


def rows(g: Gpu, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    h = np.arange(HOURS + 1 - g.stops_hours_before)
    n = len(h)
    power = rng.uniform(100.0, 500.0, n)
    to_end = HOURS - h  # hours before the cutoff
    power[to_end < g.full_load_hours] = 700.0
    power[to_end < g.idle_hours] = 60.0
    temp = 25.0 + 2.0 * g.index + g.r * power + rng.normal(0.0, g.noise, n)
    temp[to_end < g.hot_hours] += g.hot_c
    mem = temp + 12.0 + rng.normal(0.0, g.noise, n)
    mem[to_end < 24] += g.mem_widen_c
    return pd.DataFrame(
        {
            "timestamp": T0 + pd.to_timedelta(h, unit="h"),
            "hostname": g.host,
            "gpu_uuid": g.uuid,
            "gpu_index": g.index,
            "model_name": g.model,
            "gpu_temp_c": temp,
            "power_w": power,
            "memory_temp_c": mem if g.mem else np.nan,
        }
    )


def node(host: str, n: int = 4, **kw: object) -> list[Gpu]:
    return [Gpu(host, i, **kw) for i in range(n)]  # type: ignore[arg-type]


def features(gpus: list[Gpu], drop: tuple[str, ...] = ()) -> pd.DataFrame:
    frame = validate(pd.concat([rows(g, k) for k, g in enumerate(gpus)], ignore_index=True), source="test")
    f = build_features(frame.drop(columns=list(drop)), CUTOFF)
    return f.set_index("gpu_uuid")


def uuids(host: str, n: int = 4) -> list[str]:
    return [f"GPU-{host}-{i}" for i in range(n)]


# -- (a) a node running hot together ----------------------------------------------------------


def test_a_node_heating_together_is_a_node_finding_not_a_gpu_one() -> None:
    f = features([*node("node-a", hot_c=8.0), *node("node-b")])
    a, b = f.loc[uuids("node-a")], f.loc[uuids("node-b")]
    assert (a["temp_excess_own_z"] > 5).all(), "8 C at a noise of 1 C: each GPU's own z is high"
    assert (a["temp_excess_vs_node_z"].abs() < 1.5).all(), "but none stands out from its node"
    assert (a["node_heat_z"] > 5).all()
    assert (a["node_hot_gpus"] == 4).all() and (a["node_gpus"] == 4).all()
    assert (b["temp_excess_own_z"].abs() < 2).all()
    assert (b["node_heat_z"].abs() < 1.5).all() and (b["node_hot_gpus"] == 0).all()


@pytest.mark.parametrize("hot_hours", [6, 20])
def test_own_z_is_the_excess_over_the_gpus_own_sigma(hot_hours: int) -> None:
    """8 C at a noise of 1 C is 8 σ, however long within the last day: the baseline is the
    30 days before the last day, so the heat itself neither moves its mean nor widens its σ.
    Over a baseline of 29 days that is as rare as 5.7 σ of a normal (`as_rare`)."""
    gpus = [*node("node-a"), *node("node-b")]
    gpus[0] = Gpu("node-a", 0, hot_c=8.0, hot_hours=hot_hours)
    z = features(gpus).loc["GPU-node-a-0", "temp_excess_own_z"]
    want = float(as_rare(np.array([8.0]), np.array([29.0]))[0])
    assert want * 0.85 < z < want * 1.15


def test_the_load_share_says_how_far_from_its_baseline_the_heat_is_judged() -> None:
    """The 6 h power over the baseline's mean power (about 300 W here): an idle GPU's heat is its
    fitted line extrapolated far down, which the policy waits longer on (`conditions.light_load`)."""
    gpus = [*node("node-a"), *node("node-b")]
    gpus[0] = Gpu("node-a", 0, idle_hours=8)
    gpus[1] = Gpu("node-a", 1, full_load_hours=6)
    share = features(gpus)["heat_load_share"]
    assert 0.17 < share["GPU-node-a-0"] < 0.23, "60 W against about 300 W"
    assert 2.1 < share["GPU-node-a-1"] < 2.6, "700 W against about 300 W"
    usual = share.drop(["GPU-node-a-0", "GPU-node-a-1"])
    assert ((usual > 0.6) & (usual < 1.4)).all()
    no_power = features(gpus, drop=("power_w",))
    assert no_power["heat_load_share"].isna().all()


def test_as_rare_is_the_student_t_prediction_tail() -> None:
    """A z over n baseline days is t-distributed with n - 1 degrees of freedom, after the
    prediction interval's sqrt(1 + 1/n): the normal z with the same tail."""
    z = np.array([-4.0, -1.0, 0.0, 1.5, 3.0, 8.0, np.nan])
    for days in (3.0, 7.0, 29.0):
        got = as_rare(z, np.full(len(z), days))
        tail = stats.t.sf(np.abs(z[:-1]) / np.sqrt(1 + 1 / days), days - 1)
        assert np.allclose(stats.norm.sf(np.abs(got[:-1])), tail, rtol=1e-6)
        assert np.array_equal(np.sign(got[:-1]), np.sign(z[:-1])) and np.isnan(got[-1])
    # A week's baseline needs more heat for the same rarity than a month's; a long one is the normal.
    assert as_rare(np.array([3.0]), np.array([7.0]))[0] < as_rare(np.array([3.0]), np.array([29.0]))[0] < 3.0
    assert as_rare(np.array([3.0]), np.array([1e6]))[0] == pytest.approx(3.0, abs=1e-3)
    assert np.isfinite(as_rare(np.array([1e6]), np.array([29.0]))).all()


def test_the_same_heat_is_less_unusual_on_a_gpu_installed_last_week() -> None:
    """8 C at a noise of 1 C: a GPU with a week behind it is less sure it is unusual than one
    with a month (its baseline's mean and σ are rougher), so its z is lower."""
    old, young = Gpu("node-a", 0, hot_c=8.0), Gpu("node-a", 0, hot_c=8.0)
    zs = []
    for g, days in ((old, HOURS), (young, 8 * 24)):
        frame = validate(
            pd.concat([rows(x, k) for k, x in enumerate([g, *node("node-a")[1:], *node("node-b")])]), source="test"
        )
        frame = frame[(frame["gpu_uuid"] != g.uuid) | (frame["timestamp"] > CUTOFF - pd.Timedelta(hours=days))]
        zs.append(build_features(frame.reset_index(drop=True), CUTOFF).set_index("gpu_uuid").loc[g.uuid])
    assert 2.5 < zs[1]["temp_excess_own_z"] < zs[0]["temp_excess_own_z"] - 1.0
    assert zs[1]["mem_spread_z"] <= zs[0]["mem_spread_z"] + 0.5


def test_node_values_are_the_same_for_every_gpu_of_the_node() -> None:
    f = features([*node("node-a", hot_c=8.0), *node("node-b")])
    for host in ("node-a", "node-b"):
        sub = f.loc[uuids(host)]
        assert sub["node_heat_z"].nunique() == 1
        assert sub["node_heat_z"].iloc[0] == pytest.approx(sub["temp_excess_own_z"].median())


# -- (b) one GPU getting hotter ---------------------------------------------------------------


def test_one_gpu_heating_stands_out_from_its_node() -> None:
    gpus = [*node("node-a"), *node("node-b")]
    gpus[1] = Gpu("node-a", 1, hot_c=8.0)
    f = features(gpus)
    hot, rest = f.loc["GPU-node-a-1"], f.loc[["GPU-node-a-0", "GPU-node-a-2", "GPU-node-a-3"]]
    assert hot["temp_excess_own_z"] > 5
    assert hot["temp_excess_vs_node_z"] > 5
    assert (rest["temp_excess_vs_node_z"].abs() < 1.5).all()
    assert abs(hot["node_heat_z"]) < 1.5, "one hot GPU does not make a hot node"
    assert hot["node_hot_gpus"] == 1
    # The day's excess: 8 C over 6 of its 24 hours, a quarter as large but still standing out.
    assert hot["temp_excess_vs_node_z_1d"] > 1.0
    assert hot["temp_excess_vs_node_z_1d"] > rest["temp_excess_vs_node_z_1d"].max() + 1.0
    assert hot["temp_excess_vs_node_z_1d"] < hot["temp_excess_vs_node_z"]


def test_a_gpu_cooler_than_its_node_is_negative() -> None:
    gpus = [*node("node-a"), *node("node-b")]
    gpus[2] = Gpu("node-a", 2, hot_c=-8.0)
    f = features(gpus)
    assert f.loc["GPU-node-a-2", "temp_excess_vs_node_z"] < -5
    assert f.loc["GPU-node-a-2", "node_hot_gpus"] == 0


# -- (c) scale-free ---------------------------------------------------------------------------


def _one_hot(noise: float, hot_c: float) -> pd.Series:
    gpus = [*node("node-a", noise=noise), *node("node-b", noise=noise)]
    gpus[1] = Gpu("node-a", 1, noise=noise, hot_c=hot_c)
    return features(gpus).loc["GPU-node-a-1"]


def test_z_is_in_units_of_the_gpus_own_sigma() -> None:
    quiet, noisy = _one_hot(1.0, 8.0), _one_hot(2.0, 8.0)
    # Same heat, twice the noise: half the z, not the same (°C) nor a tenth.
    for name in ("temp_excess_own_z", "temp_excess_vs_node_z"):
        assert noisy[name] == pytest.approx(quiet[name] / 2, rel=0.3), name
    # Heat and noise both doubled: the same z.
    scaled = _one_hot(2.0, 16.0)
    for name in ("temp_excess_own_z", "temp_excess_vs_node_z"):
        assert scaled[name] == pytest.approx(quiet[name], rel=0.2), name
        assert 4 < scaled[name] < 12, name


# -- (d) heat sinks differ --------------------------------------------------------------------


def test_a_different_heat_sink_under_a_new_load_does_not_stand_out() -> None:
    gpus = [*node("node-a"), *node("node-b")]
    # Twice the degrees per watt, and at 700 W for the last 6 h instead of 100-500 W: 30 C
    # warmer than its baseline mean, all of it explained by its own slope.
    gpus[1] = Gpu("node-a", 1, r=0.08, full_load_hours=6)
    f = features(gpus)
    odd = f.loc["GPU-node-a-1"]
    assert abs(odd["temp_excess_own_z"]) < 2
    assert abs(odd["temp_excess_vs_node_z"]) < 2
    assert abs(odd["temp_excess_vs_node_z_1d"]) < 2
    assert odd["node_hot_gpus"] == 0


def test_a_heat_sink_that_gets_worse_still_stands_out_under_a_new_load() -> None:
    """The slope explains load, not a heat sink that degrades: 8 C more at the same power."""
    gpus = [*node("node-a"), *node("node-b")]
    gpus[1] = Gpu("node-a", 1, r=0.08, full_load_hours=6, hot_c=8.0)
    assert features(gpus).loc["GPU-node-a-1", "temp_excess_vs_node_z"] > 5


# -- (e) a node with few GPUs scored ----------------------------------------------------------


def test_a_node_with_two_gpus_is_measured_against_its_models_gpus() -> None:
    f = features([*node("node-a"), *node("node-b"), *node("node-c", n=2, hot_c=8.0)])
    c = f.loc[uuids("node-c", 2)]
    # Against its own node (both hot) it would be ~0; against the model's 10 GPUs it is hot.
    assert (c["temp_excess_vs_node_z"] > 4).all()
    assert c["node_heat_z"].isna().all(), "too few GPUs for a node finding"
    assert (c["node_gpus"] == 2).all() and (c["node_hot_gpus"] == 2).all()
    # The 4-GPU nodes are still measured against their own node.
    assert (f.loc[uuids("node-a"), "node_gpus"] == 4).all()
    assert f.loc[uuids("node-a"), "node_heat_z"].notna().all()


def test_gpus_that_stopped_reporting_do_not_count_for_their_node() -> None:
    a = node("node-a", hot_c=8.0)
    a[2], a[3] = Gpu("node-a", 2, stops_hours_before=72), Gpu("node-a", 3, stops_hours_before=72)
    f = features([*a, *node("node-b"), *node("node-c")])
    assert "GPU-node-a-2" not in f.index  # stale: not scored
    hot = f.loc[["GPU-node-a-0", "GPU-node-a-1"]]
    assert (hot["node_gpus"] == 2).all()
    assert (hot["temp_excess_vs_node_z"] > 4).all()
    assert hot["node_heat_z"].isna().all()


def test_peers_are_the_gpus_of_the_same_model() -> None:
    """A lone hot pair of A100s has no A100 peers to stand out from: the median is their own."""
    pair = [Gpu("node-c", i, hot_c=8.0, model=A100) for i in range(2)]
    f = features([*node("node-a"), *node("node-b"), *pair])
    assert (f.loc[uuids("node-c", 2), "temp_excess_vs_node_z"].abs() < 0.5).all()


# -- (f, g) memory ----------------------------------------------------------------------------


def test_memory_core_spread_widening_on_one_gpu() -> None:
    gpus = [*node("node-a"), *node("node-b")]
    gpus[3] = Gpu("node-a", 3, mem_widen_c=10.0)
    f = features(gpus)
    assert f.loc["GPU-node-a-3", "mem_spread_z"] > 4
    others = f.drop(index="GPU-node-a-3")["mem_spread_z"]
    assert others.notna().all() and (others.abs() < 2).all()
    # Memory alone: the core's excess is untouched.
    assert abs(f.loc["GPU-node-a-3", "temp_excess_own_z"]) < 2


def test_a_missing_memory_sensor_leaves_the_spread_unknown() -> None:
    """A GPU whose memory sensor reads nothing has an unknown spread (NaN), not "no change" (0):
    the heads (trained on fleets lacking the sensor on up to 30 % of their GPUs) judge it by its
    core, and a GPU with the sensor whose memory runs as usual stays distinct from it."""
    gpus = [*node("node-a"), *node("node-b")]
    gpus[0] = Gpu("node-a", 0, mem=False)
    f = features(gpus)
    assert np.isnan(f.loc["GPU-node-a-0", "mem_spread_z"])
    assert f.drop(index="GPU-node-a-0")["mem_spread_z"].notna().all()
    assert np.isfinite(f.loc["GPU-node-a-0", "temp_excess_own_z"])


def test_a_history_without_memory_temperature() -> None:
    f = features([*node("node-a"), *node("node-b")], drop=("memory_temp_c",))
    assert f["mem_spread_z"].isna().all()
    assert f["temp_excess_own_z"].notna().all()


def test_a_history_without_power_has_no_heat_features() -> None:
    f = features([*node("node-a"), *node("node-b")], drop=("power_w",))
    assert f[list(HEAT)].isna().all().all()


@pytest.mark.parametrize(("age_h", "known"), [(12, False), (3 * 24 + 12, False), (4 * 24 + 12, True)])
def test_a_young_gpu_is_unknown(age_h: int, known: bool) -> None:
    """A GPU that has reported for a few days only (just replaced) has no baseline worth the
    name: its z-scores are unknown, not 0, and its node is measured without it."""
    young = Gpu("node-a", 0, hot_c=8.0)
    frame = validate(
        pd.concat([rows(g, k) for k, g in enumerate([young, *node("node-a", 4)[1:], *node("node-b")])]),
        source="test",
    )
    frame = frame[(frame["gpu_uuid"] != young.uuid) | (frame["timestamp"] > CUTOFF - pd.Timedelta(hours=age_h))]
    f = build_features(frame.reset_index(drop=True), CUTOFF).set_index("gpu_uuid")
    heat = f.loc[young.uuid, ["temp_excess_own_z", "temp_excess_vs_node_z", "temp_excess_vs_node_z_1d", "mem_spread_z"]]
    assert heat.notna().all() if known else heat.isna().all()
    if known:  # 8 σ over a baseline of 3.5 days is as rare as 2.5 σ of a normal (as_rare)
        assert heat["temp_excess_own_z"] > 2
    assert f.loc[uuids("node-b"), "temp_excess_own_z"].notna().all()
    assert f.loc[young.uuid, "node_gpus"] == (4 if known else 3)


# -- (e) what the heads learn from: hotter than both its past and its node ---------------------


def test_heat_excess_is_hot_against_both_its_past_and_its_node() -> None:
    """A failing heat sink is hotter than its past and its node; a node's air heats every GPU
    against its past but none against its node; a node that cools leaves a GPU at its usual
    heat standing out of it, not hotter than its past."""
    failing = Gpu("node-a", 0, hot_c=6.0)
    cooled = [Gpu("node-c", i, hot_c=-6.0) for i in range(1, 4)]
    f = features([failing, *node("node-a", 4)[1:], *node("node-b", hot_c=8.0), Gpu("node-c", 0), *cooled])
    assert f.loc[failing.uuid, "heat_excess_z"] > 3
    assert (f.loc[uuids("node-b"), "heat_excess_z"] < 1).all(), "node-wide heat: no GPU of it"
    assert f.loc["GPU-node-c-0", "temp_excess_vs_node_z"] > 3, "it stands out of its cooled node ..."
    assert f.loc["GPU-node-c-0", "heat_excess_z"] < 1, "... but is no hotter than its past"
    assert (f[["heat_excess_z", "heat_excess_z_1d"]].dropna() >= 0).all().all()


def test_an_even_node_incident_does_not_make_a_quiet_sensor_stand_out() -> None:
    """The node's air adds the same °C to its GPUs: measured in °C first, a GPU with a quiet
    sensor (small σ) stands out no more than its noisy neighbours."""
    gpus = [Gpu("node-a", 0, noise=0.3, hot_c=8.0), *[Gpu("node-a", i, noise=1.5, hot_c=8.0) for i in (1, 2, 3)]]
    f = features([*gpus, *node("node-b")])
    assert f.loc["GPU-node-a-0", "temp_excess_own_z"] > 6, "8 °C is many of its own σ (16, as rare as 7.9)"
    assert abs(f.loc["GPU-node-a-0", "temp_excess_vs_node_z"]) < 1.5


def test_a_load_the_baseline_never_saw_widens_the_yardstick() -> None:
    """A GPU that ran 100-500 W for a month and now runs at 700 W: its slope is known only so
    well, so the same 4 °C weighs less than at a load it knows; a failing one at that load still shows."""
    heavy = Gpu("node-a", 0, full_load_hours=24, hot_c=4.0)
    usual = Gpu("node-b", 0, hot_c=4.0)
    failing = Gpu("node-c", 0, full_load_hours=24, hot_c=15.0)
    f = features([heavy, *node("node-a", 4)[1:], usual, *node("node-b", 4)[1:], failing, *node("node-c", 4)[1:]])
    assert f.loc[heavy.uuid, "temp_excess_own_z"] < f.loc[usual.uuid, "temp_excess_own_z"]
    assert f.loc[failing.uuid, "heat_excess_z"] > 3


def test_throttling_counts_beyond_its_own_month_and_its_node() -> None:
    """In a hot aisle a healthy GPU throttles every afternoon; a node's heat throttles all its
    GPUs; a failing heat sink starts throttling on its own."""
    frame = validate(pd.concat([rows(g, k) for k, g in enumerate([*node("node-a"), *node("node-b")])]),
                     source="test")  # fmt: skip
    hour = (frame["timestamp"] - T0) / pd.Timedelta(hours=1)
    last_day = hour > HOURS - 24
    afternoons = (hour % 24).between(13, 17)
    throttled = (
        (frame["gpu_uuid"].eq("GPU-node-a-0") & afternoons)  # always, healthy
        | (frame["gpu_uuid"].eq("GPU-node-a-1") & last_day & (hour % 3 == 0))  # new
        | (frame["hostname"].eq("node-b") & last_day & (hour % 2 == 0))  # its whole node, new
    )
    frame["clocks_event_reasons"] = np.where(throttled, 0x20, 0x0).astype(float)
    f = build_features(frame.reset_index(drop=True), CUTOFF).set_index("gpu_uuid")
    assert f.loc["GPU-node-a-0", "throttle_share_1d"] > 0.15
    assert f.loc["GPU-node-a-0", "throttle_new_1d"] < 0.02
    assert f.loc["GPU-node-a-1", "throttle_new_1d"] > 0.2  # a third of the day, less its node's median
    assert (f.loc[uuids("node-b"), "throttle_new_1d"] == 0).all()
    assert (f.loc[uuids("node-b"), "throttle_share_1d"] > 0.4).all()


# -- the heat over its node's, in its own spread of that difference ------------------------------


def test_heat_over_the_node_in_its_own_spread_stands_out_for_one_gpu_not_for_a_node() -> None:
    gpus = [*node("node-a"), *node("node-b", hot_c=8.0)]
    gpus[1] = Gpu("node-a", 1, hot_c=8.0)
    f = features(gpus)
    assert f.loc["GPU-node-a-1", "heat_vs_node_own_z"] > 5
    assert (f.loc[["GPU-node-a-0", "GPU-node-a-2", "GPU-node-a-3"], "heat_vs_node_own_z"] < 2).all()
    assert (f.loc[uuids("node-b"), "heat_vs_node_own_z"] < 2).all(), "a node heating together is not one GPU's"


def test_heat_over_the_node_is_not_lifted_by_its_own_heat_sink_under_a_new_load() -> None:
    gpus = [*node("node-a"), *node("node-b")]
    gpus[1] = Gpu("node-a", 1, r=0.08, full_load_hours=6)
    assert features(gpus).loc["GPU-node-a-1", "heat_vs_node_own_z"] < 2
    gpus[1] = Gpu("node-a", 1, r=0.08, full_load_hours=6, hot_c=8.0)
    assert features(gpus).loc["GPU-node-a-1", "heat_vs_node_own_z"] > 5


def test_heat_over_the_node_sees_through_a_room_that_swings() -> None:
    """The room's air swings ±6 °C by the day and drifts: it widens a GPU's own spread (its own
    past) but cancels against its node, so 4 °C more on one GPU stands out only there."""
    gpus = node("node-a")
    gpus[1] = Gpu("node-a", 1, hot_c=4.0, noise=0.5)
    gpus = [g if g.index == 1 else Gpu("node-a", g.index, noise=0.5) for g in gpus]
    frame = pd.concat([rows(g, k) for k, g in enumerate(gpus)], ignore_index=True)
    hours = (frame["timestamp"] - T0) / pd.Timedelta(hours=1)
    frame["gpu_temp_c"] += 6.0 * np.sin(2 * np.pi * hours / 24) + 4.0 * np.sin(2 * np.pi * hours / (24 * 9))
    f = build_features(validate(frame, source="test"), CUTOFF).set_index("gpu_uuid").loc["GPU-node-a-1"]
    assert f["heat_vs_node_own_z"] > 4
    assert f["temp_excess_own_z"] < 2


@pytest.mark.parametrize(("age_h", "known"), [(6 * 24, False), (8 * 24 + 1, True)])
def test_heat_over_the_node_needs_a_week_and_a_day(age_h: int, known: bool) -> None:
    frame = pd.concat([rows(g, k) for k, g in enumerate(node("node-a"))], ignore_index=True)
    young = frame[frame["timestamp"] > CUTOFF - pd.Timedelta(hours=age_h)]
    f = build_features(validate(young, source="test"), CUTOFF)
    assert f["heat_vs_node_own_z"].notna().all() == known

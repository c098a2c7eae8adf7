"""The simulated world's knobs (`Domain`), the physics they drive, and the families of worlds.

Most checks compare twin fleets: same seed, one domain knob changed. The domain's own
draws come from a generator of their own, so everything else (workload, power, noise,
failures) is the same sample for sample and the difference is the knob's effect alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.config import DAY, HOUR, SimConfig
from simulator.domain import Domain
from simulator.families import (
    FAMILIES,
    TRAINING_MEMTEMP_MISSING,
    UNSEEN,
    family,
    family_config,
    prior_fleets,
    training_config,
)
from simulator.fleet import XID_REMAP, FleetSim
from simulator.run import simulate

ROOT = Path(__file__).resolve().parents[2]
SHARES = (
    "sbe_burst_share", "burst_remap_share", "hot_node_share", "reboot_replay_share", "flaky_link_share",
    "downtrained_share", "memtemp_missing_share", "dropout", "bad_node_share", "training_share", "shift_training_share",
    "pcie_narrow_at",
)  # fmt: skip
ZERO_KNOBS = (
    "sensor_offset_c", "resistance_spread", "ambient_swing_c", "node_incidents_per_year",
    "fan_failures_per_year", "shift_day", "flaky_link_share", "bad_node_share", "burst_remap_share",
)  # fmt: skip
"""Knobs whose default (0) turns a world effect off: they must draw nothing then."""


def cfg(domain: Domain, nodes: int = 4, per: int = 4, seed: int = 3, **kw: object) -> SimConfig:
    return SimConfig(nodes=nodes, gpus_per_node=per, seed=seed, domain=domain, **kw)  # type: ignore[arg-type]


def run(fleet: FleetSim, steps: int, dt: float = HOUR) -> list[dict[str, np.ndarray]]:
    out = []
    for _ in range(steps):
        fleet.step(dt)
        out.append(fleet.values())
    return out


def stack(values: list[dict[str, np.ndarray]], name: str) -> np.ndarray:
    """(steps, GPUs) of one value."""
    return np.stack([v[name] for v in values])


def fresh_state(seed: int) -> dict:
    """The state of the domain's generator before it drew anything."""
    return np.random.default_rng([seed, 0xD0]).bit_generator.state


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temp_noise_c": -0.1}, "temp_noise_c must be >= 0"),
        ({"node_incidents_per_year": float("nan")}, "node_incidents_per_year must be >= 0"),
        ({"inlet_c": (float("nan"), 24.0)}, "inlet_c must be >= 0"),
        ({"node_incident_c": (-1.0, 3.0)}, "node_incident_c must be >= 0"),
        ({"inlet_c": (24.0, 19.0)}, "inlet_c must be a (low, high) range"),
        ({"fan_repair_hours": (12.0, 24.0, 48.0)}, "fan_repair_hours must be a (low, high) range"),
        ({"bad_node_factor": 0.5}, "bad_node_factor must be >= 1"),
        *(({name: 1.01}, f"domain {name} is a share") for name in SHARES),
    ],
)
def test_invalid_domains_are_refused_with_the_knob_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Domain(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"job_days": 0.0}, {"idle_hours": 0.0}, {"sbe_burst_size": (10.0, 10.0)}, {"reboot_replay_size": (50.2, 50.8)}],
    ids=["job_days", "idle_hours", "sbe_burst_size", "reboot_replay_size"],
)
def test_a_domain_that_cannot_be_stepped_is_refused_up_front(kwargs: dict) -> None:
    """Refused when made, with the knob named, not a crash deep in a step hours later."""
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Domain(**kwargs)


def test_edges_of_the_valid_ranges_are_accepted() -> None:
    Domain(**{name: 1.0 for name in SHARES}, inlet_c=(20.0, 20.0), bad_node_factor=1.0, temp_noise_c=0.0)
    Domain(**{name: 0.0 for name in SHARES})


def test_share_message_gives_the_value() -> None:
    with pytest.raises(ValueError, match=r"flaky_link_share is a share: between 0 and 1, got 2\.0"):
        Domain(flaky_link_share=2.0)


def test_every_share_is_checked() -> None:
    """A new share-like knob (a name ending in _share) must be in the validator's list too."""
    shares = {f.name for f in fields(Domain) if f.name.endswith("_share")}
    for name in shares:
        with pytest.raises(ValueError, match=name):
            Domain(**{name: 1.5})


# -- a default world draws nothing of its own -------------------------------------------------


def test_default_domain_never_draws_from_the_domain_generator() -> None:
    fleet = FleetSim(cfg(Domain(), random_failures=True, acceleration=20))
    run(fleet, 48)
    assert fleet.wrng.bit_generator.state == fresh_state(3)


@pytest.mark.parametrize("knob", ZERO_KNOBS)
def test_a_knob_left_at_zero_draws_nothing(knob: str) -> None:
    fleet = FleetSim(cfg(Domain(**{knob: 0.0}), random_failures=True, acceleration=20))
    run(fleet, 24)
    assert fleet.wrng.bit_generator.state == fresh_state(3)


def test_default_domain_fleet_equals_an_explicit_default_domain() -> None:
    a = run(FleetSim(SimConfig(nodes=2, gpus_per_node=4, seed=5)), 12)
    b = run(FleetSim(SimConfig(nodes=2, gpus_per_node=4, seed=5, domain=Domain())), 12)
    for k in a[-1]:
        np.testing.assert_array_equal(stack(a, k), stack(b, k), err_msg=k)


def test_a_zero_knob_gives_identical_frames() -> None:
    zeros = Domain(**{k: 0.0 for k in ZERO_KNOBS})
    base = SimConfig(nodes=2, gpus_per_node=4, seed=9, random_failures=True, acceleration=40)
    fa, la = simulate(base, 12)
    fb, lb = simulate(replace(base, domain=zeros), 12)
    pd.testing.assert_frame_equal(fa, fb)
    pd.testing.assert_frame_equal(la, lb)


def test_domain_draws_do_not_disturb_the_fleet_generator() -> None:
    """Turning world effects on leaves every draw of the main generator where it was:
    workload, power, SBEs and failures are the same; only what the effects touch differs."""
    busy = Domain(
        sensor_offset_c=1.0, resistance_spread=0.05, ambient_swing_c=2.0, node_incidents_per_year=50.0,
        fan_failures_per_year=50.0, flaky_link_share=0.5, bad_node_share=0.5,
    )  # fmt: skip
    base = cfg(Domain(), random_failures=True, acceleration=20)
    a, b = FleetSim(base), FleetSim(replace(base, domain=busy))
    va, vb = run(a, 96), run(b, 96)
    for name in ("gpu_util_pct", "power_w", "ecc_sbe_aggregate", "pcie_link_width"):
        np.testing.assert_array_equal(stack(va, name), stack(vb, name), err_msg=name)
    assert [f.gpu_uuid for f in a.failures] == [f.gpu_uuid for f in b.failures]
    assert not np.array_equal(stack(va, "gpu_temp_c"), stack(vb, "gpu_temp_c"))


# -- air and cooling --------------------------------------------------------------------------

INCIDENTS = Domain(
    node_incidents_per_year=365 * 24 / 36,  # one every ~1.5 days per node
    node_incident_c=(7.0, 9.0),
    node_incident_hours=(5.0, 10.0),
)


def test_node_incident_heats_every_gpu_of_its_node_together() -> None:
    base = cfg(Domain(), nodes=4, per=4, seed=11)
    calm, hot = FleetSim(base), FleetSim(replace(base, domain=INCIDENTS))
    per = 4
    tc, th = stack(run(calm, 240), "gpu_temp_c"), stack(run(hot, 240), "gpu_temp_c")
    diff = (th - tc).reshape(240, 4, per)  # (step, node, slot); same workload and noise in both
    warm = diff >= 4.0  # 7-9 C x a share of 0.8-1.2, less 1 for rounding
    cool = np.abs(diff) <= 1.0  # rounding only
    assert np.all(warm | cool), "a GPU ran a little warmer: incidents lift a node by 5.6 C or more"
    per_node = warm.sum(axis=2)
    assert set(np.unique(per_node)) <= {0, per}, "an incident lifted only some GPUs of a node"
    affected = per_node == per
    assert affected.any(axis=0).sum() >= 3, "incidents on several nodes"
    # Node-wide, not fleet-wide: at some time one node is in an incident and another is not.
    assert (affected.any(axis=1) & ~affected.all(axis=1)).any()


def test_node_incident_stands_out_from_its_own_past_and_other_nodes() -> None:
    """Idle GPUs (all spare) hold steady; an incident lifts its node above its own usual."""
    fleet = FleetSim(cfg(INCIDENTS, nodes=4, per=4, seed=11, spare_nodes=4))
    temp = stack(run(fleet, 240), "gpu_temp_c")
    usual = np.median(temp, axis=0)  # incidents cover a small share of the time
    lift = (temp - usual).reshape(240, 4, 4)
    hot = (lift >= 4.0).all(axis=2)  # every GPU of the node at once
    calm = (np.abs(lift) <= 2.0).all(axis=2)
    assert np.all(hot | calm), "a node's GPUs lifted apart, or by less than an incident"
    assert hot.any(axis=0).sum() >= 3
    assert (hot.any(axis=1) & calm.any(axis=1)).any(), "one node lifted while another is not"


def test_incidents_end() -> None:
    fleet = FleetSim(cfg(INCIDENTS, nodes=4, per=2, seed=2))
    lifted = []
    for _ in range(240):
        fleet.step(HOUR)
        lifted.append(fleet.incident_left_s > 0)
    share = np.mean(lifted)
    # ~7.5 h out of every ~36 + 7.5 h: an incident never lasts for good.
    assert 0.05 < share < 0.4
    assert np.all(np.diff(np.stack(lifted).astype(int), axis=0).min(axis=0) == -1)


BUSY_AND_IDLE = Domain(job_days=1.0, idle_hours=12.0)  # long idle gaps: loaded and idle samples
FANS = replace(
    BUSY_AND_IDLE, fan_failures_per_year=365 * 24 / 48, fan_failure_factor=(1.4, 1.5), fan_repair_hours=(12.0, 24.0)
)


def test_fan_failure_raises_temperature_with_the_load() -> None:
    base = cfg(BUSY_AND_IDLE, nodes=4, per=4, seed=4, models={"H100": 1.0})
    ok, broken = FleetSim(base), FleetSim(replace(base, domain=FANS))
    va, vb, fan = [], [], []
    for _ in range(240):
        ok.step(HOUR)
        broken.step(HOUR)
        va.append(ok.values())
        vb.append(broken.values())
        fan.append(broken.fan_factor[broken.node].copy())
    diff = stack(vb, "gpu_temp_c") - stack(va, "gpu_temp_c")
    power, factor = stack(vb, "power_w"), np.stack(fan)
    np.testing.assert_array_equal(power, stack(va, "power_w"))  # the same load in both fleets
    failed = factor > 1.0
    assert failed.any() and (~failed).any()
    assert np.all(np.abs(diff[~failed]) <= 1.0)
    # The heat sink's rise grows by the factor: R x (factor - 1) x P more, i.e. 11+ C at 680 W.
    expected = broken.resistance * (factor - 1.0) * power
    np.testing.assert_allclose(diff[failed], expected[failed], atol=1.01)
    loaded, idle = failed & (power > 600), failed & (power < 100)
    assert loaded.any() and idle.any()
    assert diff[loaded].min() >= 8.0
    assert diff[idle].max() <= 3.0


def test_failed_fans_are_repaired() -> None:
    fleet = FleetSim(cfg(FANS, nodes=4, per=2, seed=4))
    factor = []
    for _ in range(240):
        fleet.step(HOUR)
        factor.append(fleet.fan_factor.copy())
    failed = np.stack(factor) > 1.0
    # A failure every ~2 days, repaired in 12-24 h: failed about a quarter of the time, never for good.
    assert 0.1 < failed.mean() < 0.5
    assert np.all(np.diff(failed.astype(int), axis=0).min(axis=0) == -1), "every node had a fan replaced"
    assert np.all((np.stack(factor) == 1.0) | ((np.stack(factor) >= 1.4) & (np.stack(factor) <= 1.5)))


def test_ambient_swing_follows_the_day() -> None:
    base = cfg(Domain(), nodes=2, per=2, seed=6)
    a, b = FleetSim(base), FleetSim(replace(base, domain=Domain(ambient_swing_c=5.0)))
    diff = stack(run(b, 48), "gpu_temp_c") - stack(run(a, 48), "gpu_temp_c")
    assert diff.max() >= 4.0 and diff.min() <= -4.0
    # Twelve hours apart the swing is reversed, the same for every GPU.
    np.testing.assert_allclose(diff[:24] + diff[12:36], 0.0, atol=2.0)
    assert np.all(np.ptp(diff, axis=1) <= 2.0)


# -- sensors ----------------------------------------------------------------------------------


def test_sensor_offset_moves_the_reading_not_the_physics() -> None:
    base = cfg(Domain(), nodes=2, per=8, seed=8)
    a, b = FleetSim(base), FleetSim(replace(base, domain=Domain(sensor_offset_c=3.0)))
    va, vb = run(a, 72), run(b, 72)
    for k in va[-1]:
        if k != "gpu_temp_c":
            np.testing.assert_array_equal(stack(va, k), stack(vb, k), err_msg=k)
    np.testing.assert_array_equal(a.temp_c, b.temp_c)
    diff = stack(vb, "gpu_temp_c") - stack(va, "gpu_temp_c")
    offset = b.sensor_offset_c
    assert offset.std() > 1.5, "offsets drawn with sigma 3"
    assert np.all(np.abs(diff - offset) <= 1.0)  # a fixed offset per GPU, then rounded


def test_resistance_spread_changes_each_gpus_rise() -> None:
    base = cfg(Domain(), nodes=2, per=8, seed=8, models={"H100": 1.0})
    a, b = FleetSim(base), FleetSim(replace(base, domain=Domain(resistance_spread=0.2)))
    va, vb = run(a, 48), run(b, 48)
    ratio = b.resistance / a.resistance
    assert ratio.std() > 0.05 and np.all(ratio > 0)
    diff = stack(vb, "gpu_temp_c") - stack(va, "gpu_temp_c")
    expected = (b.resistance - a.resistance) * stack(va, "power_w")
    np.testing.assert_allclose(diff, expected, atol=1.01)


# -- memory ------------------------------------------------------------------------------------

BURSTY = Domain(sbe_burst_share=0.5, sbe_bursts_per_day=2.0, burst_remap_share=0.5)


def test_healthy_bursts_leave_pending_remaps_that_a_reboot_applies() -> None:
    """A burst on a healthy GPU may leave a weak row: a correctable remap, pending until the node
    reboots, with its XID 63; the GPU never fails, and everything else is the calm twin's."""
    base = cfg(replace(BURSTY, burst_remap_share=0.0), nodes=2, per=8, seed=12, reboot_days=4.0)
    calm, weak = FleetSim(base), FleetSim(replace(base, domain=BURSTY))
    va, vb = run(calm, 240), run(weak, 240)
    # The main generator is untouched: SBEs, power, reboots and failures are the calm fleet's.
    for name in ("ecc_sbe_aggregate", "power_w", "pcie_link_width"):
        np.testing.assert_array_equal(stack(va, name), stack(vb, name), err_msg=name)
    assert [f.gpu_uuid for f in calm.failures] == [f.gpu_uuid for f in weak.failures]
    np.testing.assert_array_equal(stack(va, "remapped_rows_correctable"), 0.0)  # calm: no remap on a healthy GPU
    remaps, pending = stack(vb, "remapped_rows_correctable"), stack(vb, "row_remap_pending")
    burst = np.diff(stack(vb, "ecc_sbe_aggregate"), axis=0, prepend=0.0) >= BURSTY.sbe_burst_size[0]
    new = np.diff(remaps, axis=0, prepend=0.0) > 0
    assert new.sum() >= 10, f"~half of ~20 bursts a GPU over 10 days, got {int(new.sum())}"
    assert not (new & ~burst).any(), "a remap only where a burst was"
    assert (burst & ~new).any(), "not every burst leaves one"
    assert weak.sbe_burst_gpu[remaps[-1] > 0].all(), "only GPUs with bursts"
    # Pending from the remap until a reboot applies it; a reboot clears them all.
    assert np.all(pending[new] == 1)
    cleared = (np.diff(pending, axis=0) < 0).any(axis=0)
    assert cleared.any(), "a reboot in 10 days at one per 4 days applies the pending remaps"
    xids = {(g, c) for g, c, _ in weak.drain_events()}
    assert all((int(g), XID_REMAP) in xids for g in np.flatnonzero(remaps[-1] > 0))
    assert not np.any(stack(vb, "remapped_rows_uncorrectable")), "a weak row, not an uncorrectable error"


# -- links ------------------------------------------------------------------------------------

FLAKY = Domain(flaky_link_share=0.5, flaky_bursts_per_day=3.0, flaky_burst_size=(50.0, 100.0), reboot_replay_share=0.0)


def test_flaky_links_replay_on_healthy_gpus_that_never_fail() -> None:
    base = cfg(replace(FLAKY, flaky_link_share=0.0), nodes=2, per=8, seed=12, reboot_days=1e6)
    calm, flaky = FleetSim(base), FleetSim(replace(base, domain=FLAKY))
    va, vb = run(calm, 240), run(flaky, 240)
    which = flaky.flaky_link
    assert which.any() and (~which).any()
    ra, rb = stack(va, "pcie_replay_count"), stack(vb, "pcie_replay_count")
    new = np.diff(rb - ra, axis=0)
    np.testing.assert_array_equal(new[:, ~which], 0.0)  # healthy links replay as in the calm fleet
    bursts = (new[:, which] > 0).sum(axis=0)
    assert np.all(bursts >= 10), f"~30 bursts in 10 days at 3 a day, got {bursts}"
    assert new[new > 0].min() >= 50 and new.max() <= 100  # burst sizes from the range
    # Never failing: no fault, full width, no XID, the same as the calm fleet.
    assert not flaky.failures and not flaky.lost.any()
    for k in ("pcie_link_width", "pcie_link_gen", "xid"):
        np.testing.assert_array_equal(stack(va, k), stack(vb, k), err_msg=k)


def test_flaky_links_do_not_change_which_gpus_fail() -> None:
    base = SimConfig(nodes=2, gpus_per_node=8, seed=12, random_failures=True, acceleration=60)
    _, calm = simulate(base, 30)
    _, flaky = simulate(replace(base, domain=FLAKY), 30)
    assert len(calm) > 0
    pd.testing.assert_frame_equal(calm, flaky)


# -- workload ---------------------------------------------------------------------------------

SHIFT = Domain(
    job_days=0.25, idle_hours=1.0, training_share=1.0, training_util=96.0,
    shift_day=5.0, shift_training_share=1.0, shift_training_util=60.0,
)  # fmt: skip


def test_workload_shift_changes_utilisation_after_its_day() -> None:
    fleet = FleetSim(cfg(SHIFT, nodes=4, per=2, seed=1))
    util, kind = [], []
    for _ in range(10 * 24):
        fleet.step(HOUR)
        util.append(fleet.util.copy())
        kind.append(fleet.workload.copy())
    u, w = np.stack(util), np.stack(kind)
    t = np.arange(1, 241)[:, None] * HOUR + 0 * u
    training = w == 0
    before, after = training & (t < 5 * DAY), training & (t >= 5 * DAY + HOUR)
    assert before.sum() > 50 and after.sum() > 50
    assert np.median(u[before]) >= 90
    assert 50 <= np.median(u[after]) <= 70


def test_workload_shift_changes_the_training_share() -> None:
    d = replace(SHIFT, shift_training_util=96.0, shift_training_share=0.0)
    fleet = FleetSim(cfg(d, nodes=4, per=2, seed=1))
    kind = []
    for _ in range(10 * 24):
        fleet.step(HOUR)
        kind.append(fleet.workload[:: fleet.cfg.gpus_per_node].copy())
    w = np.stack(kind)
    assert (w[5 * 24 : 5 * 24 + 6] == 0).any(), "training jobs running at the shift"
    assert not (w[7 * 24 :] == 0).any(), "jobs are ~6 h long: two days after the shift no training is left"
    assert (w[7 * 24 :] == 1).any()


def test_workload_before_the_shift_is_the_unshifted_one() -> None:
    d = replace(SHIFT, shift_day=0.0)
    a = run(FleetSim(cfg(d, nodes=2, per=2, seed=1)), 10 * 24)
    b = run(FleetSim(cfg(SHIFT, nodes=2, per=2, seed=1)), 10 * 24)
    ua, ub = stack(a, "gpu_util_pct"), stack(b, "gpu_util_pct")
    np.testing.assert_array_equal(ua[: 5 * 24 - 1], ub[: 5 * 24 - 1])
    assert not np.array_equal(ua[5 * 24 :], ub[5 * 24 :])


# -- repeat offenders -------------------------------------------------------------------------


def _failures(domain: Domain, seed: int = 5) -> pd.DataFrame:
    c = SimConfig(nodes=4, gpus_per_node=4, seed=seed, random_failures=True, acceleration=20, domain=domain)
    return simulate(c, 30)[1]


def test_bad_nodes_fail_more_often() -> None:
    plain = _failures(Domain(bad_node_share=1.0, bad_node_factor=1.0))
    bad = _failures(Domain(bad_node_share=1.0, bad_node_factor=10.0))
    # 16 GPUs x 2.2 failures/year x 30 days: ~3 at factor 1, ~20 (less repair time) at 10.
    assert len(bad) >= 3 * max(len(plain), 1)
    assert len(bad) >= 10


def test_factor_one_is_the_plain_fleet() -> None:
    pd.testing.assert_frame_equal(_failures(Domain(bad_node_share=1.0)), _failures(Domain()))


def test_failures_concentrate_on_bad_nodes() -> None:
    c = SimConfig(
        nodes=8, gpus_per_node=2, seed=7, random_failures=True, acceleration=20,
        domain=Domain(bad_node_share=0.5, bad_node_factor=15.0),
    )  # fmt: skip
    fleet = FleetSim(c)
    bad_hosts = {fleet.hostnames[k] for k in np.flatnonzero(fleet.bad_node)}
    assert 0 < len(bad_hosts) < 8
    _, failures = simulate(c, 30)
    on_bad = failures["hostname"].isin(bad_hosts)
    assert on_bad.sum() >= 5
    # Per node: a bad node's GPUs fail 15x as often; allow a lot of chance.
    per_bad = on_bad.sum() / len(bad_hosts)
    per_good = (~on_bad).sum() / (8 - len(bad_hosts))
    assert per_bad >= 4 * max(per_good, 0.25)


# -- families ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*FAMILIES, UNSEEN.name])
def test_family_config_is_reproducible_and_seeded(name: str) -> None:
    a, b = family_config(name, 3), family_config(name, 3)
    assert a == b
    assert family_config(name, 4).domain != a.domain
    assert a.seed == 3 and a.random_failures
    small = family_config(name, 3, nodes=5, gpus_per_node=2, acceleration=9.0)
    assert (small.nodes, small.gpus_per_node, small.acceleration) == (5, 2, 9.0)
    assert small.domain == a.domain, "the fleet's size does not change its world"


def test_families_differ_for_the_same_seed() -> None:
    domains = [family_config(name, 1).domain for name in [*FAMILIES, UNSEEN.name]]
    assert len({repr(d) for d in domains}) == len(domains)
    assert family_config("hot-aisle", 1).models != family_config("temperate", 1).models


def test_family_draws_are_the_same_in_another_process() -> None:
    """The seed key must not come from hash(), which Python randomises per process."""
    code = "from simulator.families import family_config; print(repr(family_config('noisy-links', 2).domain))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr(family_config("noisy-links", 2).domain)


def test_family_character() -> None:
    """Families are regions of domain space: a hot aisle has incidents, noisy links flap."""
    for seed in range(5):
        hot, links, temperate = (family_config(n, seed).domain for n in ("hot-aisle", "noisy-links", "temperate"))
        assert hot.node_incidents_per_year >= 4 > temperate.node_incidents_per_year
        assert links.flaky_link_share >= 0.03 > temperate.flaky_link_share
        assert family_config("hbm-bursts", seed).domain.shift_day >= 30


def test_unknown_family_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"no simulator family 'arctic': one of temperate, .*unseen"):
        family_config("arctic", 1)
    with pytest.raises(ValueError, match="arctic"):
        family("arctic")


def test_family_lookup() -> None:
    assert family("unseen") is UNSEEN
    assert UNSEEN.name not in FAMILIES
    assert len(FAMILIES) == 4
    for name, fam in FAMILIES.items():
        assert family(name) is fam and fam.name == name
        assert fam.about, "each family says what it is like"


def test_prior_fleets_cycle_the_families_with_their_names_and_seeds() -> None:
    fleets = prior_fleets(5, seed=20, nodes=1, days=2)
    names = list(FAMILIES)
    assert [n for n, _, _ in fleets] == [f"{names[k % 4]}-{20 + k}" for k in range(5)]
    for _, frame, failures in fleets:
        assert isinstance(frame, pd.DataFrame) and len(frame) > 0
        assert frame["hostname"].nunique() == 1 and frame["gpu_uuid"].nunique() >= 8
        assert {"gpu_uuid", "failed_at", "mode", "hostname"} <= set(failures.columns)


def test_prior_fleets_are_their_training_configs() -> None:
    fleets = prior_fleets(2, seed=7, nodes=2, days=3, families=("hot-aisle", "temperate"), acceleration=30.0)
    assert [n for n, _, _ in fleets] == ["hot-aisle-7", "temperate-8"]
    frame, failures = simulate(training_config("temperate", 8, nodes=2, acceleration=30.0), 3)
    pd.testing.assert_frame_equal(fleets[1][1], frame)
    pd.testing.assert_frame_equal(fleets[1][2], failures)
    assert not fleets[0][1]["gpu_temp_c"].equals(fleets[1][1]["gpu_temp_c"])


@pytest.mark.parametrize("name", list(FAMILIES))
def test_training_fleets_lack_the_memory_sensor_more_widely(name: str) -> None:
    """Only the sensor's availability differs from the family's own fleet of the same seed."""
    shares = []
    for seed in range(40):
        held, train = family_config(name, seed), training_config(name, seed)
        assert train == training_config(name, seed)
        assert replace(train, domain=replace(train.domain, memtemp_missing_share=0.02)) == held
        shares.append(train.domain.memtemp_missing_share)
    lo, hi = TRAINING_MEMTEMP_MISSING
    assert lo <= min(shares) and max(shares) <= hi
    assert max(shares) - min(shares) > 0.6 * (hi - lo), "drawn over the range, not one value"


def test_a_training_fleet_lacks_the_sensor_on_about_its_share_of_gpus() -> None:
    cfg = training_config("temperate", 5, nodes=16)
    frame, _ = simulate(cfg, 1)
    missing = frame.groupby("gpu_uuid")["memory_temp_c"].apply(lambda s: s.isna().all()).mean()
    assert abs(missing - cfg.domain.memtemp_missing_share) < 0.1

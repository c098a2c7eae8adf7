"""A simulated fleet, vectorised over GPUs: workload, thermal physics, counters, faults.

Every value comes from a small physical model: power follows load, temperature
follows power and inlet air, counters only grow (volatile ones reset at reboot).
Faults unfold over a precursor window towards a failure; a share of failures has
no precursor at all; healthy confounders (SBE bursts, hot slots, replay bursts
after reboots, missing samples, unsupported fields) make naive thresholds cry
wolf. Deterministic per seed: the same seed and steps give the same values on any
machine, whatever the wall clock says.

Rates are field statistics from ../shared/REFERENCE.md, times an acceleration
factor so that a few months of a few hundred GPUs hold enough failures to learn from.
"""

from __future__ import annotations

import uuid as uuidlib

import numpy as np

from simulator.config import (
    _CODE_MODE,
    _MODE_CODE,
    DAY,
    HOUR,
    LABEL,
    PRECURSOR_MODES,
    SUDDEN_MODES,
    THROTTLE_HW_THERMAL,
    THROTTLE_SW_POWER,
    THROTTLE_SW_THERMAL,
    XID_CONTAINED,
    XID_DBE,
    XID_GSP_ERROR,
    XID_GSP_TIMEOUT,
    XID_OFF_BUS,
    XID_REMAP,
    XID_REMAP_FAIL,
    XID_SBE_HIGH,
    XID_UNCONTAINED,
    YEAR,
    Failure,
    FaultMode,
    FaultSpec,
    SimConfig,
    SimGpu,
)
from simulator.fabric import NODE_MODES, Fabric
from simulator.kernel_log import LOG_MODES, KernelLog
from simulator.models import GpuModel, get_model
from simulator.remedies import CURED_CODES, Remedies


def _model_arrays(models: list[GpuModel]) -> dict[str, np.ndarray]:
    keys = [
        "power_limit_w", "idle_power_w", "sm_clock_max_mhz", "sm_clock_idle_mhz", "mem_clock_mhz",
        "fb_total_mib", "pcie_gen_max", "pcie_width_max", "slowdown_c", "shutdown_c",
        "thermal_resistance_c_per_w", "nvlinks",
    ]  # fmt: skip
    return {k: np.array([float(getattr(m, k)) for m in models]) for k in keys}


class FleetSim:
    """Nodes x GPUs stepped together; `step(dt)` advances simulated time by dt seconds."""

    def __init__(self, config: SimConfig | None = None, **kw: object) -> None:
        cfg = config if config is not None else SimConfig(**kw)  # type: ignore[arg-type]
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        # The domain's own knobs (incidents, fan failures, flaky links, per-GPU spreads) draw
        # from a generator of their own: a default domain draws nothing from it, so its
        # fleets are the same as before domains existed.
        self.wrng = np.random.default_rng([cfg.seed, 0xD0])
        self.d = cfg.domain
        self.time = cfg.start
        self.n = cfg.nodes * cfg.gpus_per_node
        # Each step draws from the one generator: their order is part of what a seed means,
        # so reordering them changes every seeded fleet.
        self._place_gpus()
        self._place_in_racks()
        self._assign_workload()
        self._start_readings()
        self._start_counters()
        self._train_links()
        self._start_health()
        self._start_world()
        if cfg.random_failures:
            self._schedule_random_failures()

    # -- initial state ------------------------------------------------------
    def _place_gpus(self) -> None:
        """A model per node, every GPU's slot and node, and the identities of the first GPUs."""
        cfg, r = self.cfg, self.rng
        nodes, per, n = cfg.nodes, cfg.gpus_per_node, self.n
        names = list(cfg.models)
        shares = np.array([cfg.models[k] for k in names], dtype=float)
        node_model = r.choice(len(names), nodes, p=shares / shares.sum())
        self.models = [get_model(names[node_model[i // per]]) for i in range(n)]
        self.m = _model_arrays(self.models)
        self.slot = np.tile(np.arange(per), nodes)
        self.node = np.repeat(np.arange(nodes), per)
        self.hostnames = [f"sim-node-{k:02d}" for k in range(nodes)]
        self._generation = np.zeros(n, dtype=np.int64)
        self.repairs = 0
        """How many GPUs have been replaced: identities change only when this does."""
        self.gpus = [self._identity(i) for i in range(n)]

    def _place_in_racks(self) -> None:
        """Where each GPU sits and what air it gets: inlet, slot and memory offsets, dead sensors."""
        cfg, r = self.cfg, self.rng
        nodes, per, n = cfg.nodes, cfg.gpus_per_node, self.n
        # Inlet air by rack position (4 nodes a rack, top runs warmer), hot spots, and
        # slot offsets inside a node (REFERENCE.md: ~14 C spread between slots).
        rack_pos = np.arange(nodes) % 4
        d = self.d
        hot = r.random(nodes) < d.hot_node_share
        self.hot_node = np.repeat(hot, per)
        self.inlet_c = np.repeat(r.uniform(*d.inlet_c, nodes) + d.rack_gradient_c * rack_pos + d.hot_node_c * hot, per)
        self.slot_offset_c = np.tile(np.linspace(0.0, d.slot_spread_c, per), nodes) + r.normal(0, 1.0, n)
        self.mem_offset_c = r.uniform(9.0, 18.0, n)  # memory above core at idle
        self.memtemp_missing = r.random(n) < d.memtemp_missing_share

    def _assign_workload(self) -> None:
        """The first job of each node (spare nodes idle) and the phase of its daily cycle."""
        cfg, r = self.cfg, self.rng
        nodes, per = cfg.nodes, cfg.gpus_per_node
        # Workload per node: 0 training, 1 inference (diurnal), 2 idle gap between jobs.
        self.workload = np.repeat(r.choice(3, nodes, p=[0.6, 0.3, 0.1]), per)
        self._spare = np.arange(nodes) >= nodes - cfg.spare_nodes
        self.workload[np.repeat(self._spare, per)] = 2
        self.phase = np.repeat(r.uniform(0, DAY, nodes), per)

    def _start_readings(self) -> None:
        """Gauges at rest: idle temperatures, power and clocks; an energy counter already running."""
        m, n = self.m, self.n
        self.temp_c = self.inlet_c + self.slot_offset_c + m["thermal_resistance_c_per_w"] * m["idle_power_w"]
        self.mem_temp_c = self.temp_c + self.mem_offset_c
        self.util = np.zeros(n)
        self.power_w = m["idle_power_w"].copy()
        self.clocks_event_reasons = np.zeros(n)
        self.sm_clock = m["sm_clock_idle_mhz"].copy()
        self.energy_mj = self.rng.uniform(1e9, 5e9, n)

    def _start_counters(self) -> None:
        """Error and violation counters: volatile ones at zero, lifetime ones with a little history."""
        r, n = self.rng, self.n
        self.sbe_vol = np.zeros(n)
        self.dbe_vol = np.zeros(n)
        self.sbe_agg = np.floor(r.exponential(0.3, n))  # most GPUs have logged none
        self.dbe_agg = np.zeros(n)
        self.remap_corr = np.zeros(n)
        self.remap_unc = np.zeros(n)
        self.remap_pending = np.zeros(n)
        self.remap_failure = np.zeros(n)
        self.replays = np.floor(r.exponential(2.0, n))
        self.replay_burst = np.zeros(n)  # replays still to come from a link retrain after reboot
        self.thermal_violation_us = np.zeros(n)
        self.power_violation_us = np.zeros(n)
        self.nvlink_crc = np.zeros(n)

    def _train_links(self) -> None:
        """PCIe links at their maximum, but for a few trained below it."""
        r, n = self.rng, self.n
        # A few links train below their maximum at boot and run so for good: a confounder
        # for any rule that reads a downtrained link as a failing one.
        self.link_width = self.m["pcie_width_max"].copy()
        self.link_gen = self.m["pcie_gen_max"].copy()
        narrow = r.random(n) < self.d.downtrained_share
        by_width = r.random(n) < 0.5
        self.link_width[narrow & by_width] /= 2
        self.link_gen[narrow & ~by_width] -= 1

    def _start_health(self) -> None:
        """No GPU failed or faulty yet; SBE-burst confounders chosen; first reboots scheduled."""
        cfg, r, n = self.cfg, self.rng, self.n
        self.sbe_burst_gpu = r.random(n) < self.d.sbe_burst_share
        self.lost = np.zeros(n, dtype=bool)
        """Stopped answering (fell off the bus or shut down); rows stop at failure."""
        self.failed = np.zeros(n, dtype=bool)
        self.repair_at = np.full(n, np.inf)
        self.last_xid = np.zeros(n)
        self.xid_now = np.zeros(n)  # last XID of the current step (history `xid` column)
        # The fault now unfolding in each slot (mode code 0 = none).
        self.fault_mode = np.zeros(n, dtype=np.int64)
        self.fault_onset = np.full(n, np.inf)
        self.fault_at = np.full(n, np.inf)
        self.next_reboot = self.time + r.exponential(cfg.reboot_days * DAY, cfg.nodes)
        self.failures: list[Failure] = []
        self._events: list[tuple[int, int, float]] = []
        self._first_step = True
        self._fault_queue: list[list[tuple[float, FaultMode, float]]] = [[] for _ in range(n)]
        self.remedies = Remedies(n)  # faults a reset cures: no draw from `r` (simulator.remedies)
        self.fabric = Fabric(n)  # the node's fabric and rails: no draw from `r` (simulator.fabric)
        self.klog = KernelLog(n)  # the driver's kernel log, an XID only it has (simulator.kernel_log)

    def _start_world(self) -> None:
        """The domain's per-GPU and per-node draws: sensor offsets, heat-sink spread, flaky
        links, repeat-offender nodes; no cooling incident or failed fan yet."""
        d, w, n, nodes = self.d, self.wrng, self.n, self.cfg.nodes
        self.sensor_offset_c = w.normal(0, d.sensor_offset_c, n) if d.sensor_offset_c > 0 else np.zeros(n)
        spread = w.lognormal(0.0, d.resistance_spread, n) if d.resistance_spread > 0 else np.ones(n)
        self.resistance = self.m["thermal_resistance_c_per_w"] * spread
        self.flaky_link = w.random(n) < d.flaky_link_share if d.flaky_link_share > 0 else np.zeros(n, dtype=bool)
        bad = w.random(nodes) < d.bad_node_share if d.bad_node_share > 0 else np.zeros(nodes, dtype=bool)
        self.bad_node = bad
        self.incident_c = np.zeros(nodes)
        self.incident_left_s = np.zeros(nodes)
        self.incident_share = w.uniform(0.8, 1.2, n) if d.node_incidents_per_year > 0 else np.ones(n)
        self.fan_factor = np.ones(nodes)
        self.fan_left_s = np.zeros(nodes)
        self.air_phase = w.uniform(0, DAY) if d.ambient_swing_c > 0 else 0.0

    # -- identity -----------------------------------------------------------
    def _identity(self, i: int) -> SimGpu:
        gen = int(self._generation[i])
        key = f"gpuhealth-sim/{self.cfg.seed}/{i}" + (f"/r{gen}" if gen else "")
        return SimGpu(
            index=int(self.slot[i]),
            node=self.hostnames[int(self.node[i])],
            uuid="GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, key)),
            model=self.models[i],
            pci_bus_id=f"00000000:{0x18 + 0x10 * int(self.slot[i]):02X}:00.0",
            serial=f"1650{self.cfg.seed % 1000:03d}{i:05d}{gen}",
        )

    # -- faults ---------------------------------------------------------------
    def _schedule_random_failures(self) -> None:
        """Draw each slot's failures for a long horizon (a Poisson process per slot)."""
        cfg, r = self.cfg, self.rng
        rate = cfg.annual_failure_rate * cfg.acceleration / YEAR
        if rate <= 0:
            return
        horizon = 3 * YEAR
        mix = cfg.mode_mix
        for i in range(self.n):
            slot_rate = rate * (self.d.bad_node_factor if self.bad_node[self.node[i]] else 1.0)
            # Newer HBM fails more often (the factor), yet the share without precursor stays
            # what the config says, so that recall over all failures stays honest.
            ecc_w = mix["ecc"] * (cfg.ecc_factor_h100 if "A100" not in self.models[i].name else 1.0)
            slow = np.array([ecc_w, mix["thermal"], mix["pcie"]])
            sudden = mix["sudden"] / sum(mix.values())
            w = np.append(slow / slow.sum() * (1.0 - sudden), sudden)
            t = self.time
            while True:
                t += r.exponential(1.0 / slot_rate)
                if t > self.time + horizon:
                    break
                k = r.choice(4, p=w / w.sum())
                if k == 3:
                    mode = SUDDEN_MODES[r.choice(3, p=[0.4, 0.35, 0.25])]
                    lead = 0.0
                else:
                    mode = PRECURSOR_MODES[k]
                    median, sigma = cfg.precursor_days[mode.value]
                    lead = float(np.clip(r.lognormal(np.log(median), sigma), 0.25, 30.0)) * DAY
                self._fault_queue[i].append((t, mode, lead))
        for i in range(self.n):
            self._arm_next(i)

    def _arm_next(self, i: int) -> None:
        q = self._fault_queue[i]
        while q and q[0][0] <= self.time:
            q.pop(0)  # fell inside a repair: that GPU was not there to fail
        if q:
            at, mode, lead = q.pop(0)
            self.fault_mode[i] = _MODE_CODE[mode]
            self.fault_at[i] = at
            self.fault_onset[i] = max(at - lead, self.time)  # a new GPU starts healthy
        else:
            self.fault_mode[i] = 0
            self.fault_at[i] = self.fault_onset[i] = np.inf

    def inject(self, fault: FaultSpec) -> None:
        """Start a fault now; the GPU fails `fault.hours` of simulated time later."""
        if fault.gpu >= self.n:
            raise ValueError(f"fault on GPU {fault.gpu}: the simulated fleet has GPUs 0..{self.n - 1}")
        if fault.mode in (*NODE_MODES, *LOG_MODES):  # the node's, or the kernel log's: not the GPU's fault slot
            (self.fabric if fault.mode in NODE_MODES else self.klog).inject(self, fault)
            return
        i = fault.gpu
        self.fault_mode[i] = _MODE_CODE[fault.mode]
        self.fault_onset[i] = self.time if fault.mode in PRECURSOR_MODES else self.time + fault.hours * HOUR
        self.fault_at[i] = self.time + fault.hours * HOUR

    def reset(self, i: int) -> None:
        """Reset GPU `i` (`simulator.remedies`); ValueError when it is off the bus."""
        self.remedies.reset(self, i)

    def progress(self) -> np.ndarray:
        """Per GPU, how far its precursor has gone: 0 healthy or not begun, 1 failing now."""
        with np.errstate(invalid="ignore"):  # inf - inf for slots without a fault
            span = np.maximum(self.fault_at - self.fault_onset, 1.0)
            p = (self.time - self.fault_onset) / span
        return np.where(np.isfinite(p), np.clip(p, 0.0, 1.0), 0.0)

    def _xid(self, mask: np.ndarray, code: int) -> None:
        idx = np.flatnonzero(mask & ~self.lost)
        for i in idx:
            self._events.append((int(i), code, self.time))
        self.last_xid[idx] = code
        self.xid_now[idx] = code
        self.klog.logged(idx, code, self.time)  # the driver logs every XID

    def drain_events(self) -> list[tuple[int, int, float]]:
        """XID events (gpu, code, sim time) since the last call."""
        ev, self._events = self._events, []
        return ev

    # -- the model ------------------------------------------------------------
    def step(self, dt: float) -> None:
        """Advance simulated time by dt seconds."""
        if dt <= 0:
            raise ValueError("simulation step must be positive")
        m, r, n, d = self.m, self.rng, self.n, self.d
        self.time += dt
        self.xid_now[:] = 0
        self._reboots(dt)
        self._repairs()
        p = self.progress()
        code = self.fault_mode
        ecc = (code == _MODE_CODE[FaultMode.ECC]) & (p > 0) & ~self.failed
        thermal = (code == _MODE_CODE[FaultMode.THERMAL]) & (p > 0) & ~self.failed
        pcie = (code == _MODE_CODE[FaultMode.PCIE]) & (p > 0) & ~self.failed
        self._workload(dt)
        load = self.util / 100.0
        self.power_w = np.clip(
            m["idle_power_w"]
            + (m["power_limit_w"] * 0.97 - m["idle_power_w"]) * load
            + r.normal(0, d.power_noise_w, n),
            m["idle_power_w"] * 0.8,
            m["power_limit_w"],
        )
        # Thermal: first-order lag (heat sinks, ~2 min) towards inlet + slot + R*P; a
        # cooling fault raises the thermal resistance until the GPU passes shutdown.
        cooling = np.where(thermal, 1.0 + d.thermal_gain * p**d.thermal_shape, 1.0)
        air, fans = self._air(dt)
        steady = air + self.slot_offset_c + self.resistance * fans * self.power_w * cooling
        alpha = 1.0 if self._first_step else 1.0 - np.exp(-dt / 120.0)
        self._first_step = False
        self.temp_c = self.temp_c + alpha * (steady - self.temp_c) + r.normal(0, d.temp_noise_c, n)
        # Memory runs 9-18 C above core at idle, less under load; failing cooling widens it.
        mem_extra = np.where(thermal, d.thermal_mem_c * p, 0.0)
        self.mem_temp_c = (
            self.temp_c + self.mem_offset_c * (1.0 - 0.5 * load) + mem_extra + r.normal(0, d.temp_noise_c, n)
        )
        hot = (self.temp_c >= m["slowdown_c"]) | (self.mem_temp_c >= 95.0)
        capped = self.power_w >= m["power_limit_w"] * 0.995
        reasons = np.where(hot, THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL, 0)
        reasons |= np.where(capped, THROTTLE_SW_POWER, 0)
        self.clocks_event_reasons = reasons.astype(float)
        # A slowdown may last part of an interval; charge the share of dt above the threshold.
        over = np.clip((self.temp_c - m["slowdown_c"] + 2.0) / 4.0, 0.0, 1.0)
        self.thermal_violation_us += np.where(hot, dt * 1e6 * over, 0.0)
        self.power_violation_us += np.where(capped, dt * 1e6 * 0.3, 0.0)
        self.sm_clock = np.where(load > 0.05, m["sm_clock_max_mhz"] * np.where(hot, 0.7, 1.0), m["sm_clock_idle_mhz"])
        self.energy_mj += self.power_w * dt * 1000.0
        self.nvlink_crc += r.poisson(1e-6 * dt, n)
        self._ecc(dt, p, ecc)
        self._pcie(dt, p, pcie)
        self._fail(p, thermal)
        self.remedies.ripen(self)
        self.klog.ripen(self)

    def _air(self, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """Per GPU: the air it breathes (inlet, the room's daily swing, node incidents) and the
        factor on its thermal resistance from its node's fans."""
        d, w, nodes = self.d, self.wrng, self.cfg.nodes
        air = self.inlet_c
        if d.ambient_swing_c > 0:
            air = air + d.ambient_swing_c * np.sin(2 * np.pi * (self.time + self.air_phase) / DAY)
        if d.node_incidents_per_year > 0:
            start = (self.incident_left_s <= 0) & (w.random(nodes) < dt / YEAR * d.node_incidents_per_year)
            self.incident_c = np.where(start, w.uniform(*d.node_incident_c, nodes), self.incident_c)
            hours = w.uniform(*d.node_incident_hours, nodes) * HOUR
            self.incident_left_s = np.where(start, hours, self.incident_left_s - dt)
            extra = np.where(self.incident_left_s > 0, self.incident_c, 0.0)
            air = air + extra[self.node] * self.incident_share
        if d.fan_failures_per_year > 0:
            start = (self.fan_left_s <= 0) & (w.random(nodes) < dt / YEAR * d.fan_failures_per_year)
            self.fan_factor = np.where(start, w.uniform(*d.fan_failure_factor, nodes), self.fan_factor)
            hours = w.uniform(*d.fan_repair_hours, nodes) * HOUR
            self.fan_left_s = np.where(start, hours, self.fan_left_s - dt)
            self.fan_factor = np.where(self.fan_left_s > 0, self.fan_factor, 1.0)
        return air, self.fan_factor[self.node]

    def _workload(self, dt: float) -> None:
        """Training steady and high, inference follows the day, idle gaps between jobs."""
        r, n, per, d = self.rng, self.n, self.cfg.gpus_per_node, self.d
        nodes = self.cfg.nodes
        wl = self.workload[::per]
        shifted = d.shift_day > 0 and self.time - self.cfg.start >= d.shift_day * DAY
        share = d.shift_training_share if shifted else d.training_share
        util = d.shift_training_util if shifted else d.training_util
        # Jobs end after ~5 days on average; idle gaps last ~8 h (the defaults).
        end_job = (wl != 2) & (r.random(nodes) < dt / (d.job_days * DAY))
        start_job = (wl == 2) & (r.random(nodes) < dt / (d.idle_hours * HOUR))
        new_kind = r.choice(2, nodes, p=[share, 1.0 - share])
        wl = np.where(end_job | self._spare, 2, np.where(start_job, new_kind, wl))
        self.workload = np.repeat(wl, per)
        day = np.sin(2 * np.pi * (self.time + self.phase) / DAY)
        target = np.select(
            [self.workload == 0, self.workload == 1],
            [r.normal(util, 2, n), 55 + 30 * day + r.normal(0, 5, n)],
            r.uniform(0, 2, n),
        )
        self.util = np.where(self.lost | self.failed | self.remedies.hung, 0.0, np.clip(target, 0, 100))

    def _ecc(self, dt: float, p: np.ndarray, ecc: np.ndarray) -> None:
        r, h, d = self.rng, dt / HOUR, self.d
        # HBM wear-out: SBEs from ~1/day at onset to thousands a day near failure.
        rate_h = np.where(ecc, d.ecc_start_per_h * 10 ** (d.ecc_orders * p), 1e-5)  # healthy: ~95 % never log one
        # Healthy SBE bursts (never fail): a burst of tens to hundreds, a few times a month.
        burst = self.sbe_burst_gpu & (r.random(self.n) < h * d.sbe_bursts_per_day / 24)
        lo, hi = d.sbe_burst_size
        new_sbe = r.poisson(rate_h * h) + np.where(burst, r.integers(int(lo), int(hi), self.n), 0)
        new_sbe = np.where(self.lost, 0, new_sbe)
        self.sbe_vol += new_sbe
        self.sbe_agg += new_sbe
        # XID 92 when the SBE rate is high: NVIDIA's "high single-bit ECC rate".
        self._xid(ecc & (rate_h > 5.0) & (r.random(self.n) < 0.5), XID_SBE_HIGH)
        # Correctable remaps follow the SBE damage, uncorrectable ones come late with DBEs.
        want_corr = np.where(ecc, np.floor(12 * np.clip(p - 0.25, 0, 1)), 0)
        add_corr = np.maximum(want_corr - self.remap_corr, 0) * ecc
        dbe_now = ecc & (p > 0.7) & (r.random(self.n) < 0.05 * h * (p - 0.7) / 0.3)
        self.remap_corr += add_corr
        self.remap_unc += dbe_now
        self.dbe_vol += dbe_now
        self.dbe_agg += dbe_now
        remapped = (add_corr > 0) | dbe_now
        if d.burst_remap_share > 0:
            # A healthy GPU's burst that leaves a weak row: remapped, pending until a reboot, no harm.
            weak = burst & ~ecc & ~self.lost & (self.wrng.random(self.n) < d.burst_remap_share)
            self.remap_corr += weak
            remapped |= weak
        self.remap_pending = np.maximum(self.remap_pending, remapped.astype(float))
        self._xid(dbe_now, XID_DBE)
        self._xid(dbe_now & (r.random(self.n) < 0.5), XID_CONTAINED)
        self._xid(remapped, XID_REMAP)

    def _pcie(self, dt: float, p: np.ndarray, pcie: np.ndarray) -> None:
        r, h, d = self.rng, dt / HOUR, self.d
        # Replays climb ~3 orders of magnitude; the link trains down to x8 half-way.
        rate_h = np.where(pcie, d.pcie_start_per_h * 10 ** (d.pcie_orders * p), 0.01)
        burst = np.minimum(self.replay_burst, r.integers(20, 200, self.n))
        self.replay_burst -= burst
        if d.flaky_link_share > 0:  # healthy links with replay bursts now and then
            w = self.wrng
            flare = self.flaky_link & (w.random(self.n) < h * d.flaky_bursts_per_day / 24)
            burst = burst + np.where(
                flare, w.integers(int(d.flaky_burst_size[0]), int(d.flaky_burst_size[1]) + 1, self.n), 0
            )
        self.replays += np.where(self.lost, 0, r.poisson(rate_h * h) + burst)
        self.link_width = np.where(pcie & (p > d.pcie_narrow_at), self.m["pcie_width_max"] / 2, self.link_width)
        self.link_gen = np.where(pcie & (p > 0.8), np.maximum(self.m["pcie_gen_max"] - 1, 1), self.link_gen)

    def _fail(self, p: np.ndarray, thermal: np.ndarray) -> None:
        r, code = self.rng, self.fault_mode
        overheated = thermal & (self.temp_c >= self.m["shutdown_c"])
        due = ((self.time >= self.fault_at) | overheated) & ~self.failed & (code > 0) & ~np.isin(code, CURED_CODES)
        for i in np.flatnonzero(due):
            mode = _CODE_MODE[int(code[i])]
            xid = {
                FaultMode.ECC: XID_REMAP_FAIL if r.random() < 0.5 else XID_UNCONTAINED,
                FaultMode.THERMAL: XID_OFF_BUS if r.random() < 0.5 else 0,
                FaultMode.PCIE: XID_OFF_BUS,
                FaultMode.OFFBUS: XID_OFF_BUS,
                FaultMode.GSP: XID_GSP_TIMEOUT if r.random() < 0.6 else XID_GSP_ERROR,
                FaultMode.SRAM: XID_UNCONTAINED,
            }[mode]
            if mode == FaultMode.ECC:
                self.remap_failure[i] = 1.0
            if xid:
                self._xid(np.arange(self.n) == i, xid)
            g = self.gpus[i]
            self.failures.append(
                Failure(
                    g.uuid,
                    g.node,
                    self.time,
                    LABEL[mode],
                    mode,
                    xid,
                    float(min(self.fault_onset[i], self.time)),
                )
            )
            self.failed[i] = True  # drained and pulled: the history's rows stop here
            # Off the bus or shut down: NVML loses it. A failed remap leaves it answering.
            self.lost[i] = mode != FaultMode.ECC
            lo, hi = self.cfg.repair_days
            self.repair_at[i] = self.time + r.uniform(lo, hi) * DAY if self.cfg.random_failures else np.inf

    def _repairs(self) -> None:
        """A replacement GPU (new UUID, fresh counters) takes a failed one's slot."""
        for i in np.flatnonzero(self.failed & (self.time >= self.repair_at)):
            self._generation[i] += 1
            self.repairs += 1
            self.gpus[i] = self._identity(int(i))
            self.failed[i] = self.lost[i] = False
            self.repair_at[i] = np.inf
            for arr in (self.sbe_vol, self.dbe_vol, self.sbe_agg, self.dbe_agg, self.remap_corr,
                        self.remap_unc, self.remap_pending, self.remap_failure, self.replays,
                        self.thermal_violation_us, self.power_violation_us, self.nvlink_crc,
                        self.last_xid):  # fmt: skip
                arr[i] = 0.0
            self.link_width[i] = self.m["pcie_width_max"][i]
            self.link_gen[i] = self.m["pcie_gen_max"][i]
            self.remedies.forget(int(i))
            self._arm_next(int(i))

    def _reboots(self, dt: float) -> None:
        """Node reboots: volatile counters reset, pending remaps apply, links retrain."""
        due = self.time >= self.next_reboot
        if not due.any():
            return
        r, per = self.rng, self.cfg.gpus_per_node
        self.next_reboot = np.where(
            due, self.time + r.exponential(self.cfg.reboot_days * DAY, due.size), self.next_reboot
        )
        g = np.repeat(due, per) & ~self.failed
        for arr in (self.sbe_vol, self.dbe_vol, self.replays, self.thermal_violation_us,
                    self.power_violation_us, self.remap_pending):  # fmt: skip
            arr[g] = 0.0
        self.energy_mj[g] = 0.0
        # Link retraining after a reboot sometimes costs a burst of replays (a confounder).
        lo, hi = self.d.reboot_replay_size
        self.replay_burst[g & (r.random(self.n) < self.d.reboot_replay_share)] = r.integers(int(lo), int(hi))
        self.remedies.remedied(self, np.flatnonzero(g))  # a reboot resets its GPUs too

    # -- output ---------------------------------------------------------------
    def values(self) -> dict[str, np.ndarray]:
        """Current values per catalogue short name, one array entry per GPU."""
        m, n = self.m, self.n
        fb_used = np.where(self.util > 5, m["fb_total_mib"] * 0.85, 500.0)
        # Reserved for the driver and firmware, outside used and free (nvmlMemory_v2; ~530 MiB on an H100 80GB).
        fb_reserved = np.round(m["fb_total_mib"] * 0.0065)
        load = self.util / 100.0
        # NVLink: ~50 GB/s per link both ways at full tilt; training all-reduces, inference barely talks.
        nvlink_mbps = m["nvlinks"] * 50_000.0 * load * np.where(self.workload == 0, 0.3, 0.02)
        pcie_tx_kbps, pcie_rx_kbps = np.round(load * 2.0e6), np.round(load * 3.0e6)
        zeros = np.zeros(n)
        return {
            "gpu_temp_c": np.round(self.temp_c + self.sensor_offset_c),
            "memory_temp_c": np.where(self.memtemp_missing, np.nan, np.round(self.mem_temp_c)),
            "slowdown_temp_c": m["slowdown_c"],
            "shutdown_temp_c": m["shutdown_c"],
            "power_w": np.round(self.power_w, 3),
            "power_limit_w": m["power_limit_w"],
            "energy_mj": np.floor(self.energy_mj),
            "sm_clock_mhz": np.round(self.sm_clock),
            "mem_clock_mhz": m["mem_clock_mhz"],
            "clocks_event_reasons": self.clocks_event_reasons.copy(),
            "thermal_violation_us": np.round(self.thermal_violation_us),
            "power_violation_us": np.round(self.power_violation_us),
            "gpu_util_pct": np.round(self.util),
            "mem_copy_util_pct": np.round(self.util * 0.4),
            "enc_util_pct": zeros,
            "dec_util_pct": zeros,
            "fb_used_mib": np.round(fb_used),
            "fb_free_mib": np.round(m["fb_total_mib"] - fb_reserved - fb_used),
            "fb_total_mib": m["fb_total_mib"],
            "prof_gr_engine_active": np.round(load * 0.98, 4),
            "prof_sm_active": np.round(load * 0.9, 4),
            "prof_pipe_tensor_active": np.round(np.where(self.workload == 0, load * 0.45, load * 0.2), 4),
            "prof_dram_active": np.round(load * 0.6, 4),
            "ecc_sbe_volatile": self.sbe_vol.copy(),
            "ecc_dbe_volatile": self.dbe_vol.copy(),
            "ecc_sbe_aggregate": self.sbe_agg.copy(),
            "ecc_dbe_aggregate": self.dbe_agg.copy(),
            # Page retirement is pre-Ampere: NVML answers NOT_SUPPORTED on these GPUs.
            "retired_pages_sbe": np.full(n, np.nan),
            "retired_pages_dbe": np.full(n, np.nan),
            "retired_pages_pending": np.full(n, np.nan),
            "remapped_rows_correctable": self.remap_corr.copy(),
            "remapped_rows_uncorrectable": self.remap_unc.copy(),
            "row_remap_pending": self.remap_pending.copy(),
            "row_remap_failure": self.remap_failure.copy(),
            "pcie_replay_count": self.replays.copy(),
            "pcie_link_gen": self.link_gen.copy(),
            "pcie_link_gen_max": m["pcie_gen_max"],
            "pcie_link_width": self.link_width.copy(),
            "pcie_link_width_max": m["pcie_width_max"],
            "pcie_tx_kbps": pcie_tx_kbps,
            "pcie_rx_kbps": pcie_rx_kbps,
            "nvlink_crc_flit_errors": self.nvlink_crc.copy(),
            "nvlink_crc_data_errors": zeros,
            "nvlink_replay_errors": zeros,
            "nvlink_recovery_errors": zeros,
            "xid": self.last_xid.copy(),
            "recovery_action": self.remedies.recovery_action(self.remap_pending),
            "fb_reserved_mib": fb_reserved,
            "nvlink_bandwidth_mbps": np.round(nvlink_mbps),
            # The same 20 ms PCIe counters, in bytes as DCGM's PROF_PCIE_*_BYTES (the NVML backend's KiB x 1024).
            "pcie_tx_bytes_per_s": pcie_tx_kbps * 1024.0,
            "pcie_rx_bytes_per_s": pcie_rx_kbps * 1024.0,
            "vgpu_license_status": zeros,  # bare metal: no vGPU licensing, DCGM reports 0
            **self.fabric.values(self),
        }

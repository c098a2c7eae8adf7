"""An independent fleet: telemetry and failures written apart from `simulator/`, to measure the model on.

Every model of gpuhealth trains on fleets from `simulator/`, and the cross-domain table
holds out families of that same generator. This one shares none of its code or functional
forms: it imports nothing from `simulator/` or `predictor/`, only `core.history` to write
the frame, and its physics and noise were written from the issue's description of the
fleet that showed the shipped model's precision collapse (issue 14):

- a site whose inlet air swings by the day and drifts with the weather, racks that run
  warmer than others, and **node-wide heat episodes** (a fan wall or a CRAC unit) that heat
  every GPU of a node by 4-14 °C for hours and never fail a GPU;
- jobs that move a whole node between idle, inference and training, and a fleet-wide
  workload shift part way through;
- integer sensors with fleet-specific noise, per-GPU offsets and thermal resistances;
- **confounders that never lead to failure**: bursts of corrected ECC errors (sometimes
  with a correctable row remap, pending until the next driver reload), PCIe replay bursts,
  links trained narrow, and driver reloads that reset the volatile counters;
- failures with their own precursor shapes: ECC (corrected errors growing exponentially,
  then uncorrectable remaps and XID 94 in the last hours; some with no warning at all),
  thermal (a GPU's cooling failing over one to five days until it throttles and drops),
  PCIe (replays growing, the link retraining narrower, then XID 79) and sudden ones;
- a failed GPU leaves its slot for a repair of 2-7 days, and a new GPU (new UUID, fresh
  counters) takes it.

Usage: python scripts/independent_fleet.py --seed 1 --out DIR  (writes DIR/fleet-1.parquet
and DIR/failures-1.csv); `make independent` generates seeds 1-3 and runs `gpuhealth
evaluate` on each.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from core import history

START = pd.Timestamp("2026-03-02T00:00:00Z")
HOUR_US = 3.6e9
MODELS = {
    # name: (TDP W, idle W, max SM MHz, idle SM MHz, mem MHz, slowdown °C, PCIe gen, share of nodes)
    "NVIDIA H100 80GB HBM3": (700.0, 75.0, 1980.0, 345.0, 2619.0, 87.0, 5.0, 0.7),
    "NVIDIA A100-SXM4-80GB": (400.0, 55.0, 1410.0, 210.0, 1593.0, 90.0, 4.0, 0.3),
}
MODES = ("ecc", "thermal", "pcie", "other")
MODE_SHARE = (0.45, 0.2, 0.2, 0.15)
FAILURES_PER_1000_GPU_DAYS = 0.9
"""Five to six times a real fleet's (REFERENCE.md), as the issue's fleet and our simulator have: enough
failures of each kind in 512 GPUs x 90 days to measure recall on."""


@dataclass
class Site:
    """What every GPU of the fleet shares, hour by hour (arrays are hours x nodes)."""

    hours: int
    nodes: int
    inlet: np.ndarray
    """Inlet air per node: the site's base, daily swing, weather drift, the rack's offset."""
    heat: np.ndarray
    """Node-wide heat episodes (°C added to every GPU of the node)."""
    util: np.ndarray
    """The node's job: 0-100 % utilisation."""
    reload: np.ndarray
    """True at the hour a node's driver reloads (volatile counters reset, pending remaps applied)."""
    model: list[str]
    noise_c: float
    """The fleet's temperature sensor noise (σ, °C)."""
    hostnames: list[str]


@dataclass
class Life:
    """One GPU in one slot, from when it was installed to when it failed or the span ended."""

    node: int
    index: int
    uuid: str
    start: int
    end: int
    """Exclusive; the hour after its last sample."""
    mode: str | None
    """Its failure's mode, or None when it survives the span."""


def _ar1(rng: np.random.Generator, n: int, cols: int, phi: float, sigma: float) -> np.ndarray:
    """An AR(1) series per column with stationary σ `sigma`."""
    eps = rng.normal(0.0, sigma * np.sqrt(1 - phi**2), size=(n, cols))
    out = np.empty_like(eps)
    out[0] = rng.normal(0.0, sigma, size=cols)
    for t in range(1, n):
        out[t] = phi * out[t - 1] + eps[t]
    return out


def _episodes(rng: np.random.Generator, hours: int, per_day: float, dur: tuple[float, float]) -> list[tuple[int, int]]:
    """Random (start, end) hour spans at `per_day` a day, each lasting U(dur) hours."""
    out = []
    for _ in range(rng.poisson(per_day * hours / 24)):
        s = int(rng.integers(0, hours))
        out.append((s, min(hours, s + max(1, int(rng.uniform(*dur))))))
    return out


def _site(rng: np.random.Generator, nodes: int, days: int) -> Site:
    hours = days * 24
    t = np.arange(hours)
    base = rng.uniform(19.0, 26.0)
    swing = rng.uniform(0.5, 3.5)
    daily = swing * np.sin(2 * np.pi * (t / 24.0) + rng.uniform(0, 2 * np.pi))
    weather = _ar1(rng, hours, 1, 0.995, rng.uniform(0.5, 2.0))[:, 0]
    racks = rng.normal(0.0, 1.5, size=(nodes + 7) // 8).repeat(8)[:nodes]
    inlet = base + daily[:, None] + weather[:, None] + racks[None, :] + _ar1(rng, hours, nodes, 0.9, 0.4)
    heat = np.zeros((hours, nodes))
    for n in range(nodes):
        for s, e in _episodes(rng, hours, 1 / rng.uniform(30.0, 120.0), (4.0, 36.0)):
            ramp = np.minimum(1.0, np.minimum(np.arange(e - s) + 1, e - np.arange(s, e)) / 2.0)
            heat[s:e, n] += rng.uniform(4.0, 14.0) * ramp
    util = _jobs(rng, hours, nodes)
    reload = np.zeros((hours, nodes), dtype=bool)
    for n in range(nodes):
        h = int(rng.uniform(0, 40 * 24))
        while h < hours:
            reload[h, n] = True
            h += int(rng.uniform(10 * 24, 40 * 24))
    names = list(MODELS)
    shares = np.array([MODELS[m][7] for m in names])
    model = [names[i] for i in rng.choice(len(names), size=nodes, p=shares / shares.sum())]
    hostnames = [f"gn{1000 + n:04d}.r{n // 8:02d}" for n in range(nodes)]
    return Site(hours, nodes, inlet, heat, util, reload, model, rng.uniform(0.3, 1.5), hostnames)


def _jobs(rng: np.random.Generator, hours: int, nodes: int) -> np.ndarray:
    """Each node runs jobs back to back: idle, inference or training; the mix shifts once, fleet-wide."""
    shift_at = int(rng.uniform(0.3, 0.7) * hours)
    mixes = (np.array([0.15, 0.35, 0.5]), rng.dirichlet([2.0, 3.0, 5.0]))
    util = np.empty((hours, nodes))
    for n in range(nodes):
        h = 0
        while h < hours:
            kind = rng.choice(3, p=mixes[h >= shift_at])
            length = max(1, int(rng.lognormal(np.log(12.0), 0.9)))
            e = min(hours, h + length)
            if kind == 0:
                util[h:e, n] = rng.uniform(0.0, 5.0, size=e - h)
            elif kind == 1:
                util[h:e, n] = np.clip(rng.uniform(25, 65) + rng.normal(0, 12, size=e - h), 5, 100)
            else:
                util[h:e, n] = np.clip(rng.uniform(85, 100) + rng.normal(0, 3, size=e - h), 5, 100)
            h = e
    return util


def _lives(rng: np.random.Generator, site: Site, gpus_per_node: int, per_1000_gpu_days: float) -> list[Life]:
    """The GPUs of every slot: failure times from a constant hazard, a repair, a replacement."""
    rate = per_1000_gpu_days / 1000 / 24
    lives = []
    for node in range(site.nodes):
        for index in range(gpus_per_node):
            h = 0
            while h < site.hours:
                # a replacement that fails within a day is not worth a life: at least a day
                fail = h + max(24, int(rng.exponential(1 / rate)))
                uid = f"GPU-{uuid.UUID(bytes=rng.bytes(16), version=4)}"
                if fail >= site.hours:  # survives the span (no precursor without its failure)
                    lives.append(Life(node, index, uid, h, site.hours, None))
                    break
                mode = str(rng.choice(MODES, p=MODE_SHARE))
                lives.append(Life(node, index, uid, h, fail, mode))
                h = fail + int(rng.uniform(2 * 24, 7 * 24))
    return lives


def _ramp(n: int, length: float, shape: float) -> np.ndarray:
    """0 before the last `length` hours of n, rising as (fraction done)^shape to 1 at the end."""
    tau = np.arange(n, 0, -1, dtype=float)  # hours until the end
    return np.clip(1.0 - tau / max(length, 1.0), 0.0, 1.0) ** shape


def _counter(rate: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Poisson events per hour at `rate`."""
    return rng.poisson(np.clip(rate, 0.0, None)).astype(float)


def _at_last_reload(rising: np.ndarray, reload: np.ndarray, before: float) -> np.ndarray:
    """Per hour, a never-falling series' value at the latest driver reload up to that hour (`before`
    until the first): the series never falls, so its latest value there is its largest."""
    return np.maximum.accumulate(np.where(reload, rising, before))


def _resettable(events: np.ndarray, reload: np.ndarray) -> np.ndarray:
    """A volatile counter: the events (>= 0) summed since the last driver reload, that hour's included."""
    total = np.cumsum(events)
    return total - _at_last_reload(total - events, reload, 0.0)  # less what had counted up before it


def _gpu(rng: np.random.Generator, site: Site, life: Life) -> tuple[pd.DataFrame, dict[str, object] | None]:
    """One life's hourly samples, and its failure label (None when it survives)."""
    sl = slice(life.start, life.end)
    n = life.end - life.start
    tdp, idle_w, sm_max, sm_idle, mem_mhz, slowdown, gen, _ = MODELS[site.model[life.node]]
    reload = site.reload[sl, life.node].copy()
    util = np.clip(site.util[sl, life.node] + rng.normal(0, 2, size=n), 0, 100)
    if rng.random() < 0.1:  # a GPU left out of its node's jobs for a while
        s = int(rng.integers(0, n))
        util[s : s + int(rng.uniform(6, 72))] = rng.uniform(0, 3)
    power = idle_w + (tdp - idle_w) * (util / 100) ** rng.uniform(0.8, 1.2) * rng.uniform(0.9, 1.05)
    power = np.minimum(power + rng.normal(0, 0.02 * tdp, size=n), tdp)
    resistance = rng.uniform(30.0, 50.0) / tdp * rng.lognormal(0.0, 0.08)
    offset = rng.normal(0.0, 1.5)
    sensor = _ar1(rng, n, 1, 0.6, site.noise_c)[:, 0]
    excess = np.zeros(n)
    sbe_rate = np.where(rng.random() < 0.05, rng.uniform(0.01, 0.2), 0.0) * np.ones(n)
    replay_rate = rng.lognormal(np.log(0.02), 1.0) * np.ones(n)
    width_max = 16.0
    width = np.full(n, 8.0 if rng.random() < 0.02 else width_max)  # a link trained narrow, healthy
    link_gen = np.full(n, gen)
    dbe = np.zeros(n)
    unc_remap = np.zeros(n)
    xid = np.zeros(n)
    for s, e in _episodes(rng, n, 1 / 40 if rng.random() < 0.08 else 0.0, (2.0, 12.0)):  # SBE bursts, healthy
        sbe_rate[s:e] += rng.uniform(50, 2000) / (e - s)
    for s, e in _episodes(rng, n, 1 / 30 if rng.random() < 0.1 else 0.0, (1.0, 4.0)):  # replay bursts, healthy
        replay_rate[s:e] += rng.uniform(100, 3000) / (e - s)
    if life.mode is not None:
        excess, sbe_rate, replay_rate = _precursor(rng, life.mode, n, tdp, excess, sbe_rate, replay_rate,
                                                   width, link_gen, dbe, unc_remap, xid)  # fmt: skip
    temp = site.inlet[sl, life.node] + site.heat[sl, life.node] + resistance * power + offset + excess * power / tdp
    temp = temp + sensor
    mem_temp = temp + rng.uniform(3, 10) + 3 * util / 100 + rng.normal(0, site.noise_c, size=n)
    if rng.random() < 0.03:
        mem_temp[:] = np.nan
    throttled = np.clip((temp - slowdown) / 4.0, 0.0, 1.0)
    sm = np.where(util > 5, sm_max * (1 - 0.35 * throttled), sm_idle)
    reasons = np.where(util <= 5, 0x1, 0) | np.where(throttled > 0, 0x20, 0) | np.where(throttled > 0.5, 0x40, 0)
    reasons = reasons | np.where(power >= 0.98 * tdp, 0x4, 0)
    sbe = _counter(sbe_rate, rng)
    correctable = np.cumsum(rng.random(n) < np.clip(sbe / 400.0, 0.0, 0.5))
    pending = _pending(correctable + np.cumsum(unc_remap), reload)
    xid = np.where((xid == 0) & (sbe > 200), 92.0, xid)
    replays = _counter(replay_rate, rng)
    frame = pd.DataFrame({
        "timestamp": START + pd.to_timedelta(np.arange(life.start, life.end), unit="h")
        + pd.to_timedelta(rng.integers(0, 20, size=n), unit="s"),
        "hostname": site.hostnames[life.node], "gpu_uuid": life.uuid, "gpu_index": life.index,
        "model_name": site.model[life.node],
        "gpu_temp_c": np.round(temp), "memory_temp_c": np.round(mem_temp), "power_w": power, "power_limit_w": tdp,
        "slowdown_temp_c": slowdown, "gpu_util_pct": np.round(util),
        "mem_copy_util_pct": np.round(util * rng.uniform(0.2, 0.5)), "sm_clock_mhz": np.round(sm),
        "mem_clock_mhz": mem_mhz, "fb_used_mib": np.round(2000 + 75000 * util / 100),
        "fb_free_mib": np.round(81559 - 2000 - 75000 * util / 100), "clocks_event_reasons": reasons.astype(float),
        "thermal_violation_us": np.cumsum(throttled * HOUR_US),
        "power_violation_us": np.cumsum((reasons & 0x4) > 0) * 1e8,
        "energy_mj": np.cumsum(power) * 3.6e6,
        "ecc_sbe_volatile": _resettable(sbe, reload), "ecc_dbe_volatile": _resettable(dbe, reload),
        "ecc_sbe_aggregate": np.cumsum(sbe), "ecc_dbe_aggregate": np.cumsum(dbe),
        "remapped_rows_correctable": correctable.astype(float), "remapped_rows_uncorrectable": np.cumsum(unc_remap),
        "row_remap_pending": pending, "row_remap_failure": (np.cumsum(unc_remap) > 8).astype(float),
        "pcie_replay_count": _resettable(replays, reload), "pcie_link_gen": link_gen, "pcie_link_gen_max": gen,
        "pcie_link_width": width, "pcie_link_width_max": width_max, "xid": xid,
    })  # fmt: skip
    if life.mode is None:
        return frame, None
    failed_at = frame["timestamp"].iloc[-1] + pd.Timedelta(minutes=float(rng.uniform(1, 59)))
    return frame, {"gpu_uuid": life.uuid, "failed_at": failed_at, "mode": life.mode,
                   "hostname": site.hostnames[life.node], "xid": int(xid[-1])}  # fmt: skip


def _pending(remaps: np.ndarray, reload: np.ndarray) -> np.ndarray:
    """1 from a new row remap until the next driver reload applies it (`remaps` is a running count)."""
    if len(remaps) == 0:
        return np.zeros(0)
    applied = _at_last_reload(remaps, reload, remaps[0])
    return (remaps > applied).astype(float)


def _precursor(
    rng: np.random.Generator, mode: str, n: int, tdp: float, excess: np.ndarray, sbe_rate: np.ndarray,
    replay_rate: np.ndarray, width: np.ndarray, link_gen: np.ndarray, dbe: np.ndarray, unc_remap: np.ndarray,
    xid: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The signs of the coming failure, written into the arrays (the last hour is the failure's)."""
    if mode == "ecc":
        if rng.random() < 0.85:  # 15 % fail with no warning
            grow = _ramp(n, rng.uniform(36, 240), 1.0)
            sbe_rate = sbe_rate + rng.uniform(0.5, 5.0) * (np.exp(grow * np.log(rng.uniform(20, 200))) - 1)
            last = int(rng.uniform(6, 48))
            for h in rng.choice(np.arange(max(0, n - last), n), size=min(n, int(rng.integers(1, 5))), replace=False):
                dbe[h] += 1
                unc_remap[h] += 1
                xid[h] = 94.0
        dbe[-1] += 1
        xid[-1] = 95.0
    elif mode == "thermal":
        excess = excess + rng.uniform(12.0, 30.0) * _ramp(n, rng.uniform(24, 120), rng.uniform(1.0, 2.5))
        xid[-1] = 79.0
    elif mode == "pcie":
        length = rng.uniform(12, 120)
        grow = _ramp(n, length, 1.0)
        replay_rate = replay_rate + rng.uniform(0.5, 5.0) * (np.exp(grow * np.log(rng.uniform(50, 500))) - 1)
        if rng.random() < 0.5:
            width[max(0, n - int(rng.uniform(0.1, 0.5) * length)) :] = rng.choice([8.0, 4.0])
        if rng.random() < 0.3:
            link_gen[max(0, n - int(rng.uniform(0.1, 0.5) * length)) :] -= 1
        xid[-1] = 79.0
    else:
        xid[-1] = float(rng.choice([79, 119, 31]))
    return excess, sbe_rate, replay_rate


def generate(
    seed: int, nodes: int = 64, gpus_per_node: int = 8, days: int = 90,
    failures_per_1000_gpu_days: float = FAILURES_PER_1000_GPU_DAYS,
) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """The fleet's history frame and its failure labels."""
    rng = np.random.default_rng([14, seed])
    site = _site(rng, nodes, days)
    frames, failures = [], []
    for life in _lives(rng, site, gpus_per_node, failures_per_1000_gpu_days):
        frame, failure = _gpu(rng, site, life)
        frames.append(frame)
        if failure is not None:
            failures.append(failure)
    fleet = pd.concat(frames, ignore_index=True).sort_values(["timestamp", "gpu_uuid"], ignore_index=True)
    labels = pd.DataFrame(failures, columns=[*history.FAILURE_COLUMNS, "hostname", "xid"])
    return history.validate(fleet), labels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True, help="folder for fleet-SEED.parquet and failures-SEED.csv")
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--days", type=int, default=90)
    args = ap.parse_args(argv)
    fleet, labels = generate(args.seed, args.nodes, args.gpus_per_node, args.days)
    args.out.mkdir(parents=True, exist_ok=True)
    history.write(fleet, args.out / f"fleet-{args.seed}.parquet")
    labels.to_csv(args.out / f"failures-{args.seed}.csv", index=False)
    counts = labels["mode"].value_counts().to_dict()
    gpu_days = fleet.groupby("gpu_uuid", observed=True).size().sum() / 24
    print(f"seed {args.seed}: {fleet['gpu_uuid'].nunique()} GPUs, {gpu_days:,.0f} GPU-days, "
          f"{len(labels)} failures {counts}", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Hour rows kept at ingest (store.hours): what the scorer reads equals rolling the raw samples up."""

from __future__ import annotations

import itertools
from datetime import timedelta

import numpy as np
import pandas as pd

from core.hourly import SHARE, to_hours
from simulator.fleet import SimConfig
from simulator.run import simulate
from store import Store


def _norm(f: pd.DataFrame) -> pd.DataFrame:
    f = f.astype({"gpu_uuid": str, "hostname": str, "model_name": str})
    return f.sort_values(["gpu_uuid", "timestamp"]).reset_index(drop=True)


def test_hours_made_batch_by_batch_equal_the_roll_up_of_all_samples(store: Store) -> None:
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=3, seed=4), days=0.5, interval_s=60)
    # Batches that split hours, arrive out of order, and repeat samples already stored.
    cuts = [0, 100, 700, 1300, len(frame)]
    parts = [frame.iloc[a:b] for a, b in itertools.pairwise(cuts)]
    for p in [parts[0], parts[2], parts[1], parts[3], parts[2], frame.iloc[50:150]]:
        store.samples.ingest(p.reset_index(drop=True))
    end = frame["timestamp"].max().to_pydatetime() - timedelta(minutes=17)  # inside an hour: a raw tail
    got = _norm(store.samples.scoring_history(since=None, until=end))
    want = _norm(to_hours(frame, until=pd.Timestamp(end)))
    assert len(got) == len(want) and (got["timestamp"] == want["timestamp"]).all()
    for c in ("gpu_temp_c", "power_w", "ecc_sbe_volatile", "pcie_replay_count", "xid", "pcie_link_width", SHARE):
        np.testing.assert_allclose(got[c].to_numpy(float), want[c].to_numpy(float), rtol=1e-5, err_msg=c)
    assert got["timestamp"].max() <= pd.Timestamp(end)


def test_a_replicas_share_reads_only_its_hosts(store: Store) -> None:
    frame, _ = simulate(SimConfig(nodes=2, gpus_per_node=2, seed=4), days=0.2, interval_s=300)
    store.samples.ingest(frame)
    end = frame["timestamp"].max().to_pydatetime()
    host = str(frame["hostname"].iloc[0])
    got = store.samples.scoring_history(since=None, until=end, hostnames=[host])
    assert set(got["hostname"].astype(str)) == {host} and got["gpu_uuid"].nunique() == 2
    assert len(store.samples.scoring_history(since=None, until=end, hostnames=["no-such-host"])) == 0


def test_the_first_hour_is_read_from_its_raw_samples_alone(store: Store) -> None:
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=2, seed=4), days=0.5, interval_s=300)
    first = frame[frame["timestamp"] <= frame["timestamp"].min() + pd.Timedelta(minutes=30)]
    store.samples.ingest(first.reset_index(drop=True))
    end = first["timestamp"].max().to_pydatetime()
    got = store.samples.scoring_history(since=None, until=end - timedelta(minutes=1))  # no whole hour stored yet
    assert got["gpu_uuid"].nunique() == 2 and len(got) == 2
    before = first["timestamp"].min().to_pydatetime() - timedelta(hours=2)
    assert len(store.samples.scoring_history(since=None, until=before)) == 0  # nothing at all: an empty frame

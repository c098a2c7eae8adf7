"""Repeat offenders: failures recorded on a GPU's node and in its slot before each cutoff."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core.history import BUS_IDS_ATTR, validate
from predictor.features import build_features

T0 = pd.Timestamp("2026-06-01T00:00:00Z")
H100 = "NVIDIA H100 80GB HBM3"
DAY = pd.Timedelta(days=1)
HOUR = pd.Timedelta(hours=1)
CUT = T0 + 10 * DAY
COUNTS = ["node_failures_30d", "node_failures_180d", "slot_failures_180d"]


def gpu(uuid: str, host: str, index: int, first_day: float = 0.0, last_day: float = 10.0) -> pd.DataFrame:
    ts = pd.date_range(T0 + first_day * DAY, T0 + last_day * DAY, freq="1h")
    return pd.DataFrame(
        {
            "timestamp": ts,
            "hostname": host,
            "gpu_uuid": uuid,
            "gpu_index": index,
            "model_name": H100,
            "gpu_temp_c": 40.0,
        }
    )


def fleet() -> pd.DataFrame:
    """node-a: slot 0 held by GPU-old until day 2, by its replacement GPU-new from day 3;
    slot 1 held by GPU-a1 throughout. node-b: GPU-b0 in slot 0, GPU-b1 in slot 1."""
    return validate(
        pd.concat(
            [
                gpu("GPU-old", "node-a", 0, last_day=2),
                gpu("GPU-new", "node-a", 0, first_day=3),
                gpu("GPU-a1", "node-a", 1),
                gpu("GPU-b0", "node-b", 0),
                gpu("GPU-b1", "node-b", 1),
            ],
            ignore_index=True,
        ),
        source="test",
    )


def failures(*rows: tuple[str, str, pd.Timestamp]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "gpu_uuid": [r[0] for r in rows],
            "hostname": [r[1] for r in rows],
            "failed_at": pd.to_datetime([r[2] for r in rows], utc=True),
            "mode": "ecc",
        }
    )


def counts(fails: pd.DataFrame | None, cut: pd.Timestamp | list[pd.Timestamp] = CUT) -> pd.DataFrame:
    cuts = [cut] if isinstance(cut, pd.Timestamp) else cut
    f = build_features(fleet(), pd.DatetimeIndex(cuts), failures=fails)
    return f.set_index(["gpu_uuid", "cutoff"])[COUNTS]


def at(c: pd.DataFrame, uuid: str, cut: pd.Timestamp = CUT) -> list[float]:
    return c.loc[(uuid, cut)].tolist()


def test_no_failure_records_give_zeros() -> None:
    for fails in (None, failures()):
        c = counts(fails)
        assert len(c) == 4  # GPU-old is stale at the cutoff
        assert (c.to_numpy() == 0).all()
        assert not c.isna().any().any(), "no records is 0 failures, not unknown"


def test_only_failures_strictly_before_the_cutoff_and_within_the_window() -> None:
    fails = failures(
        ("GPU-b0", "node-b", CUT - HOUR),  # 30 d, 180 d
        ("GPU-b0", "node-b", CUT - 29 * DAY),  # 30 d, 180 d
        ("GPU-b0", "node-b", CUT - 30 * DAY),  # on the edge: 180 d only (the window is open there)
        ("GPU-b0", "node-b", CUT - 31 * DAY),  # 180 d
        ("GPU-b0", "node-b", CUT - 179 * DAY),  # 180 d
        ("GPU-b0", "node-b", CUT - 181 * DAY),  # too old
        ("GPU-b0", "node-b", CUT),  # at the cutoff: not yet recorded
        ("GPU-b0", "node-b", CUT + HOUR),  # the future
    )
    c = counts(fails)
    assert at(c, "GPU-b0") == [2, 5, 5]
    assert at(c, "GPU-b1") == [2, 5, 0], "its node's failures, none in its slot"
    assert at(c, "GPU-a1") == [0, 0, 0], "another node"


def test_each_cutoff_counts_its_own_past() -> None:
    fails = failures(("GPU-b0", "node-b", T0 + 4 * DAY), ("GPU-b1", "node-b", T0 + 8 * DAY))
    early, late = T0 + 5 * DAY, CUT
    c = counts(fails, [early, late])
    assert at(c, "GPU-b0", early) == [1, 1, 1]
    assert at(c, "GPU-b0", late) == [2, 2, 1]
    assert at(c, "GPU-b1", early) == [1, 1, 0]
    assert at(c, "GPU-b1", late) == [2, 2, 1]


def test_the_slot_counts_the_failure_of_the_gpu_it_replaced() -> None:
    c = counts(failures(("GPU-old", "node-a", T0 + 2 * DAY)))
    assert at(c, "GPU-new") == [1, 1, 1], "a different uuid in the same host and index"
    assert at(c, "GPU-a1") == [1, 1, 0], "the same node, another slot"
    assert at(c, "GPU-b0") == [0, 0, 0], "the same index on another node is another slot"


def test_failures_of_gpus_not_in_the_history_count_on_their_node() -> None:
    c = counts(failures(("GPU-gone-long-ago", "node-a", CUT - 60 * DAY), ("GPU-elsewhere", "node-z", CUT - DAY)))
    for uuid in ("GPU-new", "GPU-a1"):
        assert at(c, uuid) == [0, 1, 0]
    assert at(c, "GPU-b0") == [0, 0, 0]


def test_failure_times_as_text_and_categorical_hosts() -> None:
    fails = failures(("GPU-b0", "node-b", CUT - DAY))
    fails["failed_at"] = fails["failed_at"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    fails["hostname"] = fails["hostname"].astype("category")
    assert at(counts(fails), "GPU-b0") == [1, 1, 1]


@pytest.mark.parametrize("unit", ["s", "us"])
def test_failure_times_in_another_resolution(unit: str) -> None:
    fails = failures(("GPU-b0", "node-b", CUT - DAY), ("GPU-b0", "node-b", CUT - 40 * DAY))
    fails["failed_at"] = fails["failed_at"].astype(f"datetime64[{unit}, UTC]")
    assert at(counts(fails), "GPU-b0") == [1, 2, 2]


def test_counts_are_whole_numbers_per_row() -> None:
    fails = failures(*((("GPU-b0", "node-b", CUT - k * DAY)) for k in range(1, 8)))
    c = counts(fails)
    assert np.array_equal(c.to_numpy(), np.round(c.to_numpy()))
    assert at(c, "GPU-b0") == [7, 7, 7]


def test_a_slot_counts_each_gpu_it_lost_once_within_60_days() -> None:
    """GPU-old's failure and its RMA are one GPU lost; GPU-new's own failure is a second (decision 0089)."""
    fails = failures(
        ("GPU-old", "node-a", T0 + 1 * DAY),
        ("GPU-old", "node-a", T0 + 2 * DAY),  # its RMA
        ("GPU-new", "node-a", CUT - HOUR),
        ("GPU-b0", "node-b", CUT - 61 * DAY),  # out of the window
        ("GPU-b0", "node-b", CUT - DAY),
    )
    f = build_features(fleet(), CUT, failures=fails).set_index("gpu_uuid")["slot_gpus_failed_60d"]
    assert f.to_dict() == {"GPU-new": 2, "GPU-a1": 0, "GPU-b0": 1, "GPU-b1": 0}
    assert (build_features(fleet(), CUT)["slot_gpus_failed_60d"] == 0).all()


def test_where_the_bus_ids_are_known_the_slot_that_lost_gpus_is_the_bus_id() -> None:
    """GPU-new at GPU-a1's index after a renumbering: by bus id it is GPU-old's slot that lost two GPUs."""
    frame = fleet()
    frame.attrs[BUS_IDS_ATTR] = {"GPU-old": "00000000:41:00.0", "GPU-new": "00000000:41:00.0",
                                 "GPU-a1": "00000000:18:00.0"}  # fmt: skip
    frame["gpu_index"] = frame["gpu_index"].where(frame["gpu_uuid"] != "GPU-new", 1)
    fails = failures(("GPU-old", "node-a", T0 + 1 * DAY), ("GPU-new", "node-a", CUT - HOUR))
    f = build_features(frame, CUT, failures=fails).set_index("gpu_uuid")["slot_gpus_failed_60d"]
    assert (f["GPU-new"], f["GPU-a1"]) == (2, 0)

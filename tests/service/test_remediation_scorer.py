"""The scorer reads returns: a GPU reset for an XID 119 and returned after verification is not asked for the
same reset again by the 7-day XID rule (its score agrees with its return), and a new XID after the return is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from predictor.thresholds import Thresholds
from service.remediation import forget_before_return
from service.scorer import Scorer
from store import Store
from tests.service.tiny_model import constant_model

T0 = datetime(2026, 3, 1, tzinfo=UTC)
XID_AT = T0 + timedelta(days=2)
RETURNED = XID_AT + timedelta(hours=2)


def samples(xids: dict[datetime, float], hours: int = 3 * 24) -> pd.DataFrame:
    rows = []
    for i in range(hours * 12):
        t = T0 + timedelta(minutes=5 * i)
        rows.append({"timestamp": t, "hostname": "n1", "gpu_uuid": "GPU-a", "gpu_index": 0,
                     "model_name": "NVIDIA H100 80GB HBM3", "gpu_temp_c": 40.0 + i % 7, "power_w": 300.0 + i % 11,
                     "xid": xids.get(t, 0.0)})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'r.db'}")


def returned(store: Store) -> None:
    r = store.remediations.create({"target": "sim", "hostname": "n1", "gpu_uuid": "GPU-a", "gpu_index": 0,
                                   "remedy": "reset", "due": "now", "cause": "XID 119", "detected_at": XID_AT,
                                   "opened_at": XID_AT})  # fmt: skip
    assert store.remediations.move(r["id"], stage="drain", values={"stage": None, "result": "returned",
                                                                   "closed_at": RETURNED})  # fmt: skip


def record(store: Store, at: datetime) -> dict[str, object]:
    (rec,) = Scorer(store, constant_model(), Thresholds(), 300).run_once(at=at)
    return rec


def test_a_returned_gpu_is_not_asked_again_for_the_xid_it_was_reset_for(store: Store) -> None:
    store.samples.ingest(samples({XID_AT: 119.0}))
    before = record(store, XID_AT + timedelta(hours=1))
    assert (before["decision"], before["remedy"], before["remedy_when"]) == ("drain", "reset", "now")
    returned(store)
    after = record(store, RETURNED + timedelta(hours=1))
    assert after["decision"] != "drain" and after["remedy"] == "none", after


def test_a_new_xid_after_the_return_asks_again(store: Store) -> None:
    store.samples.ingest(samples({XID_AT: 119.0, RETURNED + timedelta(minutes=30): 119.0}))
    returned(store)
    again = record(store, RETURNED + timedelta(hours=1))
    assert (again["decision"], again["remedy"]) == ("drain", "reset")


def test_forget_before_return_leaves_other_gpus_and_later_rows() -> None:
    f = samples({XID_AT: 119.0, RETURNED + timedelta(minutes=30): 120.0})
    other = f.assign(gpu_uuid="GPU-b")
    both = pd.concat([f, other], ignore_index=True).astype({"gpu_uuid": "category"})
    out = forget_before_return(both, {"GPU-a": RETURNED})
    a, b = out[out["gpu_uuid"] == "GPU-a"], out[out["gpu_uuid"] == "GPU-b"]
    assert set(a.loc[a["xid"] > 0, "xid"]) == {120.0}
    assert set(b.loc[b["xid"] > 0, "xid"]) == {119.0, 120.0}
    assert forget_before_return(both, {}) is both and forget_before_return(both, {"GPU-z": RETURNED}) is both


def test_forget_before_return_copies_only_the_xids() -> None:
    """The frame is the scorer's window (`store.window`): a round with a returned GPU must not copy it whole."""
    f = samples({XID_AT: 119.0}).astype({"gpu_uuid": "category"})
    temp = f["gpu_temp_c"].to_numpy()
    out = forget_before_return(f, {"GPU-a": RETURNED})
    assert (out["xid"] == 0).all() and (f["xid"] == 119.0).any()  # the frame given is as it was
    assert np.shares_memory(out["gpu_temp_c"].to_numpy(), temp)

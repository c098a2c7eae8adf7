"""Decisions that follow the remedy (issue 57): each source at the score() level, on a simulated history.

A pending row remap alone is watch + reset at idle (NVIDIA's memory error management guide), the
driver's recovery action drains for a reset or reboot, a GSP error (XID 119/120) drains for a reset, a
contained uncorrectable error (XID 94) on a GPU with dynamic page offlining drains nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core import history
from predictor.model import RiskModel
from predictor.score import score
from simulator.fleet import SimConfig
from simulator.models import parse_mix
from simulator.run import simulate


@pytest.fixture(scope="module")
def fleet() -> pd.DataFrame:
    """4 nodes x 8 GPUs x 20 days (A100 and H100), no failures: every GPU healthy and ok, no action asked."""
    frame, _ = simulate(SimConfig(nodes=4, gpus_per_node=8, seed=3, models=parse_mix("A100=0.5,H100=0.5")), 20)
    frame["recovery_action"] = 0.0
    return frame


@pytest.fixture(scope="module")
def plain(shipped_model: RiskModel, fleet: pd.DataFrame) -> pd.DataFrame:
    return score(shipped_model, fleet).set_index("gpu_uuid")


def _gpu(plain: pd.DataFrame, k: int = 0) -> str:
    """The k-th GPU the plain round leaves ok with a known, low ECC risk."""
    ok = plain[(plain["decision"] == "ok") & (plain["risk_ecc"] < 0.1)]
    return str(ok.index[k])


def _scored(model: RiskModel, fleet: pd.DataFrame, uuid: str, hours: int = 3, **last: float) -> pd.Series:
    """Score the fleet with `uuid`'s last `hours` hours of samples set to `last` (column -> value)."""
    f = fleet.copy()
    t1 = f.loc[f["gpu_uuid"] == uuid, "timestamp"].max()
    at = (f["gpu_uuid"] == uuid) & (f["timestamp"] > t1 - pd.Timedelta(hours=hours))
    for col, value in last.items():
        f.loc[at, col] = value
    return score(model, history.validate(f, source="test")).set_index("gpu_uuid").loc[uuid]


def test_a_pending_remap_alone_is_watch_and_a_reset_at_idle(
    shipped_model: RiskModel, fleet: pd.DataFrame, plain: pd.DataFrame
) -> None:
    got = _scored(shipped_model, fleet, _gpu(plain), row_remap_pending=1.0)
    assert (got["decision"], got["remedy"], got["remedy_when"]) == ("watch", "reset", "idle")
    assert any("row remap pending" in r for r in got["reasons"])


def test_a_recent_xid_119_drains_for_a_reset_now(
    shipped_model: RiskModel, fleet: pd.DataFrame, plain: pd.DataFrame
) -> None:
    got = _scored(shipped_model, fleet, _gpu(plain), hours=1, xid=119.0)
    assert (got["decision"], got["remedy"], got["remedy_when"]) == ("drain", "reset", "now")
    assert any("XID 119" in r for r in got["reasons"])


@pytest.mark.parametrize(
    ("action", "remedy"), [(1.0, "reset"), (4.0, "reset"), (2.0, "reboot"), (7.0, "reboot"), (3.0, "none")]
)
def test_the_drivers_recovery_action_drains(
    shipped_model: RiskModel, fleet: pd.DataFrame, plain: pd.DataFrame, action: float, remedy: str
) -> None:
    got = _scored(shipped_model, fleet, _gpu(plain), recovery_action=action)
    assert (got["decision"], got["remedy"]) == ("drain", remedy)
    if remedy == "none":  # drain P2P: no remedy yet, the action is read again once P2P work is drained
        assert any("read the action again" in r for r in got["reasons"])
    else:
        assert got["remedy_when"] == "now"


def test_a_contained_uncorrectable_error_with_page_offlining_drains_nothing(
    shipped_model: RiskModel, fleet: pd.DataFrame, plain: pd.DataFrame
) -> None:
    """XID 94 with a DBE on an A100/H100 (dynamic page offlining, row remapping reported): the page is
    offlined already and NVIDIA's guide lets unaffected work go on; an uncontained one (XID 95) drains."""
    uuid = _gpu(plain)
    dbe = float(np.nanmax(fleet.loc[fleet["gpu_uuid"] == uuid, "ecc_dbe_aggregate"])) + 1.0
    got = _scored(shipped_model, fleet, uuid, hours=1, xid=94.0, ecc_dbe_aggregate=dbe, ecc_dbe_volatile=1.0)
    assert got["decision"] not in ("drain", "rma")
    worse = _scored(shipped_model, fleet, uuid, hours=1, xid=95.0, ecc_dbe_aggregate=dbe, ecc_dbe_volatile=1.0)
    assert (worse["decision"], worse["remedy"], worse["remedy_when"]) == ("drain", "reset", "now")

"""Node findings of the fabric, NVLink links and InfiniBand rails: every GPU of the node demoted, with reasons."""

from __future__ import annotations

from typing import Any

import pandas as pd

from alerts import config as alert_config
from core.infiniband import RAILS_ATTR
from predictor.fabric import FLAPS_PER_HOUR, fabric_findings, is_node_fabric_reason, with_node_findings

T0 = pd.Timestamp("2026-12-07 10:00", tz="UTC")


def frame(hosts: dict[str, int], hours: int = 3, **cols: Any) -> pd.DataFrame:
    """Hour rows of `hosts` (name -> GPUs); `cols[name]` is fn(host, gpu, hour) -> value."""
    rows = []
    for host, n in hosts.items():
        for g in range(n):
            for h in range(hours):
                row = {"timestamp": T0 + pd.Timedelta(hours=h), "hostname": host, "gpu_uuid": f"{host}-{g}",
                       "gpu_index": g, "model_name": "H100"}  # fmt: skip
                row.update({c: fn(host, g, h) for c, fn in cols.items()})
                rows.append(row)
    return pd.DataFrame(rows)


def records(hosts: dict[str, int], decision: str = "ok") -> list[dict[str, Any]]:
    return [
        {"gpu_uuid": f"{h}-{g}", "hostname": h, "decision": decision, "reasons": []}
        for h, n in hosts.items()
        for g in range(n)
    ]


HOSTS = {"node-a": 8, "node-b": 8}


def test_a_fleet_without_the_columns_or_with_all_healthy_has_no_findings() -> None:
    assert fabric_findings(frame(HOSTS)).node == {}
    healthy = frame(HOSTS, nvlink_links_down=lambda *_: 0.0, gpu_fabric_state=lambda *_: 3.0,
                    ib_rail_link_downed=lambda *_: 1.0)  # fmt: skip
    recs = records(HOSTS)
    assert with_node_findings(recs, healthy) == records(HOSTS)


def test_fabric_not_ready_on_every_gpu_demotes_the_node_with_its_reason() -> None:
    f = frame(HOSTS, gpu_fabric_state=lambda host, g, h: 1.0 if host == "node-a" and h == 2 else 3.0)
    recs = with_node_findings(records(HOSTS), f)
    a = [r for r in recs if r["hostname"] == "node-a"]
    assert {r["decision"] for r in a} == {"demote"}
    assert a[0]["reasons"] == [
        "fabric not ready on 8 of 8 GPUs of node-a (registration not started): check nvidia-fabricmanager; "
        "not for multi-GPU work"
    ]
    assert all(r["decision"] == "ok" and r["reasons"] == [] for r in recs if r["hostname"] == "node-b")


def test_a_link_down_on_one_gpu_is_the_nodes_finding_and_never_lowers_a_decision() -> None:
    f = frame(HOSTS, nvlink_links_down=lambda host, g, h: 2.0 if (host, g) == ("node-b", 3) else 0.0)
    recs = records(HOSTS)
    recs[9]["decision"] = "drain"
    out = with_node_findings(recs, f)
    b = [r for r in out if r["hostname"] == "node-b"]
    assert [r["decision"] for r in b] == ["demote", "drain", *["demote"] * 6]
    assert b[0]["reasons"] == ["NVLink link down: 2 link(s) down on GPU 3 of node-b (nvidia-smi nvlink -s): "
                               "not for multi-GPU work"]  # fmt: skip


def test_a_flapping_rail_says_so_on_its_gpus_and_demotes_the_node() -> None:
    # GPUs 4 and 5 share a rail that goes down four times an hour; the others' ports are quiet.
    f = frame(HOSTS, ib_rail_link_downed=lambda host, g, h: 4.0 * h if (host, g) in (("node-a", 4), ("node-a", 5))
              else 0.0)  # fmt: skip
    recs = with_node_findings(records(HOSTS), f)
    a = {r["gpu_uuid"]: r for r in recs if r["hostname"] == "node-a"}
    assert {r["decision"] for r in a.values()} == {"demote"}
    assert a["node-a-4"]["reasons"] == [
        "InfiniBand rail flapping: its rail went down 4 times in the last 60 minutes "
        "(gpuhealth_infiniband_port_gpu_info names the port): not for multi-node work"
    ]
    assert a["node-a-0"]["reasons"] == [
        "InfiniBand rail flapping: the rail of GPU 4, 5 of node-a went down 4 times in the last 60 minutes: "
        "not for multi-node work"
    ]
    assert all(is_node_fabric_reason(x) for r in a.values() for x in r["reasons"])
    assert all(r["decision"] == "ok" for r in recs if r["hostname"] == "node-b")


def test_three_flaps_an_hour_or_a_counter_restart_is_no_finding() -> None:
    assert FLAPS_PER_HOUR == alert_config.IB_FLAPS_PER_HOUR  # the alert's policy, one number
    three = frame(HOSTS, ib_rail_link_downed=lambda host, g, h: 3.0 * h)
    assert fabric_findings(three).node == {}
    restarted = frame(HOSTS, ib_rail_link_downed=lambda host, g, h: [40.0, 41.0, 1.0][h])
    assert fabric_findings(restarted).node == {}


def test_a_gpu_on_a_flapping_rail_names_its_port_when_the_store_knows_it() -> None:
    # The store's GPU records carry each GPU's rail (collector.infiniband's ties, or port_gpu_info in fleet
    # mode); the scoring frame holds them as core.infiniband.RAILS_ATTR.
    f = frame(HOSTS, ib_rail_link_downed=lambda host, g, h: 4.0 * h if (host, g) in (("node-a", 4), ("node-a", 5))
              else 0.0)  # fmt: skip
    f.attrs[RAILS_ATTR] = {"node-a-4": "mlx5_2/1", "node-a-5": "mlx5_2/1", "node-a-0": "mlx5_0/1"}
    a = {r["gpu_uuid"]: r for r in with_node_findings(records(HOSTS), f) if r["hostname"] == "node-a"}
    assert a["node-a-4"]["reasons"] == [
        "InfiniBand rail flapping: its rail mlx5_2/1 went down 4 times in the last 60 minutes: not for multi-node work"
    ]
    assert a["node-a-0"]["reasons"] == [
        "InfiniBand rail flapping: the rail mlx5_2/1 of GPU 4, 5 of node-a went down 4 times in the last 60 minutes: "
        "not for multi-node work"
    ]
    # Rails named apart by the store: each GPU says its own, the node names both.
    f.attrs[RAILS_ATTR] = {"node-a-4": "mlx5_2/1", "node-a-5": "mlx5_3/1"}
    a = {r["gpu_uuid"]: r for r in with_node_findings(records(HOSTS), f) if r["hostname"] == "node-a"}
    assert a["node-a-5"]["reasons"][0].startswith("InfiniBand rail flapping: its rail mlx5_3/1 went down 4 times")
    assert a["node-a-0"]["reasons"][0].startswith("InfiniBand rail flapping: the rails mlx5_2/1, mlx5_3/1 of GPU 4, 5")

"""The pods and jobs on each GPU, latest only, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from store import Store
from tests.store.conftest import T0


def test_the_newest_report_wins_and_an_empty_one_clears(store: Store) -> None:
    pod = {"pod": "train-0", "namespace": "ml", "container": "main"}
    job = {"hpc_job": "4242"}
    assert store.workloads.replace({"GPU-a": [pod], "GPU-b": [job, {"hpc_job": "4243", "GPU_I_ID": "1"}]}, T0) == 2
    got = store.workloads.of(["GPU-a", "GPU-b", "GPU-c"])
    assert got["GPU-a"] == {"workloads": [pod], "seen_at": T0} and len(got["GPU-b"]["workloads"]) == 2
    assert "GPU-c" not in got
    store.workloads.replace({"GPU-a": []}, T0 + timedelta(minutes=1))  # the pod ended
    store.workloads.replace({"GPU-b": [{"hpc_job": "1"}]}, T0 - timedelta(minutes=1))  # late: ignored
    got = store.workloads.of(["GPU-a", "GPU-b"])
    assert got["GPU-a"]["workloads"] == [] and got["GPU-b"]["workloads"][0] == job
    assert store.workloads.of([]) == {} and store.workloads.replace({}, T0) == 0

"""Identities the store cannot keep (issue 55.2 and 55.3): skipped per GPU, on SQLite and on PostgreSQL alike,
whether they come in a history frame or in a pull from Prometheus; an unknown GPU index is kept as NULL."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from core import identity
from service.puller import PrometheusPuller
from store import Store
from store.schema import T_GPUS, T_NODES, samples
from tests.core.test_prom_import import URL, FakePrometheus, gpu_labels
from tests.store.conftest import T0, frame

ODD = {
    "GPU-long-host": {"hostname": "h" * 300},
    "GPU-nul-host": {"hostname": "node-\x00b"},
    "GPU-long-model": {"model_name": "m" * 256},
    "GPU-nul-model": {"model_name": "H100\x00"},
    "GPU-negative": {"gpu_index": -5},
    "GPU-" + "u" * 61: {},
}


def test_the_limits_are_the_store_columns() -> None:
    assert T_GPUS.c.uuid.type.length == samples.c.gpu_uuid.type.length == identity.UUID_CHARS
    assert T_GPUS.c.hostname.type.length == T_NODES.c.hostname.type.length == identity.NAME_CHARS
    assert T_GPUS.c.model_name.type.length == identity.NAME_CHARS


def test_gpus_the_store_cannot_keep_are_skipped_and_the_rest_stored(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: PostgreSQL refused the whole frame (a DataError), SQLite kept every odd value."""
    rows = [{"timestamp": T0, "gpu_uuid": "GPU-ok", "gpu_temp_c": 40.0}]
    rows += [{"timestamp": T0, "gpu_uuid": uuid, "gpu_temp_c": 40.0, **odd} for uuid, odd in ODD.items()]
    with caplog.at_level(logging.WARNING, logger="store.samples"):
        assert store.samples.ingest(frame(rows)) == 1
    assert [g["uuid"] for g in store.gpus.find()[0]] == ["GPU-ok"]
    assert store.counts()["samples"] == 1
    for reason in ("label_too_long", "nul_byte", "index_out_of_range"):
        assert reason in caplog.text
    assert "\x00" not in caplog.text


def test_an_unknown_index_is_kept_as_null(store: Store) -> None:
    """A history's -1 is "unknown": stored as NULL (as a GPU only ever scored has), read back as -1."""
    assert (
        store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-a", "gpu_index": -1, "gpu_temp_c": 40.0}])) == 1
    )
    assert store.gpus.get("GPU-a")["gpu_index"] is None
    assert store.samples.history()["gpu_index"].tolist() == [-1]


def test_a_pull_skips_odd_series_and_stores_every_other_gpu(store: Store) -> None:
    """Before, on PostgreSQL: every pull failed for as long as one such series existed, nothing stored."""
    prom = FakePrometheus()
    step = 30_000
    t0 = int(T0.timestamp() * 1000)
    points = {t0 + k * step: 50.0 for k in range(12)}
    for i in range(2):
        prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(i), points)
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(2) | {"Hostname": "h" * 300}, points)
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(3) | {"modelName": "NVIDIA\x00H100"}, points)
    now = T0 + timedelta(seconds=10 * 30 + 20)
    puller = PrometheusPuller(
        store, URL, every_s=60, step_s=30, backfill=timedelta(minutes=10), client=prom.client(), now=lambda: now
    )
    assert puller.pull_once() == 2 * 11
    assert sorted(g["uuid"] for g in store.gpus.find()[0]) == ["GPU-0", "GPU-1"]
    assert puller.state.skipped["label_too_long"] == 1 and puller.state.skipped["nul_byte"] == 1
